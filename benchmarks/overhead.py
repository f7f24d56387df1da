"""scaleprobe's own cost: a bare hand-written PyTorch loop against `scaleprobe run` on the same
model, data and batch, in fresh processes, interleaved (A B A B ...), samples/s ratio printed.

    python benchmarks/overhead.py [--model resnet18 --size 64 --batch 32 --steps 40 --pairs 4]
    python benchmarks/overhead.py --gpu-bound [--pairs 4]   # on a GPU
    python benchmarks/overhead.py --compile [...]            # `run --compile` vs a compiled loop

By default both use the same synthetic uint8 images and transform, in-process loading (no
workers), SGD with momentum, one process with all cores: on a GPU that CPU work, not the
GPU, sets the pace. `--gpu-bound` is the configuration that measures scaleprobe's cost where
the device is the limit: resnet50, 224 px, batch 128, bf16 autocast, channels_last, and one
batch made once on the device and reused every step on both sides (`--dataset synthetic` for
scaleprobe, `--device-data` for the bare loop); each flag can also be set on its own. Also
runs an A/A pair (bare vs bare) so the machine's own process-to-process noise is visible next
to the ratio.
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
    extra = ["--amp", a.amp] + (["--channels-last"] if a.channels_last else []) \
        + (["--device-data"] if a.device_data else []) \
        + (["--compile", "--compile-mode", a.compile_mode] if a.compile else [])
    out = subprocess.run([sys.executable, str(HERE / "_bare.py"), "--model", a.model, "--size",
                          str(a.size), "--batch", str(a.batch), "--steps", str(a.steps), *extra],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["samples_per_s"]


def scaleprobe(a) -> float:
    with tempfile.TemporaryDirectory() as d:
        data = ["--dataset", "synthetic"] if a.device_data else [
            "--dataset", "synthetic-loader", "--loader", "naive"]
        extra = ["--amp", a.amp] + (["--channels-last"] if a.channels_last else []) \
            + (["--compile", "--compile-mode", a.compile_mode] if a.compile else [])
        subprocess.run([sys.executable, "-m", "scaleprobe", "run", "--model", a.model,
                        "--image-size", str(a.size), "--num-samples", "4096",
                        "--batch-size", str(a.batch), "--steps", str(a.steps), *data, *extra,
                        "--out", d, "--no-progress"],
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
    ap.add_argument("--amp", choices=("off", "bf16"), default="off")
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--device-data", action="store_true",
                    help="one batch made once on the device, reused every step, both sides")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile on both sides (compiled in the untimed warm-up)")
    ap.add_argument("--compile-mode", default="default")
    ap.add_argument("--gpu-bound", action="store_true",
                    help="resnet50, 224 px, batch 128, bf16, channels_last, device data")
    a = ap.parse_args()
    if a.gpu_bound:
        a.model, a.size, a.batch = "resnet50", 224, 128
        a.amp, a.channels_last, a.device_data = "bf16", True, True
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
    data = "device-resident data" if a.device_data else "in-process loader"
    print(f"model {a.model} {a.size}px batch {a.batch}, amp {a.amp}"
          f"{', channels_last' if a.channels_last else ''}, {data}, {a.steps} timed steps"
          f"{f', compiled ({a.compile_mode})' if a.compile else ''}, "
          f"{a.pairs} pairs")
    print(f"bare median {statistics.median(bb):.1f} samples/s, scaleprobe median "
          f"{statistics.median(sp):.1f} samples/s")
    print(f"A/A (bare vs bare) ratios: {', '.join(f'{r:.3f}' for r in aa)}")
    goal = 0.99 if a.gpu_bound else 0.98
    print(f"RATIO scaleprobe / bare = {ratio:.3f} (target >= {goal}: "
          f"{'met' if ratio >= goal else 'NOT met'}; read it against the A/A spread)")


if __name__ == "__main__":
    main()
