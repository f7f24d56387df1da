"""What `scaleprobe wrap` costs a compiled script: examples/scripts/gpt_compiled.py (a small GPT,
AdamW, a DataLoader of the standard library's text, ``torch.compile(model)``) bare and under
wrap, in fresh processes, interleaved (bare, wrap, bare, wrap ...). Both sides are measured by
the script's own clock (its ``own: ... samples_per_s=X`` over the steps after its warm-up), so
a compile or recompile that wrap caused inside the script's window shows in the ratio. Also an
A/A list (bare against the next bare) for the machine's noise, and what wrap recorded of the
compilations (compiles, recompiles and compilations inside its window).

    python benchmarks/wrap_compile.py [--pairs 4] [--steps 60] [-- extra script args]

The first process of a machine compiles with a cold inductor cache (minutes on 2 cores); the
benchmark runs one untimed bare process first so that every measured process finds the same
warm cache. A GPT-2-small-shaped run on a GPU:
``python benchmarks/wrap_compile.py -- --layers 12 --d 768 --heads 12 --seq 1024 --amp bf16``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples/scripts/gpt_compiled.py"
OWN = re.compile(r"samples_per_s=([\d.]+)")


def _own(stdout: str) -> float:
    m = OWN.search(stdout)
    if not m:
        raise SystemExit(f"the script printed no own figure:\n{stdout[-2000:]}")
    return float(m.group(1))


def bare(args: list[str]) -> float:
    p = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                       check=True)
    return _own(p.stdout)


def wrapped(args: list[str], warmup: int) -> tuple[float, dict]:
    """The script's own samples/s under wrap, and wrap's compile figures."""
    with tempfile.TemporaryDirectory() as d:
        p = subprocess.run([sys.executable, "-m", "scaleprobe", "wrap", "--warmup-steps",
                            str(warmup), "--out", d, "--", str(SCRIPT), *args],
                           capture_output=True, text=True, check=True)
        rec = json.loads((Path(d) / "results.jsonl").read_text().splitlines()[-1])
    m = rec["metrics"]
    figures = {k: m.get(k) for k in ("compiles", "recompiles", "compiles_in_window",
                                     "compile_time_s", "samples_per_s")}
    return _own(p.stdout), figures


def _f(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--steps", type=int, default=60, help="the script's steps in all")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps, both sides")
    a, extra = ap.parse_known_args()
    extra = [x for x in extra if x != "--"]
    args = ["--steps", str(a.steps), "--warmup", str(a.warmup), *extra]
    from scaleprobe.metrics import ratio_interval

    print(f"cache warm-up: bare {bare(args):.1f} samples/s (not counted)", flush=True)
    b, w = [], []
    for i in range(a.pairs):
        b.append(bare(args))
        got, fig = wrapped(args, a.warmup)
        w.append(got)
        print(f"pair {i + 1}: bare {b[-1]:.1f}  wrap {w[-1]:.1f}  ratio {w[-1] / b[-1]:.3f}  "
              f"(wrap saw {fig['compiles']} compiles, {fig['recompiles']} recompiles, "
              f"{fig['compiles_in_window']} in its window, {_f(fig['compile_time_s'])} s "
              f"compiling; its samples/s {_f(fig['samples_per_s'])})", flush=True)
    b.append(bare(args))  # each wrap is held against the bare runs on either side of it
    around = [math.sqrt(x * y) for x, y in zip(b, b[1:], strict=False)]
    iv = ratio_interval(around, w)
    print(f"bare median {statistics.median(b):.1f} samples/s, wrap median "
          f"{statistics.median(w):.1f}")
    if iv is not None:
        print(f"ratio wrap / bare (the bare runs either side): {iv.estimate:.3f} (95% interval {iv.lo:.3f}-{iv.hi:.3f}, "
              f"{iv.n} pairs)")
    aa = [y / x for x, y in zip(b, b[1:], strict=False)]
    print("A/A bare / next bare: " + ", ".join(f"{r:.3f}" for r in aa))


if __name__ == "__main__":
    main()
