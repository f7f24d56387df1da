"""How a rank starts (launch/__init__.py): forked on a machine without a GPU driver, spawned on
one, as the environment says otherwise; a forked rank begins as a fresh interpreter would;
a stop signal that comes while a rank is being forked is not lost."""

import os
import signal
import sys
import time

import pytest

from scaleprobe import launch
from scaleprobe.core.errors import ConfigError


@pytest.mark.parametrize("env,gpu,fresh,expect", [
    ("", False, True, "fork"), ("", True, True, "spawn"), ("spawn", False, True, "spawn"),
    ("FORK", True, True, "fork"),
    # a process of the caller's (a notebook, this test process) may have started OpenMP's
    # pool: a rank forked from it waited forever at its first parallel region
    ("", False, False, "spawn"),
])
def test_the_start_method_follows_the_machine_the_process_and_the_environment(
        monkeypatch, env, gpu, fresh, expect):
    monkeypatch.setenv(launch.START_ENV, env)
    monkeypatch.setattr(launch, "gpu_machine", lambda: gpu)
    monkeypatch.setattr(launch, "_fresh", fresh)
    assert launch.rank_start_method() == expect


def test_only_scaleprobes_own_entries_say_the_process_is_fresh(monkeypatch):
    """cli.main called in a process of the caller's leaves the start to spawn; the command
    line's entry (and a point's process) say their process is fresh."""
    from scaleprobe import cli

    monkeypatch.setattr(launch, "_fresh", False)
    assert cli.main(["--version"]) == 0 and launch._fresh is False
    assert cli.entry(["--version"]) == 0 and launch._fresh is True


def test_an_unknown_start_method_is_one_line(monkeypatch):
    monkeypatch.setenv(launch.START_ENV, "exec")
    with pytest.raises(ConfigError, match="SCALEPROBE_RANK_START='exec': expected fork or spawn"):
        launch.rank_start_method()


class Stop(Exception):
    pass


def _raise_stop(*_a):
    raise Stop()


def test_a_stop_during_a_ranks_fork_is_sent_again_after_it(monkeypatch):
    """Bug caught: Ctrl+C while the launcher forked its ranks raised inside one of Python's
    at-fork hooks, where the exception is printed and dropped: the job ran on for minutes."""
    old = signal.signal(signal.SIGTERM, _raise_stop)
    monkeypatch.setattr(launch, "_forking_ranks", True)
    try:
        launch._hold_stop_signals()  # the fork begins
        os.kill(os.getpid(), signal.SIGTERM)  # noted, not raised
        assert launch._deferred == [signal.SIGTERM]
        launch._release_stop_signals()  # the fork is over: the handler is back
        assert signal.getsignal(signal.SIGTERM) is _raise_stop and not launch._held
        with pytest.raises(Stop):
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        signal.signal(signal.SIGTERM, old)


def test_a_fork_that_is_not_a_ranks_holds_nothing(monkeypatch):
    monkeypatch.setattr(launch, "_forking_ranks", False)
    before = signal.getsignal(signal.SIGINT)
    launch._hold_stop_signals()
    assert signal.getsignal(signal.SIGINT) is before and not launch._held


def test_a_forked_rank_begins_with_default_handlers_and_its_own_streams(monkeypatch):
    """The launcher's handlers raise its own exception type and another of its threads may
    hold its stdout's lock at the fork: a rank gets Python's defaults and new stream objects,
    and a plain fork (a loader worker) keeps everything."""
    monkeypatch.setattr(launch, "_forking_ranks", True)
    old = signal.signal(signal.SIGTERM, _raise_stop)
    r, w = os.pipe()
    try:
        pid = os.fork()
        if pid == 0:  # the rank
            ok = (signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
                  and signal.getsignal(signal.SIGINT) is signal.default_int_handler
                  and sys.stdout is not launch._stale_streams[0]
                  and not launch._forking_ranks)
            os.write(w, b"1" if ok else b"0")
            os._exit(0)
        os.waitpid(pid, 0)
        assert os.read(r, 1) == b"1"
        assert signal.getsignal(signal.SIGTERM) is _raise_stop  # the launcher keeps its own
        monkeypatch.setattr(launch, "_forking_ranks", False)
        pid = os.fork()
        if pid == 0:  # not a rank: nothing changed
            os.write(w, b"1" if signal.getsignal(signal.SIGTERM) is _raise_stop else b"0")
            os._exit(0)
        os.waitpid(pid, 0)
        assert os.read(r, 1) == b"1"
    finally:
        signal.signal(signal.SIGTERM, old)
        os.close(r)
        os.close(w)
