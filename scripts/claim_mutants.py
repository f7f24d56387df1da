"""Plausible one-line bugs in the claim rules (src/scaleprobe/core/claim.py), each applied to a
copy of the source in turn: tests/unit/core/test_claim.py must fail on every one of them.

    python scripts/claim_mutants.py        # prints each mutant and whether the tests caught it

Exit 1 when a mutant survives (or no longer applies: the rule it mutates was rewritten)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = "scaleprobe/core/claim.py"
MUTANTS = [
    ("interval edge: an interval from exactly the reference counts as above",
     "if iv.lo > hi_bar:", "if iv.lo >= hi_bar:"),
    ("interval edge: an interval up to exactly the reference counts as below",
     "if iv.hi < lo_bar:", "if iv.hi <= lo_bar:"),
    ("above and below swapped",
     "            return RULE_ABOVE\n        if iv.hi < lo_bar:\n            return RULE_BELOW",
     "            return RULE_BELOW\n        if iv.hi < lo_bar:\n            return RULE_ABOVE"),
    ("one repeat treated as two",
     "if n is not None and n < MIN_REPEATS_TO_DECIDE:",
     "if n is not None and n < MIN_REPEATS_TO_DECIDE - 1:"),
    ("two repeats treated as one",
     "if n is not None and n < MIN_REPEATS_TO_DECIDE:",
     "if n is not None and n <= MIN_REPEATS_TO_DECIDE:"),
    ("the larger side's repeats count", "return min(self.repeats)", "return max(self.repeats)"),
    ("load caveat dropped in Markdown",
     'return f"*{v}*" if k == "load" else v', 'return "" if k == "load" else v'),
    ("load caveat dropped in HTML",
     "return f'<em class=\"load\">{v}</em>' if k == \"load\" else v",
     "return \"\" if k == \"load\" else v"),
    ("every source must be loaded for the caveat",
     "hits = [s for s in sources if s.under_load]",
     "hits = list(sources) if all(s.under_load for s in sources) else []"),
    ("an unmeasured load counts as load",
     "hits = [s for s in sources if s.under_load]",
     "hits = [s for s in sources if s.under_load is not False]"),
    ("band edge inclusive", "if lo < iv.lo and iv.hi < hi:", "if lo <= iv.lo and iv.hi <= hi:"),
    ("band outside needs only one bound outside",
     "if iv.hi < lo or iv.lo > hi:", "if iv.lo < lo or iv.hi > hi:"),
    ("one repeat leans the wrong way",
     "elif iv.hi < self.ref and self.below:\n                lean = self.below",
     "elif iv.hi < self.ref and self.below:\n                lean = self.above"),
    ("batch bar: the point bar for the range",
     "lo_bar, hi_bar = self.ref_range or (self.ref, self.ref)",
     "lo_bar, hi_bar = (self.ref, self.ref)"),
    ("batch bar: the range's ends swapped",
     "lo_bar, hi_bar = self.ref_range or (self.ref, self.ref)",
     "hi_bar, lo_bar = self.ref_range or (self.ref, self.ref)"),
    ("ranking: one repeat treated as two",
     "    if repeats >= MIN_REPEATS_TO_DECIDE:\n        return (f\"{what}: {INCONCLUSIVE}",
     "    if repeats >= 1:\n        return (f\"{what}: {INCONCLUSIVE}"),
    ("no interval judged as decided", "            return RULE_NO_INTERVAL\n",
     "            return RULE_ABOVE\n"),
    ("one repeat without an interval is merely 'no interval'",
     "        if n is not None and n < MIN_REPEATS_TO_DECIDE:\n            return RULE_ONE_REPEAT\n        if iv is None:",
     "        if iv is None:\n            return RULE_NO_INTERVAL\n        if n is not None and n < MIN_REPEATS_TO_DECIDE:\n            return RULE_ONE_REPEAT\n        if iv is None:"),
]


def _fails(text: str) -> bool:
    """Do the claim tests fail with ``text`` as the claim module?"""
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(ROOT / "src", Path(tmp) / "src")
        (Path(tmp) / "src" / TARGET).write_text(text)
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
             str(ROOT / "tests/unit/core/test_claim.py")],
            env={"PYTHONPATH": str(Path(tmp) / "src"), "PATH": "/usr/bin:/bin"},
            capture_output=True, cwd=tmp).returncode != 0


def main() -> int:
    src = (ROOT / "src" / TARGET).read_text()
    if _fails(src):  # the tests must pass on the unmutated copy, or nothing is measured
        print("the claim tests fail without a mutant")
        return 1
    survivors = 0
    for name, old, new in MUTANTS:
        if old not in src:
            print(f"NOT APPLIED  {name}")
            survivors += 1
            continue
        caught = _fails(src.replace(old, new, 1))
        survivors += not caught
        print(f"{'caught  ' if caught else 'SURVIVED'}     {name}")
    print(f"{len(MUTANTS) - survivors} of {len(MUTANTS)} mutants caught")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
