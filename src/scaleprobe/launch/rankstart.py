"""How a rank starts: forked from the launcher or spawned, and what a forked rank resets.

A rank is forked from the launcher's process when that process is scaleprobe's own
(``fresh_launcher``) on a machine without a GPU driver, so it does not import torch and the
engine again; spawned otherwise (a process that may have run tensor operations: torch's
OpenMP pool deadlocks a forked child; a GPU machine: CUDA). docs/RELIABILITY.md gives the
rule, what a forked rank resets and what it costs; ``SCALEPROBE_RANK_START=fork`` or
``=spawn`` chooses either. ``wrap``'s ranks start the same way (``wrap/boot.forked_rank``).

Around each fork (``os.register_at_fork``), while ``forking`` says the launcher is forking
its ranks: the launcher's stop signals are held and sent again after it (a stop raised in an
at-fork hook was dropped), and the child begins as a fresh interpreter would (no inherited
handlers, its own standard streams, Ctrl+C held until its entry, ``armed``).
"""

from __future__ import annotations

import contextlib
import functools
import io
import multiprocessing
import multiprocessing.util
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from scaleprobe.core.errors import ConfigError
from scaleprobe.measure.env import gpu_machine, leave_process

START_ENV = "SCALEPROBE_RANK_START"  # fork | spawn (see the module's docstring)


_fresh = False  # this process is scaleprobe's own and has run no tensor operation


def fresh_launcher() -> None:
    """Say that this process is scaleprobe's own, started to run one command or one point,
    so it has run no tensor operation before it launches ranks: they may be forked from it
    (the module's docstring). Called by the command line's entry, by a point's process and
    by a Slurm job of ``comm``, never by code a user or a test calls in a process of its
    own."""
    global _fresh
    _fresh = True


def is_fresh() -> bool:
    """Whether ``fresh_launcher`` was called in this process (or in the one it was forked
    from before it ran anything): scaleprobe's own, no tensor operation run."""
    return _fresh


def rank_start_method() -> str:
    """``fork`` or ``spawn``: how this host's ranks start (see the module's docstring)."""
    how = os.environ.get(START_ENV, "").strip().lower()
    if how in ("fork", "spawn"):
        return how
    if how:
        raise ConfigError(f"{START_ENV}={how!r}: expected fork or spawn")
    fork_ok = sys.platform == "linux" and "fork" in multiprocessing.get_all_start_methods()
    return "fork" if _fresh and fork_ok and not gpu_machine() else "spawn"


_forking_ranks = False  # set while this process forks its ranks (``forking``)
_guard_fd: int | None = None  # the write end of the job's guard's pipe (``guard_pipe``)
_stale_streams: list[Any] = []  # the parent's stdio objects, kept from finalisers in a rank
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
_held: dict[int, Any] = {}  # the stop signals' handlers, while a rank is being forked
_deferred: list[int] = []  # stop signals that came while a rank was being forked


def _defer(signum: int, _frame: Any) -> None:
    _deferred.append(signum)


def _hold_stop_signals() -> None:
    """Before a rank's fork, in the launcher: Python runs its at-fork hooks (logging's, ...)
    around the fork, and an exception raised in one is printed and dropped. The launcher's
    stop handler raises (Ctrl+C, SIGTERM), so a stop that came during a fork was lost and the
    job ran on (6 ranks on 2 cores stopped in their first steps ran for minutes): until the
    fork is over, a stop signal is only noted, then sent again (``_release_stop_signals``)."""
    if not _forking_ranks or threading.current_thread() is not threading.main_thread():
        return
    for sig in STOP_SIGNALS:
        _held[sig] = signal.getsignal(sig)
        signal.signal(sig, _defer)


def _release_stop_signals() -> None:
    """After a rank's fork, in the launcher: the handlers back, the stops noted sent again
    from another thread a moment later, so they arrive outside these hooks (this is the last
    of Python's after-fork hooks in the parent: registered after logging's). The handlers go
    back first and the stops noted are read after: read before, a stop that came in between
    was noted after the list was read and nothing sent it again (after the last rank's fork,
    the job ran on). A handler put back runs for a stop that comes at once, still inside the
    hooks: this module's launcher's handler then only notes it (``in_fork_hooks``); another
    that raises (KeyboardInterrupt, torch's launcher's) is caught here and its stop noted."""
    if not _held:
        return
    for sig, handler in list(_held.items()):
        while True:
            try:
                signal.signal(sig, handler)
                break
            except (ValueError, TypeError, OSError):  # signal.signal's own refusal
                break
            except BaseException as e:  # noqa: BLE001  (raised in a hook, it would be dropped)
                stop = _signal_of(e)
                if stop is not None:
                    _deferred.append(stop)
    pending = list(dict.fromkeys(_deferred))
    _deferred.clear()
    if pending:
        threading.Timer(0.05, send_to_self, args=(pending,)).start()
    _held.clear()  # the hooks are over (``in_fork_hooks``)


def _signal_of(e: BaseException) -> int | None:
    """The stop signal a handler's exception stands for (KeyboardInterrupt: SIGINT; torch's
    launcher's SignalException carries it), or None."""
    if isinstance(e, KeyboardInterrupt):
        return int(signal.SIGINT)
    sig = getattr(e, "sigval", None)
    return int(sig) if sig is not None else None


def in_fork_hooks() -> bool:
    """Whether this process is between its hold of the stop signals before a rank's fork and
    their release after it: a stop handler run now runs inside Python's at-fork hooks, where
    what it raises is printed and dropped, so it should note the stop and send it again."""
    return bool(_held)


def send_to_self(signals: list[int]) -> None:
    for sig in signals:
        os.kill(os.getpid(), sig)


def _handler_of(sig: int) -> Any:
    try:
        return signal.getsignal(sig)
    except (ValueError, OSError):  # not a signal this platform lets Python handle
        return None


def _begin_as_a_fresh_rank() -> None:
    """In a rank just forked by the launcher: what a fresh interpreter starts with."""
    global _forking_ranks, _guard_fd
    if _guard_fd is not None:  # only the launcher holds the guard's pipe (``guard_pipe``)
        with contextlib.suppress(OSError):
            os.close(_guard_fd)
        _guard_fd = None
    if not _forking_ranks:  # another fork (a loader worker, a user's own): nothing to do
        return
    _forking_ranks = False
    _held.clear()
    _deferred.clear()
    # every handler the launcher's process set (its stop handlers, torch's launcher's, a
    # scheduler's job wrapper's such as submitit's SIGUSR2), as a fresh interpreter has none
    for sig in (*STOP_SIGNALS, signal.SIGCHLD, *(
            s for s in signal.valid_signals() if callable(_handler_of(s)))):
        if sig != signal.SIGINT:
            signal.signal(sig, signal.SIG_DFL)
    # Ctrl+C is held until the rank's entry (``armed``): raised here, between the fork and
    # multiprocessing's own try, the KeyboardInterrupt climbed the launcher's stack copied
    # into the child, which then recorded the run a second time as the launcher's double
    signal.signal(signal.SIGINT, _defer)
    for name, fd in (("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        if old is None:
            continue
        _stale_streams.append(old)  # never flushed nor closed here: its lock may be held
        new = io.TextIOWrapper(io.FileIO(fd, "w", closefd=False),
                               encoding=getattr(old, "encoding", None) or "utf-8",
                               errors=getattr(old, "errors", None) or "strict",
                               line_buffering=bool(getattr(old, "line_buffering", False)),
                               # -u / PYTHONUNBUFFERED: as unbuffered as the old one
                               write_through=name == "stderr" or bool(
                                   getattr(old, "write_through", False)))
        setattr(sys, name, new)
        setattr(sys, f"__{name}__", new)


os.register_at_fork(before=_hold_stop_signals, after_in_parent=_release_stop_signals,
                    after_in_child=_begin_as_a_fresh_rank)


def armed(entry: Callable[..., Any]) -> Callable[..., Any]:
    """``entry`` as a forked rank runs it: Ctrl+C, held since the fork, is armed again
    first, and one that came meanwhile is raised here, where the rank's own code handles
    it."""
    @functools.wraps(entry)
    def rank_entry(*args: Any) -> Any:
        came = signal.SIGINT in _deferred
        _deferred.clear()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if came:
            raise KeyboardInterrupt
        return entry(*args)

    return rank_entry


class LeavesAfterReturn:
    """``entry`` as a spawned rank runs it for a caller that asked (``run_workers(...,
    leave_after_return=True)``): once it has returned, and the launcher has taken its value,
    the process ends by ``leave_process`` (threads joined, atexit run, streams flushed,
    ``os._exit``) instead of the interpreter's teardown, where a gloo thread of a process
    group a DDP model keeps alive can abort the rank (``measure/env.leave_process``). A
    forked rank ends in ``os._exit`` already; a rank that raised ends as before, with its
    code. A class, not a closure: a spawned rank's entry is pickled."""

    def __init__(self, entry: Callable[..., Any]) -> None:
        self.entry = entry
        functools.update_wrapper(self, entry)  # the launcher names it, and records it

    def __call__(self, *args: Any) -> Any:
        out = self.entry(*args)
        # multiprocessing runs its finalizers as the rank's function has ended, after
        # torch's launcher has handed the value over; this one last of them
        multiprocessing.util.Finalize(None, _leave_unless_raised, exitpriority=-(2 ** 31))
        return out


def _leave_unless_raised() -> None:
    if sys.exc_info()[0] is None:  # called inside the ``finally`` that an exception also takes
        leave_process(0)


@contextlib.contextmanager
def forking(yes: bool) -> Iterator[None]:
    """While inside, when ``yes``: this process forks its ranks (the at-fork hooks act)."""
    global _forking_ranks
    _forking_ranks = yes
    try:
        yield
    finally:
        _forking_ranks = False


@contextlib.contextmanager
def guard_pipe(fd: int) -> Iterator[None]:
    """While inside: ``fd``, the write end of the job's guard's pipe, which a forked rank
    closes first (only the launcher holds it: the guard acts when the launcher is gone)."""
    global _guard_fd
    _guard_fd = fd
    try:
        yield
    finally:
        _guard_fd = None
