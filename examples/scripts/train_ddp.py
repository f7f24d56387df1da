"""Data-parallel training as the PyTorch DDP tutorial writes it: one process per device, a
DistributedSampler that gives each rank its own shard, set_epoch every epoch.

    torchrun --nproc-per-node 2 examples/scripts/train_ddp.py
    scaleprobe wrap --nproc 2 -- examples/scripts/train_ddp.py

Rank 0 prints the job's own throughput over the steps after --warmup: the samples every rank
took (each rank's count times the world size) / rank 0's wall seconds over those steps.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--samples", type=int, default=2048)
    p.add_argument("--warmup", type=int, default=5)
    args = p.parse_args()

    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device(f"cuda:{local_rank}" if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)

    torch.manual_seed(0)
    x = torch.randn(args.samples, 256)
    y = torch.randint(0, 10, (args.samples,))
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10)).to(device)
    ddp = DDP(model, device_ids=[local_rank] if use_cuda else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    step, samples, t0, t_end = 0, 0, None, None
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            opt.zero_grad()
            loss = loss_fn(ddp(xb), yb)
            loss.backward()
            opt.step()
            t_end = time.perf_counter()  # the end of the last step, not of the loop
            step += 1
            if step == args.warmup:
                t0 = time.perf_counter()
            elif step > args.warmup:
                samples += len(xb)
        if rank == 0:
            print(f"epoch {epoch}: loss {loss.item():.4f}")
    seconds = t_end - t0 if t0 is not None else 0.0
    if rank == 0:
        print(f"own: steps={step - args.warmup} samples={samples * world} "
              f"seconds={seconds:.6f} samples_per_s={samples * world / seconds if seconds else 0:.2f}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
