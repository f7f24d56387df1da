"""Tasks: each owns its loss and its metric, so every strategy and sweep works with each.

A task is a ``scaleprobe.protocols.Task``; the optional hooks the engine uses when a task has
them (its own transforms, its own model, sharded batches, ...) are the protocols beside it
there. Tasks: ``classification`` (cross-entropy, top-1 accuracy), ``face`` (triplet or
softmax loss, verification accuracy), ``detection`` (torchvision detectors, mAP@0.5), ``lm``
(GPT decoders, next-token cross-entropy, held-out loss and perplexity). See docs/TASKS.md.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any

from scaleprobe.core.registry import Registry
from scaleprobe.features.lmspec import gpt_shape
from scaleprobe.protocols import Task

TASKS = Registry("task")
MODULES = {"classification": "classification", "face": "face", "detection": "detection",
           "lm": "lm"}


@contextlib.contextmanager
def evaluating(model: Any) -> Iterator[None]:
    """The model in eval mode for the block, back in the mode it was in after (errors too)."""
    was = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was)


def on_device(task: Any, loader: Any, device: Any, channels_last: bool = False
              ) -> Iterator[tuple[Any, Any, Any]]:
    """The held-out batches as ``(x, y, item indices)`` on the device (``task.to_device``),
    passing over a batch whose every item was unreadable (skipped)."""
    for x, y, idx, _ in loader:
        if x is None:
            continue
        x, y = task.to_device(x, y, device, channels_last)
        yield x, y, idx


def build_task(cfg: Any, num_classes: int) -> Task:
    """``cfg`` is a TaskConfig. Only the named task's module is imported."""
    module = MODULES.get(cfg.task)
    if module is not None:
        importlib.import_module(f"{__name__}.{module}")  # registers the task
    return TASKS.get(cfg.task)(cfg, num_classes)


def check_model_name(task: str, name: str) -> None:
    """A one-line ConfigError when ``--model name`` builds nothing for ``task``: detection
    names a torchvision detector, lm a GPT decoder, the other tasks a classifier (or a user
    builder)."""
    if task == "lm":
        if ":" not in name:  # FILE.py:FUNC: the user's builder, imported where it is built
            gpt_shape(name)
        return
    if task == "detection":
        from scaleprobe.tasks.detection import detector_name  # heavy: torch (and torchvision)

        detector_name(name)
        return
    from scaleprobe.models.build import check_name  # heavy: torch

    check_name(name)
