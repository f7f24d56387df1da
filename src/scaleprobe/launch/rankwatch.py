"""Watching a launched job's ranks (``RankWatch``): which rank failed or died first, how it
ended, which one had stopped making progress (a hung rank, while the one that raised only
waited for it), and killing every rank left, with its loader workers, at once; after a stop
signal, the grace the ranks get to stop together. It names the job's failure as a
``WorkerFailure`` (which rank and why: ``launch/culprit.py``; the type ``launch/failures.py``'s,
the error lines ``launch/lines.py``'s) and, on exit, kills what the job left running
(``launch/strays.py``). ``launch.run_workers`` runs the job under a watch."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
import time
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import psutil

from scaleprobe.features.interrupt import Interrupted
from scaleprobe.launch.culprit import NamesTheFailure
from scaleprobe.launch.failures import (
    WorkerFailure,
    how_child_ended,
)
from scaleprobe.launch.lines import signal_name_of
from scaleprobe.launch.strays import is_alive, kill_strays
from scaleprobe.measure.heartbeat import (
    Beat,
    find_stalled,
    read_beats,
    stall_text,
)

# after a rank failed or died: how long the launcher gets to see it before the ranks left are
# killed
KILL_AFTER_S = 1.0
# after Ctrl+C / SIGTERM (to the launcher, or to one rank alone): the least time the ranks get
# to stop together and hand over their records before they are killed (then the steps each
# logged are kept: measure/steplog.py). Six DDP ranks on the 2-core machine, training, all
# ended 2.2 s after Ctrl+C; ranks still starting (some wait in the rendezvous, which no signal
# interrupts) are the ones killed at the grace: 6 s ended every rank within 2.9-7.3 s of
# Ctrl+C at any moment of `run --strategy ddp --nproc 6 --force`
# (tests/faults/test_oversubscribed.py), well inside a scheduler's grace (typically 30 s)
INTERRUPT_GRACE_S = 6.0
# the ranks stop at a step they agree on: they finish the step under way and up to
# ``sync_period`` + 1 more (train/engine.py ``_stop_step``). Slow steps (gpt_tiny's took 2.8 to
# 11.8 s on the loaded 2-core machine) get that many of the slowest step seen, plus one for
# the hand-over; the grace is never shorter than ``INTERRUPT_GRACE_S``
STOP_STEPS = 4
# what the launcher's own teardown (torch.distributed.elastic) waits at most once the watch
# decides: a backstop, should the watch not end the ranks
STOP_CEILING_S = 3600
# before the first step, a rank whose processes used this much CPU since it last did is busy
# (importing, preparing data), not stalled. An idle rank's own threads (the heartbeat's beat
# every 0.5 s) use well under a millisecond a second
CPU_MOVED_S = 0.05


class RankWatch(NamesTheFailure):
    """Follows a launched job's ranks through their heartbeats (``measure/heartbeat.py``):
    their pids and every process each one started (loader workers). When a rank fails (it
    raised: its heartbeat says so before its process has exited, which can take seconds) or
    dies without having finished, it notes the first such rank and which rank, if any, had
    stopped making progress before, and after ``KILL_AFTER_S`` kills every rank left with its
    process group: a rank waiting in a collective for a dead or stopped peer would otherwise
    wait for the collective timeout, and a stopped one (SIGSTOP) ignores the launcher's
    SIGTERM.
    On exit it kills whatever is left, including the loader workers of a killed rank, which
    outlive it by seconds otherwise (reparented, until their own watchdog notices), and any
    process started since the watch began that still runs (``kill_strays``).

    A rank's death wakes the watch at once (a pidfd per rank, where the platform has them),
    so it reads how the rank ended before the launcher collects the process; else it looks
    every ``POLL_S``. With ``stall_after_s`` (``wrap``: ``--timeout``), a rank that has made
    no progress (no step ended, no batch taken, no forward pass) for that long, once it made
    some, stalls the job: every rank is killed and the stall named (``stall_line``)."""

    POLL_S = 0.2

    def __init__(self, run_dir: str | None, stall_after_s: float | None = None,
                 spare: set[int | None] | None = None, stop_steps: int = STOP_STEPS,
                 ranks: Iterable[int] | None = None) -> None:
        self.run_dir = run_dir
        # the ranks this host starts, where known (one host): a rank among them that never
        # wrote a heartbeat never reached scaleprobe's code (``_never_started``)
        self.expected = set(ranks) if ranks is not None else None
        self.stop_steps = stop_steps  # steps the ranks may take to stop (``stop_grace_s``)
        self.slowest_step_s = 0.0  # the slowest step any rank was seen to take
        self._steps: dict[int, tuple[int, float]] = {}  # rank -> (steps done, when) last seen
        self.stop_asked: tuple[float, str] | None = None  # (when, the signal's name)
        self.stop_overdue: tuple[float, str] | None = None  # (grace given, the signal's name)
        self.hung_at_stop: tuple[int, Beat] | None = None  # (rank, beat) not moving
        self.spare = spare or set()  # processes of the launcher's own (the job's guard)
        self.stall_after_s = stall_after_s
        self.stall: tuple[int, Beat, float] | None = None  # (rank, beat, seen at)
        self.stall_behind = False  # the stalled rank was named as behind the others' places
        self._fds: dict[int, int] = {}  # rank -> pidfd of its process
        self.procs: dict[int, Any] = {}  # rank -> its process (None: gone before first seen)
        self.family: dict[int, dict[int, Any]] = {}
        self.first: tuple[int, float, bool] | None = None  # (rank, when, raised: not killed)
        self.stalled: tuple[int, Beat] | None = None
        self.exits: dict[int, str] = {}  # rank -> how its process ended, where it could be read
        self.killed: set[int] = set()  # ranks this watch killed (after another's failure)
        self._cpu: dict[int, tuple[float | None, float]] = {}  # rank -> (CPU s seen, when moved)
        self.started_at = time.time()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> RankWatch:
        self.started_at = time.time()
        if self.run_dir:
            self._thread = threading.Thread(target=self._loop, name="scaleprobe-rank-watch",
                                            daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.kill_all()
        kill_strays(self.started_at, self.spare)
        for fd in list(self._fds.values()):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()

    def _loop(self) -> None:
        while not self._wait():
            try:
                self.poll()
            except Exception:  # noqa: BLE001  (the watch must never take the job down)
                continue

    def _wait(self) -> bool:
        """Until a rank's process ends or ``POLL_S`` passes; True when the watch is stopped."""
        fds = list(self._fds.values())
        if fds:
            try:
                select.select(fds, [], [], self.POLL_S)
                return self._stop.is_set()
            except (OSError, ValueError):  # a pidfd closed under the wait: poll as usual
                pass
        return self._stop.wait(self.POLL_S)

    def _follow(self, rank: int, pid: int) -> None:
        """A pidfd for ``rank``'s process: readable once it ends (Linux 5.3 and later)."""
        with contextlib.suppress(OSError, AttributeError):
            self._fds[rank] = os.pidfd_open(pid)

    def _unfollow(self, rank: int) -> None:
        fd = self._fds.pop(rank, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def poll(self) -> None:
        with self._lock:
            self._poll()

    def _poll(self) -> None:
        beats = read_beats(self.run_dir or "")
        ended: list[tuple[float, int, bool]] = []  # (when, rank, raised) of ranks that failed
        for rank, beat in beats.items():
            if rank not in self.procs:
                try:
                    self.procs[rank] = psutil.Process(beat.pid)
                except psutil.NoSuchProcess:  # died (and was reaped) before a poll saw it
                    self.procs[rank] = None
                except (psutil.Error, ValueError, KeyError, TypeError):
                    continue
                proc = self.procs[rank]
                self.family[rank] = {proc.pid: proc} if proc is not None else {}
                if proc is not None:
                    self._follow(rank, proc.pid)
            proc = self.procs[rank]
            alive = proc is not None and is_alive(proc)
            if not alive:
                self._unfollow(rank)
            if alive:
                with contextlib.suppress(psutil.Error):
                    for child in proc.children(recursive=True):
                        self.family[rank].setdefault(child.pid, child)
            if beat.state == "failed":  # raised: seen before its (slow) exit
                ended.append((beat.beat_wall, rank, True))
            elif not alive:
                final = read_beats(self.run_dir or "").get(rank, beat)  # "done" just before exit?
                if final.state == "failed":
                    ended.append((final.beat_wall, rank, True))
                elif final.state != "done":  # killed: alive at its last beat and move
                    ended.append((max(final.beat_wall, final.progress_wall), rank, False))
                    if proc is not None and rank not in self.exits:
                        how = how_child_ended(proc.pid)
                        if how is not None:
                            self.exits[rank] = how
        if self.first is None and ended:
            # the earliest; a rank that raised because a peer died (connection reset) raised
            # after the peer's last sign of life
            when, rank, raised = min(ended)
            self.first = (rank, when, raised)
            stalled = find_stalled(beats, time.time())
            if stalled is not None:
                self.stalled = (stalled, beats[stalled])
        self._follow_steps(beats)
        if self.first is None and self.stall_after_s is not None and self.stop_asked is None:
            self._check_stall(beats)
        if self.first is not None and time.time() - self.first[1] >= KILL_AFTER_S:
            self._kill_all()
            if self._never_started():
                # a rank with no heartbeat (stuck as it started) is known by no pid: the
                # launcher's own teardown would give it 30 s to answer a SIGTERM
                kill_strays(self.started_at, self.spare)
        self._check_stop(beats)

    def _follow_steps(self, beats: dict[int, Beat]) -> None:
        """The slowest step seen (``slowest_step_s``), from the steps each rank ended between
        two looks (their mean, where several ended)."""
        for rank, b in beats.items():
            if b.state != "training" or not b.step_wall:
                continue
            seen = self._steps.get(rank)
            if seen is not None and b.step > seen[0]:
                each = (b.step_wall - seen[1]) / (b.step - seen[0])
                self.slowest_step_s = max(self.slowest_step_s, each)
            if seen is None or b.step != seen[0]:
                self._steps[rank] = (b.step, b.step_wall)
            if b.stop and self.stop_asked is None:  # a rank was sent a stop signal
                self.asked_to_stop(signal_name_of(b.stop) + self._to_rank(beats, rank))

    @staticmethod
    def _to_rank(beats: dict[int, Beat], rank: int) -> str:
        return "" if all(b.stop for b in beats.values()) else f" to rank {rank}"

    def asked_to_stop(self, signame: str) -> None:
        """The job was asked to stop (the launcher's signal, or one rank's seen in its
        heartbeat): the ranks get ``stop_grace_s`` to stop together, then they are killed."""
        if self.stop_asked is None:
            self.stop_asked = (time.time(), signame)

    def stop_grace_s(self) -> float:
        """How long the ranks may take to stop: ``stop_steps`` of the slowest step seen, at
        least ``INTERRUPT_GRACE_S``. Only ended steps count, so a rank that hangs is ended
        within a bounded time."""
        return max(INTERRUPT_GRACE_S, self.stop_steps * self.slowest_step_s)

    def _check_stop(self, beats: dict[int, Beat]) -> None:
        if self.stop_asked is None or self.stop_overdue is not None:
            return
        at, signame = self.stop_asked
        grace = self.stop_grace_s()
        if time.time() - at < grace:
            return
        if beats and all(b.state in ("done", "failed") for b in beats.values()):
            return  # every rank has stopped: nothing is overdue
        self.stop_overdue = (grace, signame)
        still = [r for r, b in beats.items() if b.state in ("setup", "training")
                 and time.time() - b.progress_wall >= INTERRUPT_GRACE_S]
        if still:  # a rank that made no progress at all since: it hung, named
            rank = min(still, key=lambda r: (beats[r].progress_wall, r))
            self.hung_at_stop = (rank, beats[rank])
        self._kill_all()
        kill_strays(self.started_at, self.spare)

    def overdue_line(self) -> str | None:
        """Why the ranks were killed after a stop signal, or None: ``rank 1 did not stop within
        the 35.4 s given after SIGTERM (4 steps of the slowest, 8.8 s): stopped making progress
        at step 7, 20.1 s before the job was stopped``."""
        if self.stop_overdue is None or self.hung_at_stop is None:
            return None
        grace, signame = self.stop_overdue
        _, beat = self.hung_at_stop
        at = self.stop_asked[0] + grace if self.stop_asked else time.time()
        return (f"did not stop within the {grace:.1f} s given after {signame} "
                f"({self.stop_steps} steps of the slowest, {self.slowest_step_s:.1f} s, at "
                f"least {INTERRUPT_GRACE_S:g} s): {stall_text(beat, at)}")

    def _check_stall(self, beats: dict[int, Beat]) -> None:
        """A live rank that made progress once and none for ``stall_after_s``: the job has
        stalled. The rank named is the one the others waited for where the heartbeats tell
        (``find_stalled``), else the one still for longest; the ranks are killed at once.
        Before any rank's first progress: ``_check_start``."""
        now = time.time()
        if not any(b.moved for b in beats.values()):
            self._check_start(beats, now)
            return
        still = {r: b for r, b in beats.items()
                 if b.state in ("setup", "training") and b.moved
                 and now - b.progress_wall > (self.stall_after_s or 0)
                 and self.procs.get(r) is not None}
        if not still:
            return
        named = find_stalled(beats, now)
        rank = named if named in still else min(still, key=lambda r: (still[r].progress_wall, r))
        self.stall = (rank, still[rank], now)
        self.first = (rank, still[rank].progress_wall, False)

    def _check_start(self, beats: dict[int, Beat], now: float) -> None:
        """No rank has taken a batch, run a forward pass or compiled yet: the job has stalled
        when no rank has moved nor used the CPU (its process and every process it started)
        for ``stall_after_s``: a script waiting for what never comes (a process group of its
        own, a lock, a child). One still importing, downloading or preparing data uses the
        CPU; one waiting in a collective for such a peer is left alone with it."""
        live = {r: b for r, b in beats.items() if self.procs.get(r) is not None
                and is_alive(self.procs[r])}
        if not live or any(b.state not in ("setup", "training") for b in live.values()):
            return
        idle: dict[int, float] = {}
        for r, b in live.items():
            since = max(b.progress_wall, self._cpu_moved(r, now))
            if now - since <= (self.stall_after_s or 0):
                return
            idle[r] = since
        # the rank behind the others' places (its setup's, or its first step's) where one is
        # alone there; else the one idle longest (a rank that got further and waits for it
        # can have gone idle first)
        named = find_stalled(beats, now)
        rank = named if named in idle else min(idle, key=lambda r: (idle[r], r))
        self.stall_behind = rank == named
        self.stall = (rank, replace(live[rank], progress_wall=idle[rank]), now)
        self.first = (rank, idle[rank], False)

    def _cpu_moved(self, rank: int, now: float) -> float:
        """When ``rank``'s process and the processes it started last used the CPU (at least
        ``CPU_MOVED_S`` since the time before); the watch's start before it is first seen."""
        total = 0.0
        for proc in list(self.family.get(rank, {}).values()):
            with contextlib.suppress(psutil.Error):
                t = proc.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
        seen, at = self._cpu.get(rank, (None, self.started_at))
        if seen is not None and total - seen >= CPU_MOVED_S:
            self._cpu[rank] = (total, now)  # it worked
        elif seen is None or total < seen:
            self._cpu[rank] = (total, at)  # the first look, or a child gone with its time
        return self._cpu[rank][1]

    def kill_all(self) -> None:
        """SIGKILL every rank still running, its process group and every process it started."""
        with self._lock:
            self._kill_all()

    def _kill_all(self) -> None:
        for rank, members in self.family.items():
            leader = getattr(self.procs.get(rank), "pid", None)
            if self.procs.get(rank) is not None and is_alive(self.procs[rank]):
                self.killed.add(rank)
            for proc in members.values():
                if not is_alive(proc):
                    continue
                with contextlib.suppress(OSError):
                    if os.getpgid(proc.pid) == leader:  # the rank's group (env.own_process_group sets it)
                        os.killpg(leader, signal.SIGKILL)
                with contextlib.suppress(psutil.Error):
                    proc.kill()

    def overdue_ending(self) -> BaseException | None:
        """How a job ended whose ranks the watch killed because they had not stopped within
        ``stop_grace_s`` of a stop signal: the rank that hung, named (``overdue_line``), or,
        when every rank still moved (slow steps, not a hang), the interruption itself; None
        when the watch killed nothing for that reason."""
        if self.stop_overdue is None:
            return None
        line = self.overdue_line()
        if line is not None and self.hung_at_stop is not None:
            return WorkerFailure(self.hung_at_stop[0], line)
        return Interrupted(self.stop_overdue[1])
