"""Language modelling (``--task lm``): next-token cross-entropy; held-out loss and perplexity.

The timed forward phase is the model's forward and the loss: logits ``B x T x vocab``, the
mean cross-entropy of every position against the next token (``F.cross_entropy``, which
autocast runs in float32). Evaluation (``--eval``, ``--target``) runs the same over the
held-out windows (``data.eval_windows`` of them, spread evenly over the held-out split) and
reports:

- ``loss``: mean nats per token over every held-out target token;
- ``perplexity``: ``exp(loss)``;
- ``eval_samples`` and ``eval_tokens``: the windows and tokens it was taken over.

Beside it the run records the training split's unigram entropy (``unigram_entropy_nats``,
data/tokens.py): a held-out loss below it is a model that learned more than the token
frequencies. Lower is better for both metrics, also for ``--target loss=X``.
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from scaleprobe.data.loader import collate_indexed
from scaleprobe.tasks import TASKS, evaluating, on_device


class LanguageModel:
    name = "lm"
    collate = staticmethod(collate_indexed)
    metric_name = "loss"

    def __init__(self, cfg: Any, num_classes: int) -> None:
        self.vocab = num_classes  # the data's vocabulary

    def build_model(self, base: nn.Module) -> nn.Module:
        return base

    def transforms(self, kind: str, size: Any) -> tuple[None, None]:
        """Tokens go in as they are: no image transform."""
        return None, None

    def to_device(self, x: torch.Tensor, y: torch.Tensor, device: torch.device,
                  channels_last: bool) -> tuple[torch.Tensor, torch.Tensor]:
        return x.to(device, non_blocking=True), y.to(device, non_blocking=True)

    def forward_loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = model(x)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

    def batch_sampler(self, dataset: Any, batch_size: int, seed: int) -> Any:
        return None

    @torch.no_grad()
    def evaluate(self, model: nn.Module, loader: Any, device: torch.device,
                 autocast: AbstractContextManager, channels_last: bool = False) -> dict[str, Any]:
        total = 0.0
        tokens = samples = 0
        with evaluating(model):
            for x, y, _ in on_device(self, loader, device):
                with autocast:
                    logits = model(x)
                total += float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                               y.reshape(-1), reduction="sum"))
                tokens += int(y.numel())
                samples += int(y.shape[0])
        loss = total / tokens if tokens else None
        return {"loss": loss, "perplexity": math.exp(loss) if loss is not None else None,
                "eval_samples": samples, "eval_tokens": tokens}


TASKS.add("lm", LanguageModel, "language modelling: next-token cross-entropy; held-out loss "
          "(nats/token) and perplexity")
