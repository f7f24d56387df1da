"""A live progress bar for the training loop (rank 0 only; silent elsewhere).

With ``--steps auto`` the bar's total is the step count the window can still reach: at most
``--max-steps`` timed steps, and no more than the steps ``--max-seconds`` leaves room for at
the pace so far (``projected_total``), so the bar and its time left end when the run does.
The window may still end sooner, once the median step is stable."""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from typing import Any


def progress_bar(unit: str, console: Any, transient: bool, eta_field: bool = False) -> Any:
    """A rich progress bar: the description, the bar, done / total ``unit``, elapsed, the time
    left (rich's estimate, or with ``eta_field`` the task's own ``eta`` field), a note."""
    # heavy: rich: rich.progress is more than `import rich` loads
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.table import Column

    class Note(TextColumn):
        """The note: cut with "…" on one line where the terminal is narrow."""

        def render(self, task: Any) -> Any:
            text = super().render(task)
            text.no_wrap, text.overflow = True, "ellipsis"
            return text

    def keep() -> Column:  # the figures: never cut, never wrapped
        return Column(no_wrap=True)

    left = (TextColumn("ETA {task.fields[eta]}", table_column=keep()) if eta_field
            else TimeRemainingColumn(table_column=keep()))
    # in a narrow terminal (80 columns) the note and then the bar give way, never the counts
    # and times (they were cut to "14/…", "0:…"): only those two columns may be narrowed
    return Progress(TextColumn("[bold]{task.description}", table_column=keep()),
                    BarColumn(bar_width=20, table_column=Column(min_width=4)),
                    MofNCompleteColumn(table_column=keep()), TextColumn(unit, table_column=keep()),
                    TimeElapsedColumn(table_column=keep()), left,
                    Note("{task.fields[note]}", table_column=Column(overflow="ellipsis")),
                    console=console, transient=transient)


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


PLAIN_EVERY_S = 30.0  # outside a terminal (a log file, a pipe, a scheduler): a line this often


class StepProgress:
    """The training loop's live bar on a terminal; elsewhere (no live display: a log file, a
    pipe, a batch job) a plain line every ``PLAIN_EVERY_S`` seconds from a thread of its own,
    so that a long run is never silent, not even inside a step (a --compile warm-up step
    took 7 min 52 s)."""

    def __init__(self, enabled: bool = True, label: str = "training") -> None:
        self.enabled = enabled
        self.label = label
        self._bar: Any = None  # rich's Progress on a terminal
        self._task = None
        self._train: Any = None  # --steps auto: the total follows projected_total
        self._began = 0.0
        self._lines: PlainLines | None = None

    def begin(self, parts: Any) -> None:
        if not self.enabled:
            return
        # heavy: rich: printing only; kept out of the CLI's start-up
        from rich.console import Console

        t = parts.cfg.train
        self._began = time.perf_counter()
        if t.epochs is not None:
            total = t.epochs * len(parts.loader)
        elif isinstance(t.steps, int):
            total = t.warmup_steps + t.steps
        else:
            total = t.warmup_steps + t.max_steps
            self._train = t
        console = Console(file=sys.stderr)
        if not console.is_terminal:
            self._total = total
            self._lines = PlainLines(self.label, PLAIN_EVERY_S).start()
            return
        self._bar = progress_bar("steps", console, transient=False)
        self._bar.start()
        self._task = self._bar.add_task(self.label, total=total, note="warm-up")

    def advance(self, st: Any) -> None:
        if self._bar is None and self._lines is None:
            return
        note = "warm-up" if st.timed == 0 else f"epoch {st.epoch + 1}"
        total = None
        if self._train is not None:
            total = projected_total(self._train, st, time.perf_counter(), self._began)
            t = self._train
            note += f"; auto: until stable, {t.max_steps} steps or {t.max_seconds:g} s"
        if self._lines is not None:
            self._lines.text = f"step {st.step} of {total or self._total}; {note}"
            return
        self._bar.update(self._task, completed=st.step, note=note, total=total)

    def end(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        if self._lines is not None:
            self._lines.stop()
            self._lines = None


class PlainLines:
    """``training: step 37 of 205; epoch 1, 00:01:30 elapsed`` on stderr every ``every_s``
    (the latest ``text``), from a daemon thread: it wakes twice a minute and prints one
    line, nothing inside the timed window's synchronisation."""

    def __init__(self, label: str, every_s: float) -> None:
        self.label, self.every_s = label, every_s
        self.text = "setting up, or in the first step (a compiled model compiles there)"
        self._t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="scaleprobe-progress-lines",
                                        daemon=True)

    def start(self) -> PlainLines:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            elapsed = time.strftime("%H:%M:%S", time.gmtime(time.monotonic() - self._t0))
            try:
                print(f"{self.label}: {self.text}, {elapsed} elapsed", file=sys.stderr,
                      flush=True)
            except (OSError, ValueError):  # stderr closed: progress is a courtesy
                return


# the file a point's progress goes to, named by the experiment that started the point (a
# sweep, scale or the demo shows it on its own bar; a point's own bar is off)
PROGRESS_ENV = "SCALEPROBE_POINT_PROGRESS"


class FileProgress(StepProgress):
    """Where the training loop is, as one line of text in a file, for the experiment's bar:
    ``epoch 1/2, step 37 of 56`` or ``27 steps timed; --steps auto stops when the median is
    stable, by 200 steps or 120 s``. Rewritten (a small file, renamed into place) at most
    every ``every_s``: a cost of the same kind as the live bar a run shows otherwise."""

    def __init__(self, path: str, every_s: float = 1.0) -> None:
        super().__init__(enabled=False)
        self.path = path
        self.every_s = every_s
        self._last = -math.inf  # the first step is written whatever the clock reads
        self._t: Any = None
        self._per_epoch: int | None = None

    def begin(self, parts: Any) -> None:
        self._t = parts.cfg.train
        if self._t.epochs is not None or self._t.target is not None:
            try:
                self._per_epoch = len(parts.loader)
            except TypeError:  # an iterable loader without a length
                self._per_epoch = None
        self._write("setting up: building the model and data")

    def advance(self, st: Any) -> None:
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            self._write(self.text(st))

    def text(self, st: Any) -> str:
        t = self._t
        if st.timed == 0 and t.warmup_steps:
            return f"warm-up step {min(st.step, t.warmup_steps)} of {t.warmup_steps} (untimed)"
        if t.epochs is not None or t.target is not None:
            of = t.epochs if t.epochs is not None else f"at most {t.max_epochs}"
            inside = (f", step {st.step - st.epochs_complete * self._per_epoch} of "
                      f"{self._per_epoch}" if self._per_epoch else "")
            return f"epoch {st.epoch + 1} of {of}{inside}"
        if isinstance(t.steps, int):
            return f"{st.timed} of {t.steps} steps timed"
        return (f"{st.timed} steps timed; --steps auto stops when the median is stable, by "
                f"{t.max_steps} steps or {t.max_seconds:g} s")

    def end(self) -> None:
        self._write("training done: recording the result")

    def _write(self, text: str) -> None:
        tmp = f"{self.path}.tmp"
        try:
            with open(tmp, "w") as fh:
                fh.write(text)
            os.replace(tmp, self.path)
        except OSError:  # progress is a courtesy: never fails a run
            pass


def read_point_progress(path: str | None) -> str | None:
    """The last line a point's ``FileProgress`` wrote, or None."""
    if not path:
        return None
    try:
        with open(path) as fh:
            return fh.read(300).strip() or None
    except OSError:
        return None
