"""The cost of `scaleprobe wrap`'s hooks inside one process: the training step of
examples/scripts/train_plain.py (3-layer MLP, batch 64, one thread) in blocks of steps that
alternate bare / hooked (the Recorder `wrap` installs, after its warm-up), paired block by
block. In one process the machine's process-to-process spread (benchmarks/wrap_overhead.py's
A/A, up to 12% here) is out of the comparison, so a cost of 1-2% can be told apart.

    python benchmarks/wrap_hooks.py [--pairs 30] [--steps 40]

Prints, each as "hooked / bare" samples/s with a 95% interval over the pairs:
  narrowed   the hooks as `wrap` runs them (global module hooks narrowed to the outermost
             modules once they are known)
  global     the global module hooks kept for the whole block (as before narrowing)
  A/A        bare against bare (the noise floor of this measurement)
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data import dataloader as dl

from scaleprobe.core.metrics import ratio_interval
from scaleprobe.wrap import hooks as H

BATCH = 64


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=30)
    ap.add_argument("--steps", type=int, default=40, help="timed steps per block")
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x, y = torch.randn(2048, 256), torch.randint(0, 10, (2048,))
    loader = DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=True)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    state = {"it": iter(loader)}

    def block(n: int) -> float:
        """Samples/s over ``n`` steps (median step)."""
        times = []
        for _ in range(n):
            t = time.perf_counter()
            try:
                xb, yb = next(state["it"])
            except StopIteration:
                state["it"] = iter(loader)
                xb, yb = next(state["it"])
            opt.zero_grad()
            loss_fn(model(xb), yb).backward()
            opt.step()
            times.append(time.perf_counter() - t)
        return BATCH / statistics.median(times)

    saved = (dl._BaseDataLoaderIter.__next__, dl._BaseDataLoaderIter._next_index,
             dl.DataLoader.__iter__, torch.Tensor.backward)

    def hooked(warmup: int) -> float:
        rec = H.Recorder(warmup).install(loss=False)  # as wrap without --summary-every
        block(10)  # the Recorder's warm-up (narrowing happens at its end)
        try:
            return block(a.steps)
        finally:
            for h in rec._handles:
                h.remove()
            (dl._BaseDataLoaderIter.__next__, dl._BaseDataLoaderIter._next_index,
             dl.DataLoader.__iter__, torch.Tensor.backward) = saved

    block(50)
    runs: dict[str, tuple[list[float], list[float]]] = {
        "narrowed": ([], []), "global": ([], []), "A/A": ([], [])}
    for i in range(a.pairs):
        for name, side in (("narrowed", lambda: hooked(5)),
                           ("global", lambda: hooked(10**9)),  # never narrows
                           ("A/A", lambda: block(a.steps))):
            bare = block(a.steps)
            runs[name][0].append(bare)
            runs[name][1].append(side())
        print(f"pair {i + 1}/{a.pairs}", end="\r", flush=True)
    print(f"bare: {statistics.median(runs['A/A'][0]):.0f} samples/s "
          f"({BATCH / statistics.median(runs['A/A'][0]) * 1e3:.2f} ms a step)")
    for name, (bare, side) in runs.items():
        iv = ratio_interval(bare, side)
        assert iv is not None
        print(f"{name:9s} hooked / bare {iv.estimate:.4f} (95% interval {iv.lo:.4f}-"
              f"{iv.hi:.4f}, {iv.n} pairs)")


if __name__ == "__main__":
    main()
