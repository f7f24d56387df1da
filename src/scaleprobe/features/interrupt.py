"""Stopping a run on request without losing what it measured.

Ctrl+C (SIGINT) and SIGTERM (what a cluster scheduler sends on pre-emption, or ``kill``) both
mean "stop": outside the training loop they raise ``Interrupted`` (a ``KeyboardInterrupt``),
inside it (``StopRequest.deferred``) they only set a flag, and the loop stops at the end of a
step, so the steps timed so far are kept and the run is recorded "interrupted" with a partial
summary. Launched ranks stop together at a step they agree on (``engine``), because a rank
that stopped alone would leave the others waiting in a collective. A second Ctrl+C in a
single-process run stops at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scaleprobe.core.rank_record import RankRecord

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def describe(signame: str | None) -> str:
    """The error line of an interrupted run."""
    if signame in (None, "SIGINT"):
        return "interrupted by the user (Ctrl+C)"
    sig, _, rank = signame.partition(" to rank ")
    if rank:  # one rank's own signal (``kill`` of its pid): the others stopped with it
        return (f"interrupted by {sig} sent to rank {rank} alone (the other ranks stopped "
                "with it)")
    return f"interrupted by {signame} (asked to stop, e.g. pre-empted by a scheduler)"


STOPPING = ("\nscaleprobe: {} heard: stopping at the end of the step under way, the steps "
            "timed so far kept (Ctrl+C again stops at once)\n")

# the job's store key holding the step the ranks stop at and who was asked to stop: "12 1 15"
# (stop after 12 steps; rank 1 was sent signal 15)
STOP_KEY = "scaleprobe/stop_step"


def stop_value(step: int, who: tuple[int, int] | None) -> str:
    return f"{step} {who[0]} {who[1]}" if who else str(step)


def stop_step_of(value: bytes | str) -> int:
    text = value.decode() if isinstance(value, bytes) else value
    return int(text.split()[0])


def peers_across_hosts(local: Callable[[], tuple[int, int] | None], store: Any
                       ) -> Callable[[], tuple[int, int] | None]:
    """``StopRequest.peers`` for a job that spans hosts: a peer on this host is read from its
    mapped heartbeat (``local``, no system call); a rank on another host is seen once some
    rank has proposed the step to stop at in the job's store (``STOP_KEY``): one round trip
    to host 0's store at every step's end. Without it the ranks of the other hosts trained on
    and waited in a collective until the timeout."""

    def peers() -> tuple[int, int] | None:
        found = local()
        if found is not None:
            return found
        try:
            if not store.check([STOP_KEY]):
                return None
            parts = store.get(STOP_KEY).decode().split()
        except Exception:  # noqa: BLE001  (a store gone: the collective's own error follows)
            return None
        return (int(parts[1]), int(parts[2])) if len(parts) == 3 else (-1, 0)

    return peers


class Interrupted(KeyboardInterrupt):
    """A stop request that ended a run; ``raws`` holds the ranks' records when they were kept."""

    def __init__(self, signame: str = "SIGINT", raws: list[RankRecord] | None = None) -> None:
        super().__init__(describe(signame))
        self.signame = signame
        self.raws = raws


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _in_forked_child(owner_pid: int, signum: int) -> bool:
    """A process forked while the handler was installed (a DataLoader worker) inherits it.
    There SIGINT is ignored from then on: a terminal's Ctrl+C, or a launcher's SIGINT to a
    rank's process group (torchrun's), reaches the workers too, and a worker that ended on it
    would fail the fetch under way instead of letting the run stop after its step (the loader
    ends its workers when the run ends). SIGTERM does what it does by default: it ends the
    process (the loader stops its workers with it)."""
    if os.getpid() == owner_pid:
        return False
    if signum == signal.SIGINT:
        signal.signal(signum, signal.SIG_IGN)
        return True
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    return True


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """While inside, SIGTERM raises ``Interrupted("SIGTERM")`` as Ctrl+C raises
    KeyboardInterrupt (instead of ending the process without a record)."""
    if not _in_main_thread():
        yield
        return

    owner = os.getpid()

    def handler(signum: int, frame: Any) -> None:
        if not _in_forked_child(owner, signum):
            raise Interrupted(signal_name(signum))

    prev = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, prev)


class StopRequest:
    """What a run does with SIGINT and SIGTERM while ``handling()``: raise ``Interrupted``
    (setting up: nothing measured yet), or, once ``deferring`` (training, and what follows
    it), set ``signame`` for the loop to poll between steps. ``stop_at`` is the step count the
    ranks agreed to stop at. With ``escape_on_second`` (one process, a person at the
    keyboard) a second signal raises at once.

    A signal sent to one rank alone (``kill`` of its pid, a scheduler that signals one
    process) must stop its peers too, or they would wait in a collective for a rank that has
    left: ``tell_peers`` is called with the signal (the rank's heartbeat publishes it) and
    ``peers`` answers (rank, signal) of a peer that was sent one, read at every step's end;
    ``requested`` is then true on every rank (``peer`` says whose signal it was)."""

    def __init__(self, escape_on_second: bool = True) -> None:
        self.signame: str | None = None
        self.stop_at: int | None = None
        self.deferring = False
        self.escape_on_second = escape_on_second
        self._owner = os.getpid()
        self.tell_peers: Callable[[int], None] | None = None
        self.peers: Callable[[], tuple[int, int] | None] | None = None
        self.peer: tuple[int, int] | None = None  # (rank, signal) of the peer that was asked
        self.local_ranks: set[int] | None = None  # ranks on this host (None: every rank)

    @property
    def requested(self) -> bool:
        if self.signame is not None or self.peer is not None:
            return True
        if self.peers is not None:
            self.peer = self.peers()
        return self.peer is not None

    def who(self, rank: int) -> tuple[int, int] | None:
        """(rank, signal) of the rank that was asked to stop: this one, or a peer."""
        if self.signame is not None:
            with contextlib.suppress(KeyError):
                return rank, int(signal.Signals[self.signame])
        return self.peer

    def recorded(self) -> str:
        """What this rank's record says stopped it: its own signal, "peer" (a peer on this
        host, whose own record names it), or, for a rank on another host, "SIGTERM to rank 1"
        (no record of that host names it)."""
        if self.signame is not None:
            return self.signame
        p = self.peer
        if p is None or p[0] < 0 or self.local_ranks is None or p[0] in self.local_ranks:
            return "peer"
        return f"{signal_name(p[1])} to rank {p[0]}"

    def _handler(self, signum: int, frame: Any) -> None:
        if _in_forked_child(self._owner, signum):
            return
        name = signal_name(signum)
        if not self.deferring or (self.signame is not None and self.escape_on_second):
            raise Interrupted(name)
        if self.signame is None and self.escape_on_second:
            # a step can take minutes (a large model on a CPU): say the stop was heard. One
            # write to the descriptor: the stream's buffer may be mid-write in this thread
            with contextlib.suppress(OSError):
                os.write(2, STOPPING.format(name).encode())
        self.signame = self.signame or name
        if self.tell_peers is not None:
            self.tell_peers(signum)

    @contextlib.contextmanager
    def handling(self) -> Iterator[StopRequest]:
        if not _in_main_thread():
            yield self
            return
        self._owner = os.getpid()
        prev = {s: signal.signal(s, self._handler) for s in SIGNALS}
        try:
            yield self
        finally:
            self.deferring = False
            for s, h in prev.items():
                signal.signal(s, h)
