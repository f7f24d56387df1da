"""A live progress bar for the training loop (rank 0 only; silent elsewhere).

With ``--steps auto`` the bar's total is the step count the window can still reach: at most
``--max-steps`` timed steps, and no more than the steps ``--max-seconds`` leaves room for at
the pace so far (``projected_total``), so the bar and its time left end when the run does.
The window may still end sooner, once the median step is stable."""

from __future__ import annotations

import sys
import time
from typing import Any


def projected_total(train: Any, st: Any, now: float, began: float) -> int:
    """Steps (warm-up included) a ``--steps auto`` run will have done when a cap ends it:
    --max-steps timed steps, or as many as fit in what is left of --max-seconds at the pace
    of the timed steps so far (before the window: of the warm-up steps)."""
    warm, cap = train.warmup_steps, train.max_steps
    if st.timed > 0 and st.window_t0 is not None:
        elapsed = max(1e-9, now - st.window_t0)
        left = max(0.0, train.max_seconds - elapsed)
        fits = st.timed + int(st.timed / elapsed * left)
    elif st.step > 0:
        per_step = max(1e-9, (now - began) / st.step)
        fits = int(train.max_seconds / per_step)
    else:
        return warm + cap
    return warm + max(st.timed, min(cap, fits))


class StepProgress:
    def __init__(self, enabled: bool = True, label: str = "training") -> None:
        self.enabled = enabled
        self.label = label
        self._bar = None
        self._task = None
        self._train: Any = None  # --steps auto: the total follows projected_total
        self._began = 0.0

    def begin(self, parts: Any) -> None:
        if not self.enabled:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        t = parts.cfg.train
        if t.epochs is not None:
            total = t.epochs * len(parts.loader)
        elif isinstance(t.steps, int):
            total = t.warmup_steps + t.steps
        else:
            total = t.warmup_steps + t.max_steps
            self._train, self._began = t, time.perf_counter()
        console = Console(file=sys.stderr)
        self._bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                             MofNCompleteColumn(), TextColumn("steps"), TimeElapsedColumn(),
                             TimeRemainingColumn(), TextColumn("{task.fields[note]}"),
                             console=console, transient=not console.is_terminal)
        self._bar.start()
        self._task = self._bar.add_task(self.label, total=total, note="warm-up")

    def advance(self, st: Any) -> None:
        if self._bar is None:
            return
        note = "warm-up" if st.timed == 0 else f"epoch {st.epoch + 1}"
        total = None
        if self._train is not None:
            total = projected_total(self._train, st, time.perf_counter(), self._began)
            t = self._train
            note += f"; auto: until stable, {t.max_steps} steps or {t.max_seconds:g} s"
        self._bar.update(self._task, completed=st.step, note=note, total=total)

    def end(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


class NoProgress(StepProgress):
    def __init__(self) -> None:
        super().__init__(enabled=False)
