"""Per-step phase timing.

Each step is cut into contiguous phases by marks: ``start`` (before asking the loader for the
next batch), then ``data``, ``h2d``, ``forward``, ``backward``, ``comm``, ``optimizer``. A
phase lasts from the previous mark to its own, so the phases add up to the step exactly.

On CPU the marks are ``perf_counter`` readings. On CUDA they are CUDA events recorded in the
stream and read only after the window: nothing synchronises the host inside the timed window.
A CUDA event recorded after the batch arrives measures how long the GPU sat idle waiting for
data, which is the data wait that matters.

``move`` re-labels host-clock time measured inside a phase (FSDP's waits on its collectives,
``strategies/fsdp_comm.py``) as another phase: the phases still add up to the step.
"""

from __future__ import annotations

import time
from typing import Any

PHASES = ("data", "h2d", "forward", "backward", "comm", "optimizer")


class StepTimer:
    def __init__(self, device_type: str) -> None:
        self.cuda = device_type == "cuda"
        self.steps: list[list[tuple[str, Any]]] = []
        self._cur: list[tuple[str, Any]] | None = None
        self._t0_wall: float | None = None
        if self.cuda:
            import torch  # heavy: torch: CUDA events and syncs, only on a GPU

            self._Event = torch.cuda.Event

    def _now(self) -> Any:
        if self.cuda:
            ev = self._Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def start(self) -> None:
        """Open a step. The previous step, if any, ends here."""
        m = self._now()
        if self._cur is not None:
            self._cur.append(("end", m))
            self.steps.append(self._cur)
        self._cur = [("start", m)]
        if self._t0_wall is None:
            self._t0_wall = time.perf_counter()

    def mark(self, phase: str) -> None:
        assert self._cur is not None, "a mark outside a step: start() opens one"
        self._cur.append((phase, self._now()))

    def move(self, src: str, dst: str, seconds: float) -> None:
        """Count ``seconds`` of the open step's ``src`` phase as ``dst`` (host-clock figures:
        not on CUDA, where the phases are the stream's). At most what ``src`` lasted moves."""
        if self._cur is not None and seconds > 0:
            self._cur.append(("move", (src, dst, float(seconds))))

    def close(self) -> None:
        """End the last open step (call after the window)."""
        if self._cur is not None:
            self._cur.append(("end", self._now()))
            self.steps.append(self._cur)
            self._cur = None

    def discard_open(self) -> None:
        self._cur = None

    def _delta(self, a: Any, b: Any) -> float:
        if self.cuda:
            return a.elapsed_time(b) / 1000.0
        return b - a

    def ready_count(self) -> int:
        """Steps whose times can be read without waiting (CUDA: completed events only)."""
        if not self.cuda:
            return len(self.steps)
        n = 0
        for s in self.steps:
            if not s[-1][1].query():
                break
            n += 1
        return n

    def step_times(self, upto: int | None = None) -> list[float]:
        steps = self.steps[:upto] if upto is not None else self.steps
        return [self._delta(s[0][1], s[-1][1]) for s in steps]

    def phase_times(self) -> dict[str, list[float]]:
        """Per phase, one duration per step (0 for phases a step did not mark)."""
        if self.cuda:
            import torch  # heavy: torch: CUDA events and syncs, only on a GPU

            torch.cuda.synchronize()
        return self._phases(self.steps)

    def _phases(self, steps: list[list[tuple[str, Any]]]) -> dict[str, list[float]]:
        out: dict[str, list[float]] = {p: [] for p in PHASES}
        for s in steps:
            got = dict.fromkeys(PHASES, 0.0)
            marks = [m for m in s if m[0] not in ("start", "move")]
            prev = s[0][1]
            for phase, m in marks:
                if phase != "end":
                    got[phase] += self._delta(prev, m)
                    prev = m
            # the loop's own bookkeeping after the last mark is charged to the optimizer phase
            got["optimizer"] += self._delta(prev, s[-1][1])
            for src, dst, sec in (m[1] for m in s if m[0] == "move"):
                moved = min(sec, got[src])
                got[src] -= moved
                got[dst] += moved
            for p in PHASES:
                out[p].append(got[p])
        return out

    def readable(self, start: int) -> int:
        """The steps up to which the times can be read now, from ``start`` on, without waiting
        (CUDA: their events have completed): for the step log, from another thread."""
        n = len(self.steps)
        if not self.cuda:
            return n
        end = start
        while end < n and self.steps[end][-1][1].query():
            end += 1
        return end

    def read(self, start: int, end: int
             ) -> tuple[list[float], dict[str, list[float]], list[float | None]]:
        """Steps ``start``..``end`` (``readable``): times, phases and, on the CPU, the wall
        clock at each step's end (CUDA: None, the events carry no wall clock)."""
        steps = self.steps[start:end]
        times = [self._delta(s[0][1], s[-1][1]) for s in steps]
        if self.cuda:
            return times, self._phases(steps), [None] * len(steps)
        off = time.time() - time.perf_counter()
        return times, self._phases(steps), [s[-1][1] + off for s in steps]


class WaitSplit:
    """A step timer that, at each mark, moves the time a strategy's ``waits`` saw the
    training thread blocked on communication since the previous mark out of the phase just
    marked and into ``comm`` (``waits.take()``: seconds, drained). At ``start``
    (``waits.begin_step()``) what was waited between steps is dropped: it belongs to no step."""

    def __init__(self, timer: Any, waits: Any) -> None:
        self.timer, self.waits = timer, waits

    def start(self) -> None:
        self.waits.begin_step()
        self.timer.start()

    def mark(self, phase: str) -> None:
        self.timer.mark(phase)
        waited = self.waits.take()
        if waited > 0:
            self.timer.move(phase, "comm", waited)

    def move(self, src: str, dst: str, seconds: float) -> None:
        self.timer.move(src, dst, seconds)
