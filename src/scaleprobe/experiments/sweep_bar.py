"""The experiment's progress bar (points done / total, ETA) and one line per finished point.

Each point's own training bar is off (``measure.progress = false``); this is the only bar.
With ``enabled=False`` nothing is printed.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from rich.console import Console
from rich.markup import escape

from scaleprobe.core.fmt import bytes_, duration, rate, repeat_label
from scaleprobe.core.result_model import RunResult
from scaleprobe.experiments.spec import Point, describe
from scaleprobe.measure.progress import progress_bar, read_point_progress
from scaleprobe.predict.memmodel import cpu_tensor_peak

STYLE = {"ok": "green", "oom": "yellow", "skipped": "yellow"}
LINE_EVERY_S = 60.0  # without a live bar (output to a file or pipe): a line this often


class PointWatch:
    """Reads a running point's steps file every ``every_s`` and shows it on the bar."""

    def __init__(self, bar: SweepProgress, name: str, path: str, every_s: float = 1.0) -> None:
        self.bar, self.name, self.path, self.every_s = bar, name, path, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="scaleprobe-point-watch",
                                        daemon=True)
        self._started = time.monotonic()

    def start(self) -> PointWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def _loop(self) -> None:
        last = None
        while not self._stop.wait(self.every_s):
            text = read_point_progress(self.path) or "starting: importing torch"
            quiet = time.monotonic() - max(self.bar._shown, self._started)
            if text != last or quiet >= LINE_EVERY_S:
                self.bar.show_point(self.name, text, quiet)
                last = text


class SweepProgress:
    def __init__(self, enabled: bool = True, console: Console | None = None,
                 label: str = "sweep") -> None:
        self.enabled = enabled
        self.console = console or Console(file=sys.stderr)
        self.label = label
        self._bar: Any = None
        self._task: Any = None
        self.completed = 0
        self.total = 0
        self.run_s: list[float] = []  # wall time of each point run (not resumed)
        self._t_point = time.monotonic()
        self._watch: PointWatch | None = None
        self._shown = time.monotonic()
        self._said_start = False

    def start(self, total: int) -> None:
        self.total = total
        if not self.enabled:
            return
        self._bar = progress_bar("points", self.console, transient=True, eta_field=True)
        self._bar.start()
        # the description is read as markup: a sweep id is the user's text
        self._task = self._bar.add_task(escape(self.label), total=total or None, note="",
                                        eta="-")

    def eta(self) -> str:
        """Mean duration of the points run so far times the points left (resumed points take
        no time and do not count). Not rich's TimeRemainingColumn: it estimates from the last
        30 s of progress (a point takes minutes), needs two finished points and would count
        resumed points as instant progress (docs/DEPENDENCIES.md)."""
        if not self.run_s or not self.total:
            return "-"
        left_s = sum(self.run_s) / len(self.run_s) * max(0, self.total - self.completed)
        return time.strftime("%H:%M:%S", time.gmtime(left_s))

    def stop(self) -> None:
        self._watch_stop()
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def set_remaining(self, remaining: int) -> None:
        """For searches whose length is not known in advance: done so far + an estimate."""
        self.total = self.completed + remaining
        if self._bar is not None:
            self._bar.update(self._task, total=self.total or None, eta=self.eta())

    def point_started(self, point: Point, steps_file: str | None = None,
                      repeat: int = 0) -> None:
        """A point's process started; ``steps_file``: where it writes its steps
        (``measure.progress.FileProgress``), shown beside the point while it runs."""
        self._t_point = time.monotonic()
        self._watch_stop()
        name = describe(point.axes) + (f" ({repeat_label(repeat)})" if repeat else "")
        if self._bar is not None:
            self._bar.update(self._task, note=escape(name))
        if self.enabled and not self.run_s and not self._said_start:
            # before the first point ends (minutes on a busy machine), a line that says what
            # runs and how many there are; later points have a line when each ends
            self._said_start = True
            self.console.print(f"[{self.completed + 1}/{self.total}] {escape(name)}: started "
                               "(a line as each point ends)", soft_wrap=True)
        if self.enabled and steps_file:
            self._watch = PointWatch(self, name, steps_file).start()

    def show_point(self, name: str, text: str, quiet_s: float) -> None:
        """The running point's steps beside it on the bar; where the console is no terminal
        (no live bar), a line every ``LINE_EVERY_S``."""
        if self._bar is not None and self.console.is_terminal:
            self._bar.update(self._task, note=escape(f"{name}: {text}"))
        elif quiet_s >= LINE_EVERY_S:
            self.console.print(f"  ... {escape(name)}: {escape(text)}", soft_wrap=True)
        else:
            return
        self._shown = time.monotonic()

    def _watch_stop(self) -> None:
        if self._watch is not None:
            self._watch.stop()
            self._watch = None

    def _advance(self) -> None:
        self.completed += 1
        self.total = max(self.total, self.completed)
        if self._bar is not None:
            self._bar.update(self._task, completed=self.completed, total=self.total,
                             eta=self.eta())

    def point_done(self, point: Point, rec: RunResult, resumed: bool = False,
                   repeat: int = 0) -> None:
        status = rec.status
        if status == "ok":
            peak = rec.metrics.peak_mem_bytes
            tensors = cpu_tensor_peak(rec)
            if peak.device_allocated is not None:
                mem = f"{bytes_(peak.device_allocated)} device"
            elif tensors is not None:  # what the batch table compares on the CPU
                host = peak.host_net if peak.host_net is not None else peak.host
                mem = f"{bytes_(tensors)} tensors ({bytes_(host)} host" + (
                    " net)" if peak.host_net is not None else ")")
            elif peak.host_net is not None:
                mem = f"{bytes_(peak.host_net)} host net of the baseline"
            else:
                mem = f"{bytes_(peak.host)} host"
            detail = f"{rate(rec.metrics.samples_per_s)} samples/s, peak {mem}"
        else:
            detail = str(rec.error or "")[:160]
        self._watch_stop()
        if not resumed:
            self.run_s.append(time.monotonic() - self._t_point)
        self._advance()
        when = "done before, not rerun" if resumed else duration(self.run_s[-1])
        if not resumed and self.completed < self.total:  # the time left, from these points
            when += f"; about {self.eta()} left of {escape(self.label)}"
        self._line(point, status, f"{detail} ({when})", repeat)

    def point_skipped(self, point: Point, reason: str) -> None:
        self._advance()
        self._line(point, "skipped", reason)

    def note(self, text: str) -> None:
        if self.enabled:
            self.console.print(escape(text), soft_wrap=True)

    def _line(self, point: Point, status: str, detail: str, repeat: int = 0) -> None:
        if not self.enabled:
            return
        style = STYLE.get(status, "red")
        rep = f" ({repeat_label(repeat)})" if repeat else ""
        self.console.print(f"[{self.completed}/{self.total}] {escape(describe(point.axes))}{rep}: "
                           f"[{style}]{status}[/{style}]  {escape(detail)}", soft_wrap=True)
