"""Local SGD: every rank trains its own replica; every K steps the replicas are averaged with
PyTorch's ``PeriodicModelAverager`` (an all-reduce of the parameters). Communication falls
by about K times against DDP, at the cost of replicas drifting apart between averages."""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from scaleprobe.core.traits import TRAITS
from scaleprobe.strategies.ddp import DDP


class LocalSGD(DDP):
    traits = TRAITS["localsgd"]
    name = "localsgd"
    explicit_comm = True
    has_overlapped_comm = False

    def __init__(self, dist_cfg: Any, device: torch.device) -> None:
        super().__init__(dist_cfg, device)
        # heavy: torch: torch.distributed.algorithms.model_averaging.averagers is more than `import torch` loads
        from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager

        self.averager = PeriodicModelAverager(period=dist_cfg.average_every, warmup_steps=0)
        self.sync_period = dist_cfg.average_every
        self.averages = 0
        self._params: list[torch.nn.Parameter] = []

    def wrap(self, model: nn.Module) -> nn.Module:
        # start from identical replicas, then train each locally
        for p in model.parameters():
            dist.broadcast(p.data, src=0)
        self._params = list(model.parameters())
        return model

    def no_sync(self, model: nn.Module):
        return contextlib.nullcontext()

    def sync_bytes(self, model: nn.Module) -> int:
        """Bytes of one averaging: every parameter, all-reduced."""
        return sum(p.numel() * p.element_size() for p in self._params)

    def after_step(self, model: nn.Module, step: int) -> None:
        before = self.averager.step
        self.averager.average_parameters(self._params)
        if before % self.averager.period == 0:
            self.averages += 1

    def extra_metrics(self) -> dict[str, Any]:
        return {"average_every": self.averager.period, "averages": self.averages,
                "param_bytes": sum(p.numel() * p.element_size() for p in self._params)}
