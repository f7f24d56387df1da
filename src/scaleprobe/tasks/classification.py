"""Image classification: cross-entropy loss, top-1 accuracy."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import nn

from scaleprobe.data.loader import collate_indexed
from scaleprobe.models.build import logits_of
from scaleprobe.tasks import TASKS, evaluating, on_device


class Classification:
    name = "classification"
    collate = staticmethod(collate_indexed)
    metric_name = "accuracy"

    def __init__(self, cfg: Any, num_classes: int) -> None:
        self.num_classes = num_classes
        self.criterion = nn.CrossEntropyLoss()

    def build_model(self, base: nn.Module) -> nn.Module:
        return base

    def to_device(self, x: Any, y: Any, device: torch.device, channels_last: bool):
        x = x.to(device, non_blocking=True)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x, y.to(device, non_blocking=True)

    def forward_loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.criterion(logits_of(model(x)), y)

    def batch_sampler(self, dataset: Any, batch_size: int, seed: int) -> Any:
        return None

    @torch.no_grad()
    def evaluate(self, model: nn.Module, loader: Any, device: torch.device,
                 autocast: AbstractContextManager, channels_last: bool = False) -> dict[str, Any]:
        correct = total = 0
        with evaluating(model):
            for x, y, _ in on_device(self, loader, device, channels_last):
                with autocast:
                    pred = logits_of(model(x)).argmax(1)
                correct += int((pred == y).sum())
                total += int(y.numel())
        return {"accuracy": correct / total if total else None, "eval_samples": total}


TASKS.add("classification", Classification, "cross-entropy, top-1 accuracy")
