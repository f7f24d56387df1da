"""DistributedDataParallel: one process per device, gradients all-reduced in buckets while
the backward pass runs. nccl on CUDA, gloo on CPU."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data.distributed import DistributedSampler

from scaleprobe.core.rank_record import RankComm
from scaleprobe.core.run_parts import GnsSamples
from scaleprobe.core.traits import TRAITS
from scaleprobe.features.gns import mode as gns_mode
from scaleprobe.measure.comm.hook import (
    EXPOSED_METHOD,
    IN_FLIGHT_METHOD,
    BucketLog,
    CommTimer,
    HookSplit,
)
from scaleprobe.measure.comm.instep import cross_check
from scaleprobe.measure.gns_probe import NormTap, StepNorms, TapSteps
from scaleprobe.measure.timer import StepTimer
from scaleprobe.strategies.single import Single


class SameBatchSampler(DistributedSampler):
    """Fault injection for the shard audit: every rank gets rank 0's shard (the bug of a
    reference study, where every GPU trained on the same batch)."""

    rank: int  # DistributedSampler's, set in its __init__

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
        self.hook = CommTimer()
        self.buckets = BucketLog()
        self.in_flight: list[float | None] = []
        self.unseen: dict[str, str] = {}
        self.gns: StepNorms | None = None  # the noise scale's norms, from the comm hook

    def configure(self, cfg: Any) -> None:
        if self.world > 1 and gns_mode(cfg) == "ddp_hook" and cfg.train.amp != "fp16":
            b = cfg.per_device_batch(self.world)
            self.gns = StepNorms("ddp_hook", b, b * self.world, cfg.train.warmup_steps)

    def wrap(self, model: nn.Module) -> nn.Module:
        ids = [self.device.index] if self.device.type == "cuda" else None
        ddp = nn.parallel.DistributedDataParallel(model, device_ids=ids,
                                                  bucket_cap_mb=self.cfg.bucket_cap_mb)
        # one process sends nothing (its comm phase is 0 in every step), but DDP still
        # buckets its gradients and calls the hook: the buckets' ready times are logged
        if self.world > 1 and self.gns is not None:
            self.hook.tap = NormTap()
        self.hook.attach(ddp)
        if self.hook.reason and self.world > 1:
            self.unseen["comm"] = self.hook.reason
        return ddp

    # --- communication measured in the step (measure/comm/hook.py) ---------------------------------
    def step_timer(self, timer: Any) -> Any:
        if "comm" in self.unseen or not self.hook.attached:
            return timer
        timed = isinstance(timer, StepTimer)  # the warm-up's steps are no figure's
        alone = self.world < 2  # one process: log the buckets, move nothing to comm
        split = HookSplit(timer, self.hook, self.buckets if timed else None,
                          self.in_flight if timed and not alone else None, split=not alone)
        if self.hook.tap is None:
            return split
        return TapSteps(split, self.hook.tap, self.gns if timed else None)

    def gns_samples(self) -> GnsSamples | None:
        if self.gns is None:
            return None
        why = self.unseen.get("comm")
        return self.gns.record(f"DDP's comm hook, which the noise scale reads, is not attached: "
                               f"{why}" if why else None)

    def phases_unseen(self) -> dict[str, str]:
        return dict(self.unseen)

    def comm_record(self, calibration: dict[str, Any] | None) -> RankComm | None:
        """The exposed wait measured in every step (the comm phase) and the time in flight;
        the no_sync calibration beside it as a cross-check (never in the breakdown). With one
        process there is no communication: the calibration is the wrapper's own cost."""
        if self.world < 2:
            if not self.buckets.nbytes:
                return super().comm_record(calibration)
            return RankComm.from_dict({**(calibration or {}), "buckets": self.buckets.summary()})
        return RankComm.from_dict({
            "in_step": True, "method": None if "comm" in self.unseen else EXPOSED_METHOD,
            "exposed_reason": self.unseen.get("comm"), "cross_check": cross_check(calibration),
            "in_flight_per_step": list(self.in_flight) if self.in_flight else None,
            "in_flight_method": IN_FLIGHT_METHOD, "buckets": self.buckets.summary() or None})

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
