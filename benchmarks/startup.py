"""The start-up of a short run: wall seconds of `scaleprobe run` for 3 steps of a small model,
against a bare Python process that imports torch, builds the same-sized model and optimizer
and takes 3 steps, in fresh processes, interleaved (A B A B ...).

    python benchmarks/startup.py [--pairs 5]

On a 2-core CPU a short run is mostly start-up (importing torch, torch._dynamo, which every
optimizer's first parameter group imports, torchvision), so this is what a test suite, a
sweep of many small points or a user's first command pays per process. Printed: each side's
median, their difference (scaleprobe's own start-up: its imports, the dataset, the monitors,
the result and its summary) and an A/A pair (bare against bare) for the machine's own noise.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

BARE = """
import torch
model = torch.nn.Linear(3 * 32 * 32, 10)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.randn(64, 3 * 32 * 32), torch.randint(0, 10, (64,))
for _ in range(4):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
"""


def _timed(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, capture_output=True, text=True, check=True)
    return time.perf_counter() - t0


def bare() -> float:
    return _timed([sys.executable, "-c", BARE])


def scaleprobe() -> float:
    with tempfile.TemporaryDirectory() as d:
        return _timed([sys.executable, "-m", "scaleprobe", "run", "--model", "linear",
                       "--loader", "naive", "--steps", "3", "--warmup-steps", "1",
                       "--out", d, "--no-progress"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=5)
    a = p.parse_args()
    scaleprobe()  # the first run fills the digits cache: not a start-up a user pays twice
    sp, bb, aa = [], [], []
    for i in range(a.pairs):
        bb.append(bare())
        sp.append(scaleprobe())
        aa.append(bare() / bb[-1])
        print(f"pair {i + 1}: bare {bb[-1]:.2f} s, scaleprobe {sp[-1]:.2f} s", flush=True)
    mb, ms = statistics.median(bb), statistics.median(sp)
    print(f"bare process (import torch, 3 steps): median {mb:.2f} s")
    print(f"scaleprobe run (3 timed steps):       median {ms:.2f} s")
    print(f"scaleprobe's own start-up: {ms - mb:.2f} s; ratio {ms / mb:.2f}")
    print("A/A (bare / bare): " + ", ".join(f"{r:.3f}" for r in aa))


if __name__ == "__main__":
    main()
