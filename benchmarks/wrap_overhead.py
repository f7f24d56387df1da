"""The cost of `scaleprobe wrap`'s hooks: the same script bare and under wrap, in fresh
processes, interleaved (bare, wrap, bare, wrap ...), each measured by the script's own clock
(its ``own: ... samples_per_s=X`` line over the steps after its warm-up), so both sides are
measured the same way. Also an A/A pair list (bare against the next bare) for the noise.

    python benchmarks/wrap_overhead.py [--pairs 4] [--epochs 1] [-- extra script args]

Default script: examples/scripts/train_plain.py (a 3-layer MLP, batch 64, no loader workers).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OWN = re.compile(r"samples_per_s=([\d.]+)")


def _own(stdout: str) -> float:
    m = OWN.search(stdout)
    if not m:
        raise SystemExit(f"the script printed no own figure:\n{stdout[-2000:]}")
    return float(m.group(1))


def bare(script: Path, args: list[str]) -> float:
    p = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True,
                       check=True)
    return _own(p.stdout)


def wrapped(script: Path, args: list[str], warmup: int) -> float:
    with tempfile.TemporaryDirectory() as d:
        p = subprocess.run([sys.executable, "-m", "scaleprobe", "wrap", "--warmup-steps",
                            str(warmup), "--out", d, "--", str(script), *args],
                           capture_output=True, text=True, check=True)
    return _own(p.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--script", type=Path, default=ROOT / "examples/scripts/train_plain.py")
    a, extra = ap.parse_known_args()
    args = ["--epochs", str(a.epochs), "--warmup", str(a.warmup), *extra]
    from scaleprobe.core.metrics import ratio_interval

    b, w = [], []
    for i in range(a.pairs):
        b.append(bare(a.script, args))
        w.append(wrapped(a.script, args, a.warmup))
        print(f"pair {i + 1}: bare {b[-1]:.1f}  wrap {w[-1]:.1f}  ratio {w[-1] / b[-1]:.3f}",
              flush=True)
    iv = ratio_interval(b, w)
    print(f"bare median {statistics.median(b):.1f} samples/s, wrap median "
          f"{statistics.median(w):.1f}")
    if iv is not None:
        print(f"ratio wrap / bare: {iv.estimate:.3f} (95% interval {iv.lo:.3f}-{iv.hi:.3f}, "
              f"{iv.n} pairs)")
    aa = [y / x for x, y in zip(b, b[1:], strict=False)]
    print("A/A bare / next bare: " + ", ".join(f"{r:.3f}" for r in aa))


if __name__ == "__main__":
    main()
