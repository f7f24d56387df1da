"""Each launched rank's timed steps, written to the run folder as they end, so that a rank
that dies or hangs (SIGKILL, SIGSTOP, a killed loader worker, a stalled script) leaves what it
measured until it stopped. A rank that ends normally hands its whole record back; the driver
reads these logs only when no record came back for a rank (``read_step_logs``), and the run
is then marked partial.

``RUN_DIR/steps/rank-N.jsonl``, one JSON object a line, appended by the rank's heartbeat
thread (``measure/heartbeat.py``) every beat, from what the training thread has already
stored (no clock read, no lock, no synchronisation in the training thread):

    {"head": {...}}      what the rank is: rank, host, device, threads, samples_per_step,
                         warmup_steps, phases_unseen, mem, info; written again when it
                         changes (the last one holds)
    {"t": [...], "p": {phase: [...]}, "w": [...]}
                         the timed steps ended since the previous line: step times, their
                         phases (seconds) and the wall clock at each step's end

A line torn by a rank killed mid-write is skipped when read. Writing never fails a run: a
log that cannot be written is given up and the rank runs without one.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from scaleprobe.core.rank_record import RankInfo, RankMem, RankRecord
from scaleprobe.core.record import Record

DIR = "steps"


@dataclass
class StepHead(Record):
    """What a rank is, at the top of its log: the facts its ``RankRecord`` is rebuilt from."""

    rank: int | None = None
    host: str | None = None
    device: str | None = None
    threads: int | None = None
    warmup_steps: int = 0
    samples_per_step: int = 0
    towers: int = 1
    phases_unseen: dict[str, str] = field(default_factory=dict)
    mem: RankMem = field(default_factory=RankMem)
    info: RankInfo = field(default_factory=RankInfo)
    extra: dict[str, Any] = field(default_factory=dict)

    def record(self, times: list[float], phases: dict[str, list[float]],
               walls: list[float | None]) -> RankRecord:
        """The rank's record of the logged steps."""
        end = walls[-1] if walls and walls[-1] is not None else None
        return RankRecord(
            rank=self.rank or 0, host=self.host, device=self.device, threads=self.threads,
            steps_done=self.warmup_steps + len(times), steps_timed=len(times),
            step_times_s=times, phase_times_s=phases, phases_unseen=dict(self.phases_unseen),
            window_s=sum(times),
            clock_window=[end - sum(times), end] if end is not None else None,
            samples_per_step=self.samples_per_step, towers=self.towers,
            indices=[],  # not logged: no shard audit of a partial run
            mem=self.mem, info=self.info)


class StepSource(Protocol):
    """What a rank's loop has measured, read from another thread."""

    def head(self) -> StepHead:
        """The rank's facts."""

    def count(self, start: int) -> int:
        """The timed steps that can be read now (those before ``start`` were read)."""

    def steps(self, start: int, end: int
              ) -> tuple[list[float], dict[str, list[float]], list[float | None]]:
        """Timed steps ``start``..``end``: their times, phases and end wall clocks."""


def log_path(run_dir: str | Path, rank: int) -> Path:
    return Path(run_dir) / DIR / f"rank-{rank}.jsonl"


class StepLog:
    """Appends ``source``'s new timed steps to the rank's log at each ``flush``."""

    def __init__(self, run_dir: str | Path, rank: int, source: StepSource) -> None:
        self.path = log_path(run_dir, rank)
        self.source = source
        self.written = 0  # timed steps already in the file
        self._head: StepHead | None = None
        self._broken = False

    def flush(self) -> None:
        if self._broken:
            return
        try:
            lines = self._new_lines()
        except Exception:  # noqa: BLE001  (a source changing under the read: the next beat)
            return
        if not lines:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as fh:
                fh.write("".join(lines))
        except OSError:  # a full or read-only disk: the rank runs on without its log
            self._broken = True

    def _new_lines(self) -> list[str]:
        out = []
        head = self.source.head()
        end = self.source.count(self.written)
        steps = self.source.steps(self.written, end) if end > self.written else None
        if head != self._head:
            out.append(json.dumps({"head": head.to_dict()}) + "\n")
        if steps is not None:
            times, phases, walls = steps
            out.append(json.dumps({"t": _r(times), "p": {p: _r(v) for p, v in phases.items()},
                                   "w": walls}) + "\n")
        self._head, self.written = head, max(end, self.written)
        return out


def _r(values: list[float]) -> list[float]:
    """Seconds to 0.1 microsecond (steps.csv keeps 1): a short line for each beat."""
    return [round(v, 7) for v in values]


def discard(run_dir: str | Path) -> None:
    """The logs of a run whose every rank handed its record over: nothing more in them."""
    shutil.rmtree(Path(run_dir) / DIR, ignore_errors=True)


def read_log(path: Path) -> RankRecord | None:
    """The record of the steps one rank logged, or None when it logged no step."""
    head: StepHead | None = None
    times: list[float] = []
    phases: dict[str, list[float]] = {}
    walls: list[float | None] = []
    try:
        text = path.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:  # torn by a kill mid-write
            continue
        if not isinstance(doc, dict):
            continue
        if isinstance(doc.get("head"), dict) and "rank" in doc["head"]:
            head = StepHead.from_dict(doc["head"])
        elif isinstance(doc.get("t"), list):
            n = len(times)
            times += doc["t"]
            walls += doc.get("w") or [None] * len(doc["t"])
            for p, vals in (doc.get("p") or {}).items():
                phases.setdefault(p, [0.0] * n).extend(vals)
    if not times or head is None:
        return None
    return head.record(times, phases, walls)


def read_step_logs(run_dir: str | Path) -> list[RankRecord]:
    """Every rank's logged steps, in rank order (ranks that logged none are left out)."""
    try:
        files = sorted(Path(run_dir, DIR).glob("rank-*.jsonl"))
    except OSError:
        return []
    recs = [r for r in (read_log(f) for f in files) if r is not None]
    return sorted(recs, key=lambda r: r.rank)
