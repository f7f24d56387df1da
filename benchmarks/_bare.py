"""A hand-written PyTorch training loop, the baseline scaleprobe's overhead is measured against.

Single process:  python benchmarks/_bare.py --model resnet18 --size 64 --batch 32 --steps 40
Under torchrun:  torchrun --nproc-per-node 2 benchmarks/_bare.py --ddp ...
GPU-bound:       python benchmarks/_bare.py --model resnet50 --size 224 --batch 128 \
                     --device-data --amp bf16 --channels-last
Compiled:        python benchmarks/_bare.py --compile [--compile-mode max-autotune] ...

--compile applies torch.compile to the model (after DDP's wrapper, as `scaleprobe run --compile`
does); it compiles in the first (untimed) step.
--device-data trains on one random batch made once on the device and reused every step (no
loader, no copy), as `scaleprobe run --dataset synthetic` does; without it, uint8 images go
through a transform and a DataLoader in the training process.
Prints one JSON line: {"samples_per_s": ..., "median_step_s": ...} (rank 0). Runs on CUDA (nccl
under torchrun) when a GPU is there, else on the CPU (gloo).
"""

import argparse
import json
import os
import statistics
import time

import torch
import torchvision
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import v2


class Pool(Dataset):
    def __init__(self, n, size, classes=10):
        g = torch.Generator().manual_seed(1234)
        self.x = torch.randint(0, 256, (min(n, 256), 3, size, size), dtype=torch.uint8, generator=g)
        self.y = torch.randint(0, classes, (n,), generator=g)
        self.t = v2.Compose([v2.ToImage(), v2.Resize((size, size), antialias=True),
                             v2.ToDtype(torch.float32, scale=True),
                             v2.Normalize((0.5,) * 3, (0.25,) * 3)])

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.t(self.x[i % len(self.x)]), int(self.y[i])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--samples", type=int, default=4096)
    ap.add_argument("--ddp", action="store_true")
    ap.add_argument("--device-data", action="store_true")
    ap.add_argument("--amp", choices=("off", "bf16"), default="off")
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--compile-mode", default="default")
    a = ap.parse_args()
    rank, world = 0, 1
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    if a.ddp:
        dist.init_process_group("nccl" if cuda else "gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // world))
    torch.manual_seed(0)
    if a.model == "linear":
        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * a.size * a.size, 10))
    else:
        model = torchvision.models.get_model(a.model, weights=None, num_classes=10)
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    model = model.to(device, memory_format=fmt)
    if a.ddp:
        model = torch.nn.parallel.DistributedDataParallel(model)
    if a.compile:
        model = torch.compile(model, mode=a.compile_mode)
    if a.device_data:
        g = torch.Generator().manual_seed(1234 + rank)
        one = (torch.randn(a.batch, 3, a.size, a.size, generator=g).to(device,
                                                                       memory_format=fmt),
               torch.randint(0, 10, (a.batch,), generator=g).to(device))
        dl = [one] * (a.samples // (a.batch * world))
    else:
        ds = Pool(a.samples, a.size)
        sampler = torch.utils.data.DistributedSampler(ds, world, rank, seed=0) if a.ddp else None
        dl = DataLoader(ds, batch_size=a.batch, sampler=sampler, shuffle=sampler is None,
                        drop_last=True, num_workers=0, pin_memory=cuda)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.amp == "bf16")
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    # step = batch request to batch request (data included); on CUDA the marks are events
    # read after the loop, so the loop never waits for the device
    marks, step = [], 0  # (mark, counts as the end of a timed step)
    while step < a.warmup + a.steps:
        it = iter(dl)
        while step < a.warmup + a.steps:
            if cuda:
                mark = torch.cuda.Event(enable_timing=True)
                mark.record()
            else:
                mark = time.perf_counter()
            marks.append((mark, bool(marks) and marks[-1] is not None and step > a.warmup))
            batch = next(it, None)
            if batch is None:
                marks.append(None)  # an epoch boundary is not a step
                break
            x, y = (t.to(device, non_blocking=True) for t in batch)
            if a.channels_last:
                x = x.contiguous(memory_format=fmt)
            with autocast:
                loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
    if cuda:
        torch.cuda.synchronize()
    times = []
    for prev, cur in zip(marks, marks[1:], strict=False):
        if prev is None or cur is None or not cur[1]:
            continue
        times.append(prev[0].elapsed_time(cur[0]) / 1000 if cuda else cur[0] - prev[0])
    if a.ddp:
        dist.barrier()
        dist.destroy_process_group()
    if rank == 0:
        med = statistics.median(times)
        print(json.dumps({"samples_per_s": a.batch * world / med, "median_step_s": med,
                          "steps": len(times)}))


if __name__ == "__main__":
    main()
