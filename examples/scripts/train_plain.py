"""A plain single-device training loop, as people write it: no scaleprobe anywhere.

    python examples/scripts/train_plain.py --epochs 2
    scaleprobe wrap -- examples/scripts/train_plain.py --epochs 2

It prints its own throughput over the steps after --warmup (samples / wall seconds from the end
of step --warmup to the end of the last step), to compare with what `scaleprobe wrap` measures
with --warmup-steps set to the same number.
"""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--samples", type=int, default=2048)
    p.add_argument("--warmup", type=int, default=5, help="steps left out of the own figure")
    args = p.parse_args()

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(args.samples, 256)
    y = torch.randint(0, 10, (args.samples,))
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    step, samples, t0, t_end = 0, 0, None, None
    for epoch in range(args.epochs):
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            opt.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            t_end = time.perf_counter()  # the end of the last step, not of the loop
            step += 1
            if step == args.warmup:
                t0 = time.perf_counter()
            elif step > args.warmup:
                samples += len(xb)
        print(f"epoch {epoch}: loss {loss.item():.4f}")
    seconds = t_end - t0 if t0 is not None else 0.0
    print(f"own: steps={step - args.warmup} samples={samples} seconds={seconds:.6f} "
          f"samples_per_s={samples / seconds if seconds else 0:.2f}")


if __name__ == "__main__":
    main()
