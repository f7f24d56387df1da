"""scaleprobe's DDP run against a bare `torchrun` DDP script on the same model, data and batch,
interleaved in fresh processes (A B A B ...), samples/s ratio printed.

    python benchmarks/ddp_overhead.py [--model resnet18 --size 64 --batch 32 --steps 30 --nproc 2]

scaleprobe adds, per step, phase marks and index bookkeeping for the shard audit; after the
window it runs a short no_sync calibration, which is not part of the timed steps.
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
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          "--nproc-per-node", str(a.nproc), str(HERE / "_bare.py"), "--ddp",
                          "--model", a.model, "--size", str(a.size), "--batch", str(a.batch),
                          "--steps", str(a.steps)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["samples_per_s"]


def scaleprobe(a) -> float:
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([sys.executable, "-m", "scaleprobe", "run", "--strategy", "ddp",
                        "--nproc", str(a.nproc), "--model", a.model,
                        "--dataset", "synthetic-loader",
                        "--image-size", str(a.size), "--num-samples", "4096", "--batch-size",
                        str(a.batch), "--steps", str(a.steps), "--loader", "naive",
                        "--out", d, "--no-progress"], capture_output=True, text=True, check=True)
        rec = json.loads((Path(d) / "results.jsonl").read_text().splitlines()[-1])
        return rec["metrics"]["samples_per_s"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--pairs", type=int, default=3)
    a = ap.parse_args()
    sp, bb, aa = [], [], []
    for i in range(a.pairs):
        b1, s1, b2 = bare(a), scaleprobe(a), bare(a)
        bb += [b1, b2]
        sp.append(s1)
        aa.append(b2 / b1)
        print(f"pair {i + 1}: torchrun bare {b1:.1f}  scaleprobe {s1:.1f}  torchrun bare "
              f"{b2:.1f} samples/s", flush=True)
    ratio = statistics.median(sp) / statistics.median(bb)
    print(f"model {a.model} {a.size}px, batch {a.batch} per process x {a.nproc} processes (gloo)")
    print(f"A/A (bare vs bare) ratios: {', '.join(f'{r:.3f}' for r in aa)}")
    print(f"RATIO scaleprobe / bare = {ratio:.3f} (target >= 0.97: "
          f"{'met' if ratio >= 0.97 else 'NOT met'}; read it against the A/A spread)")


if __name__ == "__main__":
    main()
