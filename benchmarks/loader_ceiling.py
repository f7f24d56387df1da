"""How fast can `--loader pipelined` deliver batches of a given size, part by part?

    python benchmarks/loader_ceiling.py --size 512 --batch 64 256 384 448 --workers 8

For each batch size, in this one process:
- make: one loader worker's time to build a batch from `--dataset synthetic-loader` (per-sample
  `__getitem__`, the run's transform, collate; one thread, as in a worker), and the ceiling of
  `--workers` such workers in samples/s;
- pin (CUDA only): the DataLoader's pin-memory thread copies each batch into page-locked
  memory. Timed three ways: the first pin of that size, a second while the first is still
  held (a fresh page-locked block, as every batch in flight needs), and one after both were
  released (the caching host allocator hands a freed block back). While fewer batches than
  workers x prefetch have been released, every batch takes the fresh path, so its ceiling
  is the one a short run sees.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--batch", type=int, nargs="+", default=[64, 256, 384, 448])
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--transform", default="light")
    a = ap.parse_args()

    import torch

    from scaleprobe.config.sections import DataConfig
    from scaleprobe.data.datasets import build_split
    from scaleprobe.data.loader import Indexed, collate_indexed
    from scaleprobe.data.transforms import build_transform

    cuda = torch.cuda.is_available()
    if cuda:
        torch.empty(1, device="cuda")  # the context, outside the timings
    cfg = DataConfig(dataset="synthetic-loader", image_size=a.size,
                     num_samples=max(a.batch) * 2 + 64, transform=a.transform)
    split = build_split(cfg, 0)
    ds = Indexed(split.train, build_transform(a.transform, a.size))
    torch.set_num_threads(1)  # as in a loader worker
    print(f"{a.size} px, transform {a.transform}, {a.workers} workers"
          f"{', ' + torch.cuda.get_device_name(0) if cuda else ', no CUDA: pin not timed'}")
    print("batch  MB     make_s  make_ceiling/s  pin_first_s  pin_fresh_s  pin_cached_s  "
          "pin_fresh_ceiling/s")
    for b in a.batch:
        collate_indexed([ds[i] for i in range(b)])  # warm
        t = time.perf_counter()
        x = collate_indexed([ds[i] for i in range(b)])[0]
        make = time.perf_counter() - t
        mb = x.numel() * x.element_size() / 2**20
        row = f"{b:5d}  {mb:6.0f}  {make:6.2f}  {a.workers * b / make:14.0f}"
        if cuda:
            t = time.perf_counter()
            p1 = x.pin_memory()
            first = time.perf_counter() - t
            t = time.perf_counter()
            p2 = x.pin_memory()
            fresh = time.perf_counter() - t
            del p1, p2
            t = time.perf_counter()
            p3 = x.pin_memory()
            cached = time.perf_counter() - t
            del p3
            row += f"  {first:11.3f}  {fresh:11.3f}  {cached:12.3f}  {b / fresh:19.0f}"
        print(row, flush=True)


if __name__ == "__main__":
    main()
