"""DistributedDataParallel: one process per device, gradients all-reduced in buckets while
the backward pass runs. nccl on CUDA, gloo on CPU."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data.distributed import DistributedSampler

from scaleprobe.strategies.single import Single
from scaleprobe.traits import TRAITS


class SameBatchSampler(DistributedSampler):
    """Fault injection for the shard audit: every rank gets rank 0's shard (the bug of a
    reference study, where every GPU trained on the same batch)."""

    def __iter__(self):
        rank, self.rank = self.rank, 0
        try:
            return super().__iter__()
        finally:
            self.rank = rank


class NoSetEpochSampler(DistributedSampler):
    """Fault injection for the shard audit: ``set_epoch`` forgotten, same order every epoch."""

    def set_epoch(self, epoch: int) -> None:
        pass


SAMPLERS = {"distributed": DistributedSampler, "same_batch": SameBatchSampler,
            "no_set_epoch": NoSetEpochSampler}


class DDP(Single):
    traits = TRAITS["ddp"]
    name = "ddp"
    distributed = True
    has_overlapped_comm = True

    def __init__(self, dist_cfg: Any, device: torch.device) -> None:
        super().__init__(dist_cfg, device)
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()

    def wrap(self, model: nn.Module) -> nn.Module:
        ids = [self.device.index] if self.device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(model, device_ids=ids,
                                                   bucket_cap_mb=self.cfg.bucket_cap_mb)

    def sampler(self, dataset: Any, seed: int, shuffle: bool = True) -> Any:
        cls = SAMPLERS[self.cfg.sampler]
        return cls(dataset, num_replicas=self.world, rank=self.rank, shuffle=shuffle, seed=seed,
                   drop_last=True)

    def no_sync(self, model: nn.Module):
        return model.no_sync()

    def gather(self, obj: Any) -> list[Any] | None:
        out = [None] * self.world if self.rank == 0 else None
        dist.gather_object(obj, out, dst=0)
        return out

    def any_true(self, flag: bool) -> bool:
        t = torch.tensor([1.0 if flag else 0.0], device=self.coll_device())
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item() > 0)

    def coll_device(self) -> torch.device:
        return self.device if dist.get_backend() == "nccl" else torch.device("cpu")

    def barrier(self) -> None:
        dist.barrier()
