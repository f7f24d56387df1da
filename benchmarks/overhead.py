"""scaleprobe's own cost: a bare hand-written PyTorch loop against `scaleprobe run` on the same
model, data and batch, in fresh processes, interleaved (A B A B ...), samples/s ratio printed.

    python benchmarks/overhead.py [--model resnet18 --size 64 --batch 32 --steps 40 --pairs 4]

Both use the same synthetic uint8 images and transform, in-process loading (no workers),
SGD with momentum, one process with all cores. Also runs an A/A pair (bare vs bare) so the
machine's own process-to-process noise is visible next to the ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def bare(a) -> float:
    out = subprocess.run([sys.executable, str(HERE / "_bare.py"), "--model", a.model, "--size",
                          str(a.size), "--batch", str(a.batch), "--steps", str(a.steps)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["samples_per_s"]


def scaleprobe(a) -> float:
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([sys.executable, "-m", "scaleprobe", "run", "--model", a.model,
                        "--dataset", "synthetic-loader", "--image-size", str(a.size),
                        "--num-samples",
                        "4096", "--batch-size", str(a.batch), "--steps", str(a.steps),
                        "--loader", "naive", "--out", d, "--no-progress"],
                       capture_output=True, text=True, check=True)
        rec = json.loads((Path(d) / "results.jsonl").read_text().splitlines()[-1])
        return rec["metrics"]["samples_per_s"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--pairs", type=int, default=4)
    a = ap.parse_args()
    sp, bb, aa = [], [], []
    for i in range(a.pairs):
        b1 = bare(a)
        s1 = scaleprobe(a)
        b2 = bare(a)
        bb += [b1, b2]
        sp.append(s1)
        aa.append(b2 / b1)
        print(f"pair {i + 1}: bare {b1:.1f}  scaleprobe {s1:.1f}  bare {b2:.1f} samples/s",
              flush=True)
    ratio = statistics.median(sp) / statistics.median(bb)
    print(f"model {a.model} {a.size}px batch {a.batch}, {a.steps} timed steps, {a.pairs} pairs")
    print(f"bare median {statistics.median(bb):.1f} samples/s, scaleprobe median "
          f"{statistics.median(sp):.1f} samples/s")
    print(f"A/A (bare vs bare) ratios: {', '.join(f'{r:.3f}' for r in aa)}")
    print(f"RATIO scaleprobe / bare = {ratio:.3f} (target >= 0.98: "
          f"{'met' if ratio >= 0.98 else 'NOT met'}; read it against the A/A spread)")


if __name__ == "__main__":
    main()
