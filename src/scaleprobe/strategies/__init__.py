"""Strategies own setup and the communication part of one training step.

Each strategy is a small object with the same methods, so the training loop is written once:
on one device every collective is the identity (``Single``)."""

from __future__ import annotations

import importlib
from typing import Any

from scaleprobe.core.errors import ConfigError
from scaleprobe.protocols import Strategy

# name -> (module, class); what each one is lives in scaleprobe.core.traits
CLASSES = {"single": ("scaleprobe.strategies.single", "Single"),
           "dp": ("scaleprobe.strategies.dp", "DataParallelTowers"),
           "ddp": ("scaleprobe.strategies.ddp", "DDP"),
           "ps": ("scaleprobe.strategies.ps", "ParameterServer"),
           "localsgd": ("scaleprobe.strategies.localsgd", "LocalSGD"),
           "fsdp": ("scaleprobe.strategies.fsdp", "FSDP")}


def build_strategy(name: str, dist_cfg: Any, device: Any) -> Strategy:
    if name not in CLASSES:
        raise ConfigError(f"unknown strategy '{name}'")
    module, cls = CLASSES[name]
    return getattr(importlib.import_module(module), cls)(dist_cfg, device)
