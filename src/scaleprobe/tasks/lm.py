"""Language modelling (``--task lm``): next-token cross-entropy; held-out loss and perplexity.

The timed forward phase is the model's forward and the mean cross-entropy of every position
against the next token. Evaluation (``--eval``, ``--target``) runs the same over the held-out
windows and reports ``loss`` (mean nats per token; lower is better, also for ``--target
loss=X``), ``perplexity`` and, beside them, the context-free baseline on the same held-out
tokens with the margin's paired interval (``features/lmspec.baseline_claim`` decides "beats
the baseline"). docs/TASKS.md ("Loss and metrics") lists every figure.
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from scaleprobe.core.errors import ConfigError
from scaleprobe.core.metrics import paired_difference_interval
from scaleprobe.data.loader import collate_indexed
from scaleprobe.tasks import TASKS, evaluating, on_device


class LanguageModel:
    name = "lm"
    collate = staticmethod(collate_indexed)
    metric_name = "loss"

    def __init__(self, cfg: Any, num_classes: int) -> None:
        self.vocab = num_classes  # the data's vocabulary
        # each token id's cost under the context-free baseline (Split.context_free), set by
        # use_baseline; None: evaluation reports no baseline
        self.context_free: torch.Tensor | None = None

    def use_baseline(self, nats: Any) -> None:
        """The context-free baseline's cost of each token id (``vocab`` floats)."""
        self.context_free = torch.as_tensor(nats, dtype=torch.float64)

    def build_model(self, base: nn.Module) -> nn.Module:
        return base

    @torch.no_grad()
    def check_model(self, model: nn.Module, x: torch.Tensor, spec: str) -> None:
        """The user's module on one sample of token ids ``[1, T]``: logits ``[1, T, V]`` with
        ``V`` at least the data's vocabulary, else one ConfigError line saying what came back
        (lmspec.USER_LM)."""
        was = model.training
        try:
            model.eval()
            out = model(x)
        except Exception as e:  # noqa: BLE001  (the user's forward: one line, exit 2)
            raise ConfigError(f"--model {spec} failed on token ids of shape {list(x.shape)}: "
                              f"{type(e).__name__}: {e}") from None
        finally:
            model.train(was)
        b, t = x.shape
        got = (f"shape {list(out.shape)} ({out.dtype})" if isinstance(out, torch.Tensor)
               else type(out).__name__)
        if (not isinstance(out, torch.Tensor) or out.dim() != 3 or tuple(out.shape[:2]) != (b, t)
                or out.shape[2] < self.vocab or not out.is_floating_point()):
            raise ConfigError(f"--model {spec} maps token ids [{b}, {t}] to {got}; --task lm "
                              f"needs float logits [{b}, {t}, V] with V >= the data's "
                              f"vocabulary {self.vocab}")

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
        model_w: list[float] = []  # per held-out window: mean nats per token
        base_w: list[float] = []
        total = base = 0.0
        tokens = samples = 0
        table = self.context_free
        with evaluating(model):
            for x, y, _ in on_device(self, loader, device):
                with autocast:
                    logits = model(x)
                per = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(),
                                      y.reshape(-1), reduction="none").view(y.shape).double()
                total += float(per.sum())
                model_w += per.mean(dim=1).tolist()
                if table is not None:
                    cost = table.to(y.device)[y]
                    base += float(cost.sum())
                    base_w += cost.mean(dim=1).tolist()
                tokens += int(y.numel())
                samples += int(y.shape[0])
        loss = total / tokens if tokens else None
        out: dict[str, Any] = {"loss": loss,
                               "perplexity": math.exp(loss) if loss is not None else None,
                               "eval_samples": samples, "eval_tokens": tokens}
        if table is not None and loss is not None:
            iv = paired_difference_interval(model_w, base_w)
            out.update(baseline_loss=base / tokens, baseline_margin=base / tokens - loss,
                       baseline_margin_lo=iv[1] if iv else None,
                       baseline_margin_hi=iv[2] if iv else None,
                       baseline_windows=len(model_w))
        return out


TASKS.add("lm", LanguageModel, "language modelling: next-token cross-entropy; held-out loss "
          "(nats/token) and perplexity")
