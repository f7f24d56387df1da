"""An optimizer step alone on the machine against the same step while another core runs one
too: what ranks that share a host's memory pay when they leave their last all-reduce
together and step their optimizers at the same moment.

    python benchmarks/lockstep_optimizer.py [--params 11200000] [--seconds 4]

SGD with momentum over ``--params`` fp32 parameters (resnet18's 11.2M by default), one
thread, pinned to core 0; then two processes at once on cores 0 and 1. Prints each median
step and the ratio together / alone.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time


def worker(core: int, params: int, seconds: float) -> None:
    import torch

    os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)
    p = torch.nn.Parameter(torch.randn(params))
    p.grad = torch.randn(params)
    opt = torch.optim.SGD([p], lr=0.01, momentum=0.9)
    times = []
    end = time.time() + seconds
    while time.time() < end:
        t = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - t)
    print(statistics.median(times[3:]))


def _run(cores: list[int], params: int, seconds: float) -> list[float]:
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", str(c), "--params",
                               str(params), "--seconds", str(seconds)],
                              stdout=subprocess.PIPE, text=True) for c in cores]
    return [float(p.communicate()[0]) for p in procs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=int, default=11_200_000)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker is not None:
        worker(a.worker, a.params, a.seconds)
        return
    if len(os.sched_getaffinity(0)) < 2:
        sys.exit("needs two cores")
    alone = _run([0], a.params, a.seconds)[0]
    together = _run([0, 1], a.params, a.seconds)
    print(f"SGD momentum over {a.params:,} fp32 parameters, one thread; "
          f"{time.strftime('%Y-%m-%d %H:%M')} UTC")
    print(f"alone on core 0: {alone * 1e3:.1f} ms")
    print(f"two at once on cores 0 and 1: {together[0] * 1e3:.1f} and {together[1] * 1e3:.1f} ms")
    print(f"together / alone: {statistics.mean(together) / alone:.2f}")


if __name__ == "__main__":
    main()
