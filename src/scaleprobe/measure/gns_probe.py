"""Squared gradient norms measured in the step, for the gradient noise scale (``gns.py``).

Two ways, one record (``GnsSamples``): ``ddp_hook`` (DDP, 2+ processes), where ``NormTap``
rides on the comm hook that times DDP's all-reduces and ``TapSteps`` closes a step's sums at
the backward mark; and ``micro_batches`` (one process, ``--gns``), where ``HalfSteps`` runs
the step on the two halves of its batch. docs/CRITICAL_BATCH.md gives which norm each reads.
The squared norms stay device tensors through the timed window (no host synchronisation on
CUDA); ``StepNorms.record`` reads them once, after it.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from scaleprobe.core.run_parts import GnsSamples
from scaleprobe.features.gns import mode

FP16_REASON = ("not measured with --amp fp16: the loss scale multiplies every gradient norm "
               "and may change between steps")


def sq_norm(t: torch.Tensor) -> torch.Tensor:
    """The squared L2 norm of ``t`` as a float32 tensor on its device (no host sync)."""
    return torch.linalg.vector_norm(t.detach(), dtype=torch.float32).square()


class StepNorms:
    """Per timed step, the small and the big squared norm (device tensors); the timed steps
    are contiguous from ``first_step`` (the warm-up's length)."""

    def __init__(self, method: str, b_small: int, b_big: int, first_step: int) -> None:
        self.method, self.b_small, self.b_big = method, b_small, b_big
        self.first_step = first_step
        self.small: list[torch.Tensor] = []
        self.big: list[torch.Tensor] = []

    def add(self, small: torch.Tensor, big: torch.Tensor) -> None:
        self.small.append(small)
        self.big.append(big)

    def record(self, reason: str | None = None) -> GnsSamples:
        """The rank's record: read after the window (one transfer on CUDA)."""
        if reason is not None or not self.small:
            return GnsSamples(method=self.method, b_small=self.b_small, b_big=self.b_big,
                              reason=reason or "no timed step")
        pairs = torch.stack([torch.stack(self.small), torch.stack(self.big)]).cpu().tolist()
        return GnsSamples(method=self.method, b_small=self.b_small, b_big=self.b_big,
                          first_step=self.first_step, small_sq=pairs[0], big_sq=pairs[1])


class NormTap:
    """The comm hook's tap (``CommTimer.tap``): the squared norm of each bucket before its
    all-reduce and after. Called on the autograd thread (before) and on the backend's (after);
    a step's sums are taken once DDP has waited for every bucket."""

    def __init__(self) -> None:
        self._small: list[torch.Tensor] = []
        self._big: list[torch.Tensor] = []

    def before(self, buffer: torch.Tensor) -> None:
        self._small.append(sq_norm(buffer))

    def after(self, reduced: torch.Tensor) -> None:
        self._big.append(sq_norm(reduced))

    def clear(self) -> None:
        self._small, self._big = [], []

    def take(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """This step's (small, big) sums over its buckets, or None when nothing was sent."""
        small, big = self._small, self._big
        self.clear()
        if not small or len(small) != len(big):
            return None
        return torch.stack(small).sum(), torch.stack(big).sum()


class TapSteps:
    """A step timer (around the one DDP's comm timing uses) that starts each step's sums
    afresh and, at the backward mark, keeps the step's pair when the step is timed."""

    def __init__(self, timer: Any, tap: NormTap, log: StepNorms | None) -> None:
        self.timer, self.tap, self.log = timer, tap, log

    def start(self) -> None:
        self.tap.clear()  # what a calibration or an evaluation sent is no step's
        self.timer.start()

    def mark(self, phase: str) -> None:
        self.timer.mark(phase)
        if phase == "backward":
            got = self.tap.take()
            if got is not None and self.log is not None:
                self.log.add(*got)

    def move(self, src: str, dst: str, seconds: float) -> None:
        self.timer.move(src, dst, seconds)


class HalfSteps:
    """One process: a step's forward and backward on the two halves of its batch, recording
    the halves' squared norms (mean of the two: the small, batch b/2) and the accumulated
    gradient's (the big, batch b). The first half's backward runs under the strategy's
    ``no_sync`` (a one-process DDP then reduces once, after the second)."""

    def __init__(self, model: torch.nn.Module, batch: int, first_step: int) -> None:
        self.log = StepNorms("micro_batches", batch // 2, batch, first_step)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self._armed = False
        self._half: list[torch.Tensor] = []
        self._handles = [p.register_hook(self._seen) for p in self.params]

    def _seen(self, grad: torch.Tensor) -> None:
        if self._armed:
            self._half.append(sq_norm(grad))

    def _half_sq(self) -> torch.Tensor:
        got = torch.stack(self._half).sum() if self._half else torch.zeros(())
        self._half = []
        return got

    def step(self, p: Any, x: Any, y: Any, tm: Any, timed: bool) -> torch.Tensor:
        """Forward and backward of the two halves (marks forward, backward twice); returns
        the batch's mean loss (detached from neither half's graph: for the loss record)."""
        h = len(x) // 2
        losses, halves = [], []
        self._armed = timed
        try:
            for i, (xs, ys) in enumerate(((x[:h], y[:h]), (x[h:], y[h:]))):
                sync = p.strategy.no_sync(p.model) if i == 0 else contextlib.nullcontext()
                with sync:
                    with p.autocast:
                        loss = p.task.forward_loss(p.model, xs, ys)
                    tm.mark("forward")
                    p.scaler.scale(loss * 0.5).backward()
                tm.mark("backward")
                losses.append(loss.detach())
                if timed:
                    halves.append(self._half_sq() * 4.0)  # the hook saw half of the half's
        finally:
            self._armed = False
        if timed:
            big = torch.stack([sq_norm(q.grad) for q in self.params if q.grad is not None]).sum()
            self.log.add(torch.stack(halves).mean(), big)
        return (losses[0] + losses[1]) * 0.5

    def close(self) -> None:
        for h in self._handles:
            h.remove()


def half_steps(p: Any) -> HalfSteps | None:
    """The one-process probe when the run measures the noise scale from two micro-batches
    (``gns.mode``), else None."""
    if mode(p.cfg) != "micro_batches" or p.scaler.is_enabled():
        return None
    return HalfSteps(p.model, p.per_process_batch, p.cfg.train.warmup_steps)


def samples_of(p: Any) -> GnsSamples | None:
    """This rank's ``GnsSamples`` (read after the window), or None when the run does not
    measure the noise scale."""
    how = mode(p.cfg)
    if how is None:
        return None
    if p.scaler.is_enabled():
        return GnsSamples(method=how, reason=FP16_REASON)
    if isinstance(p.gns, HalfSteps):
        return p.gns.log.record()
    return p.strategy.gns_samples()
