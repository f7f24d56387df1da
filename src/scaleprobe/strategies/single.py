"""One device, one process: every collective is the identity."""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import nn


class Single:
    name = "single"
    distributed = False
    explicit_comm = False  # True when the step has communication phases of its own (ps, local SGD)
    is_server = False  # a rank that serves parameters instead of training (ps rank 0)
    progress_rank = 0  # the rank that shows the progress bar
    world = 1
    rank = 0

    def __init__(self, dist_cfg: Any, device: torch.device) -> None:
        self.cfg = dist_cfg
        self.device = device

    # --- setup -----------------------------------------------------------------------------
    def wrap(self, model: nn.Module) -> nn.Module:
        return model

    def unwrap(self, model: nn.Module) -> nn.Module:
        return getattr(model, "module", model)

    def sampler(self, dataset: Any, seed: int, shuffle: bool = True) -> Any:
        return None

    def set_epoch(self, sampler: Any, epoch: int) -> None:
        if sampler is not None and hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)

    # --- one step --------------------------------------------------------------------------
    def before_optimizer(self, model: nn.Module) -> None:
        """Explicit gradient communication (timed as ``comm``); none here."""

    def optimizer_step(self, optimizer: torch.optim.Optimizer, scaler: Any) -> None:
        scaler.step(optimizer)
        scaler.update()

    def after_step(self, model: nn.Module, step: int) -> None:
        """Communication after the update (local SGD averaging); none here."""

    def no_sync(self, model: nn.Module) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    @property
    def has_overlapped_comm(self) -> bool:
        return False

    # --- collectives -----------------------------------------------------------------------
    def gather(self, obj: Any) -> list[Any] | None:
        return [obj]

    def any_true(self, flag: bool) -> bool:
        return flag

    def barrier(self) -> None:
        pass

    def extra_metrics(self) -> dict[str, Any]:
        return {}
