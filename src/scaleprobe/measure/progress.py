"""A live progress bar for the training loop (rank 0 only; silent elsewhere)."""

from __future__ import annotations

import sys
from typing import Any


class StepProgress:
    def __init__(self, enabled: bool = True, label: str = "training") -> None:
        self.enabled = enabled
        self.label = label
        self._bar = None
        self._task = None

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
        self._bar.update(self._task, completed=st.step, note=note)

    def end(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


class NoProgress(StepProgress):
    def __init__(self) -> None:
        super().__init__(enabled=False)
