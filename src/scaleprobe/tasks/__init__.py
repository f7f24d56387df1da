"""Tasks: each owns its loss and its metric, so every strategy and sweep works with each."""

from __future__ import annotations

from typing import Any

from scaleprobe.registry import Registry

TASKS = Registry("task")


def build_task(cfg: Any, num_classes: int) -> Any:
    """``cfg`` is a TaskConfig."""
    from scaleprobe.tasks import classification  # noqa: F401  (registers)

    return TASKS.get(cfg.task)(cfg, num_classes)
