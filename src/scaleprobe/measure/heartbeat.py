"""Per-rank heartbeats of a launched job: where each rank is, and whether its process still
runs, so the launcher can tell the rank that stopped making progress from the ranks that
waited for it.

``RUN_DIR/heartbeat/rank-N.hb`` is a 72-byte file each rank maps into memory: nine
little-endian float64 fields, written in place with no system call, so the training loop
updates it at every phase mark (a few hundred nanoseconds) and a reader always sees the
latest position:

    rank, pid, state      state: 0 setup, 1 training, 2 after training, 3 done, 4 failed,
                          5 serving (a parameter server: it has no steps of its own)
    step, step_wall       steps done, and time.time() when the last one ended
    mark, progress_wall   index in ``MARKS`` of the last phase mark passed in the step under
                          way, and time.time() then; before training, ``SETUP_BASE`` + the
                          index in ``SETUP_MARKS`` of the last place its setup passed
    beat_wall             time.time() of the last beat: a daemon thread beats every
                          ``INTERVAL_S``; a stopped process (SIGSTOP, or wedged with the
                          interpreter lock held) stops beating
    stop                  the number of the signal (SIGTERM, SIGINT) this rank was sent,
                          0 none: its peers on the host read it at every step's end
                          (``peer_stop``) and stop at the step the ranks agree on, so a
                          signal to one rank stops the job as one sent to the launcher does

While the rank compiles (``busy``: torch.compile's warm-up, minutes for a large model) each
beat also moves ``progress_wall``: compiling is progress, not a stall.

A rank waiting in a collective keeps beating, its position still; a stopped rank neither
moves nor beats. ``find_stalled`` reads that. In its setup a rank passes ``SETUP_MARKS``
(joining the process group, joined, built its data, built its model, wrapped it), so a
rank whose main thread waits for what never comes (a lock, a model builder that hangs) while
its heartbeat beats is told from the ranks that got further and wait for it in their first
collective. A wrapped script's rank passes those it can be seen to pass (joining and
joined, through ``init_process_group``; its model built and wrapped, through DDP's
constructor).

A heartbeat never fails a run: when its file cannot be created (a full disk) the rank runs
without one.
"""

from __future__ import annotations

import json
import mmap
import os
import signal
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from scaleprobe.measure.steplog import StepLog

INTERVAL_S = 0.5
# A rank whose last beat is older than this while another rank beat more recently was stopped
# (its thread did not run for six intervals)
FROZEN_AFTER_S = 3.0
MARKS = ("start", "data", "h2d", "forward", "backward", "comm", "optimizer")
_INDEX = {m: i for i, m in enumerate(MARKS)}
STATES = ("setup", "training", "after", "done", "failed", "serving")
LIVE = ("setup", "training", "serving")  # a rank in these states should keep beating
# the places a rank's setup passes, in order (``Heartbeat.setup_passed``), and what it does
# after each until the next: its ``mark`` is SETUP_BASE + the index until its first step
SETUP_MARKS = ("start", "joining", "joined", "data", "model", "wrapped")
SETUP_DOING = {"start": "before joining the process group",
               "joining": "joining the process group",
               "joined": "after joining the process group (building its data and model)",
               "data": "building its model",
               "model": "wrapping its model for the strategy (DDP's first broadcast, FSDP's "
                        "sharding)",
               "wrapped": "after wrapping its model (its optimizer, its first batch)"}
SETUP_BASE = 100
_FMT = "<9d"
SIZE = struct.calcsize(_FMT)
_OLD_SIZE = struct.calcsize("<8d")  # a file of the eight fields before ``stop``
_STOP_AT = 64  # the ``stop`` field's offset
DIR = "heartbeat"


def beat_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / DIR


class Heartbeat:
    def __init__(self, run_dir: str | Path, rank: int, interval_s: float = INTERVAL_S) -> None:
        self.path = beat_dir(run_dir) / f"rank-{rank}.hb"
        self.rank = rank
        self.interval_s = interval_s
        self._buf: mmap.mmap | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._steps: Any = None  # measure/steplog.StepLog: written at every beat
        # True while the rank does work that is progress without a step (torch.compile)
        self.busy: Callable[[], bool] | None = None
        self._peers: dict[int, mmap.mmap] = {}  # rank -> its mapped file (``peer_stop``)

    # --- the training loop's side: stores into the mapped file, no system call -------------
    def step_done(self, steps: int) -> None:
        if self._buf is not None:
            t = time.time()
            _put(self._buf, 24, "<dddd", steps, t, 0.0, t)

    def passed(self, mark: str) -> None:
        if self._buf is not None:
            _put(self._buf, 40, "<dd", _INDEX.get(mark, 0), time.time())

    def setup_passed(self, mark: str) -> None:
        """This rank's setup got to ``mark`` (of ``SETUP_MARKS``): a place, and progress."""
        if self._buf is not None and mark in SETUP_MARKS:
            _put(self._buf, 40, "<dd", SETUP_BASE + SETUP_MARKS.index(mark), time.time())

    def asked_to_stop(self, signum: int) -> None:
        """This rank was sent ``signum``: its peers stop with it (``peer_stop``)."""
        if self._buf is not None:
            _put(self._buf, _STOP_AT, "<d", signum)

    def watch_peers(self) -> None:
        """Map the files of this rank's peers on this host, to read their ``stop`` at every
        step's end (``peer_stop``). Called once every rank has started (its process group
        built): each rank's file exists from its start. Ranks on other hosts are not seen."""
        if self._buf is None:
            return
        for f in self.path.parent.glob("rank-*.hb"):
            if f == self.path:
                continue
            try:
                rank = int(f.stem.split("-")[1])
                with f.open("rb") as fh:
                    self._peers[rank] = mmap.mmap(fh.fileno(), SIZE, access=mmap.ACCESS_READ)
            except (OSError, ValueError):  # half written, or not a rank's file
                continue

    def peer_stop(self) -> tuple[int, int] | None:
        """(rank, signal) of a peer on this host that was sent a stop signal, or None: a
        read of each peer's mapped file, no system call."""
        for rank, buf in self._peers.items():
            sig = struct.unpack_from("<d", buf, _STOP_AT)[0]
            if sig:
                return rank, int(sig)
        return None

    def set_state(self, state: str) -> None:
        if self._buf is not None:
            _put(self._buf, 16, "<d", STATES.index(state))
            self._beat()

    def keep_steps(self, source: Any) -> None:
        """Write ``source``'s timed steps (``measure/steplog.StepSource``) to the run folder at
        every beat and at the end, so a rank that dies leaves what it measured."""
        if self._buf is not None:
            self._steps = StepLog(self.path.parent.parent, self.rank, source)

    # --- the beat -----------------------------------------------------------------------------
    def start(self) -> Heartbeat:
        now = time.time()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_bytes(struct.pack(_FMT, self.rank, os.getpid(), 0, 0, 0.0, 0, now,
                                              now, 0))
            with self.path.open("r+b") as fh:
                self._buf = mmap.mmap(fh.fileno(), SIZE)
        except (OSError, ValueError):
            self._buf = None
            return self
        self._thread = threading.Thread(target=self._loop, name="scaleprobe-heartbeat",
                                        daemon=True)
        self._thread.start()
        return self

    def finish(self, state: str) -> None:
        """The last beat, with the final state; the thread stops."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        if self._steps is not None:
            self._steps.flush()
        self.set_state(state)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._beat()
            if self._steps is not None:
                self._steps.flush()

    def _beat(self) -> None:
        if self._buf is not None:
            now = time.time()
            if self.busy is not None and _true(self.busy):
                _put(self._buf, 48, "<d", now)  # progress, at the same step
            _put(self._buf, 56, "<d", now)


def _put(buf: mmap.mmap, offset: int, fmt: str, *vals: float) -> None:
    """Store ``vals`` at ``offset`` in one copy of the packed bytes. ``struct.pack_into``
    zeroes the span before it writes each field, so a reader in another process (the
    launcher's watch) could see a step with no time (``progress_wall`` 0: "no progress for
    1796014666.2 s"): one read in 15 while a rank ended steps in a loop."""
    raw = struct.pack(fmt, *vals)
    buf[offset:offset + len(raw)] = raw


def _true(busy: Callable[[], bool]) -> bool:
    try:
        return bool(busy())
    except Exception:  # noqa: BLE001  (a heartbeat never fails a run)
        return False


class Beating:
    """A step timer that also moves the heartbeat's position at each mark."""

    def __init__(self, timer: Any, beat: Heartbeat) -> None:
        self.timer, self.beat = timer, beat

    def start(self) -> None:
        self.timer.start()

    def mark(self, phase: str) -> None:
        self.timer.mark(phase)
        self.beat.passed(phase)


@dataclass(frozen=True)
class RankError:
    """A failed rank's error as it crosses to the launcher (``rank-N.error``, JSON): its one
    line in scaleprobe's words, and, where it is the user's mistake (a ``ConfigError`` or
    ``DataError`` raised in the rank), that class's name and its own message, so the driver
    raises it again as one line, exit 2, without reading words back out of the line."""

    line: str
    user_error: str | None = None  # "ConfigError" | "DataError"
    message: str | None = None  # the user error's own message


def write_error(run_dir: str | Path, rank: int, err: RankError) -> None:
    """A failed rank's error, for the launcher (best effort)."""
    try:
        (beat_dir(run_dir) / f"rank-{rank}.error").write_text(json.dumps(asdict(err)))
    except OSError:
        pass


def read_error(run_dir: str | Path, rank: int) -> RankError | None:
    try:
        doc = json.loads((beat_dir(run_dir) / f"rank-{rank}.error").read_text())
        err = RankError(**doc)
    except (OSError, ValueError, TypeError):  # none, torn, or not a record
        return None
    return err if err.line.strip() else None


@dataclass(frozen=True)
class Beat:
    """One rank's heartbeat as read from its file (the fields the module's docstring lists,
    in the file's order):
    ``state`` by name ("?" for a number this version does not know), ``step_wall`` None
    before the first step ended, ``stop`` 0 when no stop signal was sent."""

    rank: int
    pid: int
    state: str
    step: int
    step_wall: float | None
    mark: int
    progress_wall: float
    beat_wall: float
    stop: int = 0

    @classmethod
    def unpack(cls, vals: tuple[float, ...]) -> Beat:
        """The beat from the file's nine float64 fields, in order."""
        rank, pid, state, step, step_wall, mark, progress_wall, beat_wall, stop = vals
        return cls(rank=int(rank), pid=int(pid),
                   state=STATES[int(state)] if 0 <= state < len(STATES) else "?",
                   step=int(step), step_wall=step_wall or None, mark=int(mark),
                   progress_wall=progress_wall, beat_wall=beat_wall, stop=int(stop))

    @property
    def moved(self) -> bool:
        """Has the rank made progress at all (a step ended, or a step's phase mark passed)?
        Its setup's places are not: a long setup is judged by its CPU, as before any mark."""
        return bool(self.step or 0 < self.mark < SETUP_BASE)

    @property
    def place(self) -> tuple[int, int]:
        """Where the rank is, in order: (steps done, then the step's phase mark), a place
        in its setup before any phase of the first step (a wrapped script's ranks are in
        state "training" from its first line, and pass their setup's places there)."""
        if self.step or 0 < self.mark < SETUP_BASE:
            return self.step, self.mark
        at = self.mark - SETUP_BASE if self.mark >= SETUP_BASE else 0
        return 0, at - len(SETUP_MARKS)

    @property
    def setup_at(self) -> int | None:
        """Where a rank in state "setup" is in it (an index in ``SETUP_MARKS``; a rank that
        failed there too; past it, training or serving, their count), or None where that is
        not known (a finished or stopped rank). A wrapped script's ranks are in state
        "training" from its first line: ``place`` orders them."""
        in_setup = self.state == "setup" or (self.state == "failed" and not self.moved)
        if in_setup:
            return self.mark - SETUP_BASE if self.mark >= SETUP_BASE else 0
        if self.state in ("training", "serving") or self.moved:
            return len(SETUP_MARKS)
        return None


def read_beat(path: str | Path) -> Beat | None:
    try:
        with open(path, "rb") as fh:
            raw = fh.read(SIZE)
        vals = struct.unpack(_FMT, raw if len(raw) == SIZE else raw + bytes(SIZE - _OLD_SIZE))
    except (OSError, struct.error):
        return None
    return Beat.unpack(vals)


def read_beats(run_dir: str | Path) -> dict[int, Beat]:
    """Every rank's heartbeat now (unreadable files are skipped)."""
    out: dict[int, Beat] = {}
    try:
        files = list(beat_dir(run_dir).glob("rank-*.hb"))
    except OSError:
        return out
    for f in files:
        beat = read_beat(f)
        if beat is not None:
            out[beat.rank] = beat
    return out


def stop_named(beats: dict[int, Beat]) -> str | None:
    """The stop signal the heartbeats say a rank was sent, as ``interrupt.describe`` takes
    it: "SIGTERM" when every rank was sent it (the launcher's), "SIGTERM to rank 1" when one
    was; None when none was."""
    asked = sorted((r, b.stop) for r, b in beats.items() if b.stop)
    if not asked:
        return None
    rank, sig = asked[0]
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    return name if len(asked) == len(beats) else f"{name} to rank {rank}"


def find_stalled(beats: dict[int, Beat], now: float) -> int | None:
    """The rank that stopped making progress while the others waited, or None when the
    heartbeats cannot tell (one rank, or every rank at the same place and beating).

    First a rank whose process stopped beating while another beat recently, whether it was
    training, serving or still in its setup (a rank stopped before it joined the process
    group keeps the others waiting in the rendezvous); then a rank still in its setup alone
    furthest behind there (``SETUP_MARKS``) while another got further: it beats, but its main
    thread waits (the others wait for it in their first collective); else the one rank
    furthest behind (steps done, then phase), when it is alone there."""
    if len(beats) < 2:
        return None
    live = {r: b for r, b in beats.items() if b.state in LIVE}
    frozen = [r for r, b in live.items() if now - b.beat_wall > FROZEN_AFTER_S]
    fresh = [r for r, b in beats.items() if r not in frozen
             and now - b.beat_wall <= FROZEN_AFTER_S]
    if frozen and fresh:
        return min(frozen, key=lambda r: (live[r].beat_wall, r))
    behind_in_setup = _behind_in_setup(beats)
    if behind_in_setup is not None:
        return behind_in_setup
    training = {r: b for r, b in beats.items() if b.state == "training"}
    placed = {r: b.place for r, b in beats.items() if b.state in ("training", "failed")}
    if len(placed) < 2 or not training:
        return None
    low = min(placed.values())
    behind = [r for r, p in placed.items() if p == low]
    if len(behind) == 1 and behind[0] in training:
        return behind[0]
    return None


def _behind_in_setup(beats: dict[int, Beat]) -> int | None:
    """The one rank in its setup behind every other rank's place there (or past it), or
    None where no rank is alone behind, or none of them got further."""
    places = {r: b.setup_at for r, b in beats.items()}
    known = {r: p for r, p in places.items() if p is not None}
    if len(known) < 2:
        return None
    low = min(known.values())
    behind = [r for r, p in known.items() if p == low]
    if len(behind) == 1 and beats[behind[0]].state == "setup" and max(known.values()) > low:
        return behind[0]
    return None


def setup_doing(beat: Beat) -> str:
    """What a rank that has not begun its first step's phases was doing, by its setup's
    place: ``before joining the process group``, ``building its model``, ..."""
    at = beat.mark - SETUP_BASE if beat.mark >= SETUP_BASE else 0
    return SETUP_DOING[SETUP_MARKS[min(max(at, 0), len(SETUP_MARKS) - 1)]]


def stall_text(beat: Beat, stopped_at: float) -> str:
    """``stopped making progress at step 7, 12.3 s before the job was stopped``; for a rank
    that had not begun training, where it was: ``stopped making progress in its setup, before
    its first step (...), 10.0 s before the job was stopped``."""
    since = max(0.0, stopped_at - beat.progress_wall)
    if beat.state in ("setup", "training") and not beat.moved and beat.mark >= SETUP_BASE:
        where = f"in its setup, {setup_doing(beat)}, before its first step"
    elif beat.state == "setup" and not beat.moved:
        where = ("in its setup, before its first step (joining the process group, building "
                 "its data and model)")
    elif beat.state == "serving":
        where = "while serving the workers (a parameter server)"
    else:
        where = f"at step {beat.step}"
    return f"stopped making progress {where}, {since:.1f} s before the job was stopped"
