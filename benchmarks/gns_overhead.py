"""The cost of measuring the gradient noise scale: the same run with and without it,
interleaved in fresh processes (A B A B ...), samples/s ratios printed with an A/A baseline.

    python benchmarks/gns_overhead.py [--model digits_cnn --batch 32 --steps 40 --pairs 4]
    python benchmarks/gns_overhead.py --model linear --nproc 1       # one process: two halves

Under DDP (``--nproc 2``, the default) the noise scale rides on the comm hook that already
times the all-reduces: two squared norms per gradient bucket (``measure/gns_probe.py``). On
one process ``--gns`` runs each step as two half-batches, which costs what a smaller batch
costs; that is why it is off by default there. A compute-free model (``--model linear``)
shows a fixed per-step cost that a real model's noise would hide.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def run(a, gns: bool) -> float:
    with tempfile.TemporaryDirectory() as d:
        cmd = [sys.executable, "-m", "scaleprobe", "run", "--model", a.model,
               "--dataset", "synthetic-loader", "--image-size", str(a.size),
               "--num-samples", "4096", "--batch-size", str(a.batch), "--steps", str(a.steps),
               "--warmup-steps", "5", "--loader", "naive", "--out", d, "--no-progress",
               "--gns" if gns else "--no-gns"]
        if a.nproc > 1:
            cmd += ["--strategy", "ddp", "--nproc", str(a.nproc)]
        subprocess.run(cmd, capture_output=True, text=True, check=True)
        rec = json.loads((Path(d) / "results.jsonl").read_text().splitlines()[-1])
        if gns and rec.get("gns") is None:
            raise SystemExit(f"--gns run has no gns block: {rec['null_reasons'].get('gns')}")
        return rec["metrics"]["samples_per_s"]


def norm_cost(a) -> tuple[float, int]:
    """The two squared norms the DDP tap takes per step, over a tensor the size of the
    model's parameters, in this process: seconds per step (median of 20), parameters."""
    import time

    import torch

    from scaleprobe.measure.gns_probe import sq_norm
    from scaleprobe.models.build import build_model, param_count

    n = param_count(build_model(a.model, 10, a.size))
    buf = torch.randn(n)
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        sq_norm(buf), sq_norm(buf)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="digits_cnn")
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--pairs", type=int, default=4)
    a = ap.parse_args()
    off, on, aa = [], [], []
    for i in range(a.pairs):
        o1, g, o2 = run(a, False), run(a, True), run(a, False)
        off += [o1, o2]
        on.append(g)
        aa.append(o2 / o1)
        print(f"pair {i + 1}: off {o1:.1f}  gns {g:.1f}  off {o2:.1f} samples/s "
              f"(gns / mean of its two offs {2 * g / (o1 + o2):.3f})", flush=True)
    ratios = [2 * g / (o1 + o2) for g, o1, o2 in zip(on, off[::2], off[1::2], strict=True)]
    where = f"ddp x {a.nproc} (gloo)" if a.nproc > 1 else "one process"
    print(f"model {a.model} {a.size}px, batch {a.batch} per process, {where}, {a.steps} steps")
    print(f"A/A (off vs off) ratios: {', '.join(f'{r:.3f}' for r in aa)}")
    print(f"gns / off ratios: {', '.join(f'{r:.3f}' for r in ratios)}")
    if a.nproc > 1:
        per_step, n = norm_cost(a)
        step_s = a.batch * a.nproc / statistics.median(off)
        print(f"the tap's two norms over {n:,} parameters: {per_step * 1e3:.3f} ms per step, "
              f"{per_step / step_s:.2%} of the mean step without it ({step_s * 1e3:.1f} ms)")
    print(f"RATIO gns / off = {statistics.median(on) / statistics.median(off):.3f} "
          f"(median samples/s); within noise when inside the A/A spread "
          f"[{min(aa):.3f}, {max(aa):.3f}]")


if __name__ == "__main__":
    main()
