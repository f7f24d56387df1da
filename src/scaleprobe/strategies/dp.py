"""In-process towers: ``torch.nn.DataParallel`` over all visible CUDA devices (one tower per
GPU, the design of the reference studies)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from scaleprobe.core.errors import ConfigError
from scaleprobe.core.traits import TRAITS
from scaleprobe.strategies.single import Single


def check_devices() -> int:
    """The number of towers (visible CUDA devices); a one-line error below two."""
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n < 2:
        raise ConfigError(f"--strategy dp needs at least 2 CUDA devices; this host has {n} "
                          "(use --strategy ddp for several processes)")
    return n


class DataParallelTowers(Single):
    traits = TRAITS["dp"]
    name = "dp"

    def __init__(self, dist_cfg: Any, device: torch.device) -> None:
        super().__init__(dist_cfg, device)
        self.towers = check_devices()

    def wrap(self, model: nn.Module) -> nn.Module:
        return nn.DataParallel(model)
