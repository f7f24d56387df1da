"""The cost of the gradient noise scale's tap on DDP's comm hook, inside one 2-process gloo
group: blocks of training steps that alternate between two DDP copies of one model, both
timed by scaleprobe's comm hook (``measure/comm/hook.py``), one also carrying the tap
(``measure/gns_probe.NormTap``, with ``TapSteps`` closing each step's sums), paired block by
block. In one group of processes the machine's process-to-process spread is out of the
comparison (benchmarks/gns_overhead.py compares whole runs and sees it all).

    python benchmarks/gns_tap.py [--model digits_cnn --size 32 --batch 32 --pairs 20 --steps 10]
    python benchmarks/gns_tap.py --model resnet18 --size 64 --pairs 10

Prints, as "tapped / untapped" samples/s of rank 0 with a 95% interval over the pairs (and the
same for two untapped copies: the noise floor of this measurement).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from scaleprobe.core.metrics import ratio_interval
from scaleprobe.measure.comm.hook import CommTimer
from scaleprobe.measure.gns_probe import NormTap, StepNorms, TapSteps
from scaleprobe.models.build import build_model, param_count


class _NoTimer:
    def start(self) -> None: ...
    def mark(self, phase: str) -> None: ...
    def move(self, src: str, dst: str, seconds: float) -> None: ...


def _ddp(a, model: nn.Module, tap: bool) -> tuple[nn.Module, object, object]:
    ddp = nn.parallel.DistributedDataParallel(model)
    timer = CommTimer()
    if tap:
        timer.tap = NormTap()
    ddp.register_comm_hook(state=None, hook=timer.hook_for(ddp))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    steps = (TapSteps(_NoTimer(), timer.tap, StepNorms("ddp_hook", a.batch, 2 * a.batch, 0))
             if tap else _NoTimer())
    return ddp, opt, (timer, steps)


def _block(a, ddp, opt, aux, x, y) -> float:
    """Samples/s of ``a.steps`` steps (median step) on this rank."""
    timer, steps = aux
    loss_fn = nn.CrossEntropyLoss()
    times = []
    for _ in range(a.steps):
        t = time.perf_counter()
        steps.start()
        opt.zero_grad(set_to_none=True)
        loss_fn(ddp(x), y).backward()
        steps.mark("backward")
        opt.step()
        timer.take()
        times.append(time.perf_counter() - t)
    return a.batch / statistics.median(times)


def _rank(rank: int, a, path: str, out: dict) -> None:
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=2)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    base = build_model(a.model, 10, a.size)
    copies = [build_model(a.model, 10, a.size) for _ in range(3)]
    for c in copies:
        c.load_state_dict(base.state_dict())
    plain, tapped, plain2 = (_ddp(a, copies[0], False), _ddp(a, copies[1], True),
                             _ddp(a, copies[2], False))
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(a.batch, 3, a.size, a.size, generator=g)
    y = torch.randint(0, 10, (a.batch,), generator=g)
    for m in (plain, tapped, plain2):  # warm-up: buckets rebuilt after the first step
        _block(a, *m, x, y)
    res = {"off": [], "on": [], "off2": []}
    for i in range(a.pairs):
        order = [("off", plain), ("on", tapped), ("off2", plain2)]
        if i % 2:
            order.reverse()
        for k, m in order:
            res[k].append(_block(a, *m, x, y))
    if rank == 0:
        out.update(res)
        out["params"] = param_count(base)
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="digits_cnn")
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--steps", type=int, default=10, help="timed steps per block")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d, mp.Manager() as mgr:
        out = mgr.dict()
        mp.spawn(_rank, args=(a, os.path.join(d, "pg"), out), nprocs=2, join=True)
        res = dict(out)
    on_off = ratio_interval(res["off"], res["on"])
    aa = ratio_interval(res["off"], res["off2"])
    print(f"model {a.model} {a.size}px ({res['params']:,} parameters), batch {a.batch} per "
          f"rank x 2 ranks (gloo, 1 thread each), {a.pairs} pairs of {a.steps}-step blocks")
    print(f"samples/s of rank 0, median over blocks: untapped {statistics.median(res['off']):.1f}"
          f", tapped {statistics.median(res['on']):.1f}, untapped again "
          f"{statistics.median(res['off2']):.1f}")
    print(f"RATIO tapped / untapped = {on_off.text()}")
    print(f"A/A untapped / untapped = {aa.text()}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
