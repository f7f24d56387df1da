"""The time FSDP2 keeps the training thread blocked on its collectives, seen through its own
custom-collective API (``FSDPModule.set_custom_all_gather`` / ``set_custom_reduce_scatter``),
without changing what is sent.

Each FSDP unit gets an all-gather and a reduce-scatter object that are PyTorch's default ones
(``DefaultAllGather`` / ``DefaultReduceScatter``: the same ``all_gather_single`` /
``reduce_scatter_single`` call, the same buffers from the same allocator, and FSDP still sees
its default type) whose call is timed on ``perf_counter``. On the CPU (gloo) FSDP calls them
synchronously: the call returns when the collective has completed on this rank, so its
duration is the time the training thread was blocked on it, waiting for the slower rank
included. ``WaitClock.take()`` hands the seconds summed since the last call to the step timer
(``measure/timer.WaitSplit``), which moves them out of the phase they fell in (forward:
all-gathers; backward: all-gathers and reduce-scatters) into ``comm``.

Not installed on CUDA: there FSDP launches the collectives on its own streams and the call
returns once NCCL's work is queued, so a host clock would not see the transfer.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

IN_STEP_METHOD = ("FSDP2 custom all-gather / reduce-scatter (PyTorch's default collective, "
                  "timed): per step, the time the training thread was blocked inside FSDP's "
                  "all-gathers and reduce-scatters (gloo runs them synchronously on the CPU), "
                  "moved out of the forward / backward phase it fell in")
CUDA_REASON = ("not measured on CUDA: FSDP runs its collectives on their own streams and a "
               "host clock sees only the launch; they stay inside forward and backward")


class WaitClock:
    """Seconds spent inside the timed collectives, summed until ``take()`` (at every phase
    mark); ``step_calls``: the calls of each kind the last whole step made up to its last
    mark (``begin_step`` at every step's start drops what came after, between steps)."""

    def __init__(self, clock: Any = time.perf_counter) -> None:
        self.clock = clock
        self._waited = 0.0
        self._pending = {"all_gather": 0, "reduce_scatter": 0}  # since the last take
        self._pending_s = dict.fromkeys(self._pending, 0.0)
        self._step = dict(self._pending)  # taken in this step
        self._step_s = dict.fromkeys(self._pending, 0.0)
        self.step_calls: dict[str, int] | None = None  # None: no step ended yet
        # each whole step's seconds blocked per kind, in order (``seconds_per_step``)
        self.steps_s: list[dict[str, float]] = []

    def add(self, kind: str, seconds: float) -> None:
        self._waited += seconds
        self._pending[kind] += 1
        self._pending_s[kind] += seconds

    def take(self) -> float:
        out, self._waited = self._waited, 0.0
        for k, v in self._pending.items():
            self._step[k] += v
            self._step_s[k] += self._pending_s[k]
        self._pending = dict.fromkeys(self._pending, 0)
        self._pending_s = dict.fromkeys(self._pending, 0.0)
        return out

    def begin_step(self) -> None:
        """A step starts: what the previous one took is its count; the rest is dropped."""
        if any(self._step.values()):
            self.step_calls = dict(self._step)
            self.steps_s.append(dict(self._step_s))
        self._step = dict.fromkeys(self._step, 0)
        self._step_s = dict.fromkeys(self._step, 0.0)
        self._pending = dict.fromkeys(self._pending, 0)
        self._pending_s = dict.fromkeys(self._pending, 0.0)
        self._waited = 0.0

    def seconds_per_step(self, skip: int = 0) -> dict[str, float] | None:
        """Per kind, the median over the whole steps after the first ``skip`` (the warm-up)
        of the seconds the training thread was blocked in it; None before any step ended."""
        got = self.steps_s[skip:] or self.steps_s
        if not got:
            return None
        return {k: statistics.median(s[k] for s in got) for k in got[0]}


def timed_comms(clock: WaitClock) -> tuple[Any, Any] | None:
    """(all-gather, reduce-scatter) objects for ``set_custom_*`` that time PyTorch's default
    collectives on ``clock``; None when this torch has no such classes."""
    try:
        # heavy: torch: FSDP's collectives, only under --strategy fsdp
        from torch.distributed.fsdp._fully_shard._fsdp_collectives import (
            DefaultAllGather,
            DefaultReduceScatter,
        )
    except ImportError:
        return None

    class TimedAllGather(DefaultAllGather):
        def __call__(self, output_tensor: Any, input_tensor: Any, group: Any,
                     async_op: bool = False) -> Any:
            t0 = clock.clock()
            work = super().__call__(output_tensor, input_tensor, group, async_op)
            clock.add("all_gather", clock.clock() - t0)
            return work

    class TimedReduceScatter(DefaultReduceScatter):
        def __call__(self, output_tensor: Any, input_tensor: Any, group: Any, op: Any,
                     async_op: bool = False) -> Any:
            t0 = clock.clock()
            work = super().__call__(output_tensor, input_tensor, group, op, async_op)
            clock.add("reduce_scatter", clock.clock() - t0)
            return work

    return TimedAllGather(), TimedReduceScatter()


def install(modules: list[Any], clock: WaitClock) -> str | None:
    """Give every FSDP module in ``modules`` the timed collectives; None when done, else why
    not (an older torch without the API: communication then stays inside forward/backward)."""
    comms = timed_comms(clock)
    if comms is None or not all(hasattr(m, "set_custom_all_gather") for m in modules):
        return ("not measured: this torch has no FSDP2 custom-collective API "
                "(set_custom_all_gather, torch 2.9 and later); communication stays inside forward "
                "and backward")
    ag, rs = comms
    for m in modules:
        m.set_custom_all_gather(ag)
        m.set_custom_reduce_scatter(rs)
    return None
