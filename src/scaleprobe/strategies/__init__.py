"""Strategies own setup and the communication part of one training step.

Each strategy is a small object with the same methods, so the training loop is written once:
on one device every collective is the identity (``Single``)."""

from __future__ import annotations

from typing import Any

from scaleprobe.errors import ConfigError


def build_strategy(name: str, dist_cfg: Any, device: Any) -> Any:
    if name == "single":
        from scaleprobe.strategies.single import Single

        return Single(dist_cfg, device)
    if name == "dp":
        from scaleprobe.strategies.dp import DataParallelTowers

        return DataParallelTowers(dist_cfg, device)
    if name == "ddp":
        from scaleprobe.strategies.ddp import DDP

        return DDP(dist_cfg, device)
    if name == "ps":
        from scaleprobe.strategies.ps import ParameterServer

        return ParameterServer(dist_cfg, device)
    if name == "localsgd":
        from scaleprobe.strategies.localsgd import LocalSGD

        return LocalSGD(dist_cfg, device)
    raise ConfigError(f"unknown strategy '{name}'")
