"""How a rank starts (launch/rankstart.py): forked on a machine without a GPU driver, spawned on
one, as the environment says otherwise; a forked rank begins as a fresh interpreter would;
a stop signal that comes while a rank is being forked is not lost."""

import os
import signal
import sys
import time

import pytest

from scaleprobe import launch
from scaleprobe.core.errors import ConfigError
from scaleprobe.launch import rankstart


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
    monkeypatch.setattr(rankstart, "gpu_machine", lambda: gpu)
    monkeypatch.setattr(rankstart, "_fresh", fresh)
    assert launch.rank_start_method() == expect


def test_only_scaleprobes_own_entries_say_the_process_is_fresh(monkeypatch):
    """cli.main called in a process of the caller's leaves the start to spawn; the command
    line's entry (and a point's process) say their process is fresh."""
    from scaleprobe import cli

    monkeypatch.setattr(rankstart, "_fresh", False)
    assert cli.main(["--version"]) == 0 and rankstart._fresh is False
    assert cli.entry(["--version"]) == 0 and rankstart._fresh is True


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
    monkeypatch.setattr(rankstart, "_forking_ranks", True)
    try:
        rankstart._hold_stop_signals()  # the fork begins
        os.kill(os.getpid(), signal.SIGTERM)  # noted, not raised
        assert rankstart._deferred == [signal.SIGTERM]
        rankstart._release_stop_signals()  # the fork is over: the handler is back
        assert signal.getsignal(signal.SIGTERM) is _raise_stop and not rankstart._held
        with pytest.raises(Stop):
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        signal.signal(signal.SIGTERM, old)


def test_a_stop_that_comes_as_the_handlers_go_back_is_not_lost(monkeypatch):
    """Bug caught: the stops noted were read before the handlers went back, so a stop that
    came in between was noted after the list was read and never sent again. Here it comes
    at the first handler's return (the moment a real signal could)."""
    old = signal.signal(signal.SIGTERM, _raise_stop)
    monkeypatch.setattr(rankstart, "_forking_ranks", True)
    real = signal.signal

    def signal_late(sig, handler):
        if sig == signal.SIGTERM:  # the stop comes while SIGTERM's handler is still held
            current = signal.getsignal(sig)
            if callable(current):
                current(sig, None)
        return real(sig, handler)

    try:
        rankstart._hold_stop_signals()  # the fork begins
        monkeypatch.setattr(rankstart.signal, "signal", signal_late)
        rankstart._release_stop_signals()
        monkeypatch.setattr(rankstart.signal, "signal", real)
        assert signal.getsignal(signal.SIGTERM) is _raise_stop and not rankstart._held
        with pytest.raises(Stop):  # sent again, and raised by the handler now back
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        real(signal.SIGTERM, old)
        rankstart._deferred.clear()


class StopHup(Exception):
    sigval = signal.SIGHUP  # as torch's launcher's SignalException carries its signal


def _raise_hup(*_a):
    raise StopHup()


def test_a_handler_put_back_that_raises_in_the_hook_loses_neither_stop_nor_handlers(
        monkeypatch):
    """A stop that comes just after its handler went back runs that handler inside the
    at-fork hook; one that raises there (Python's KeyboardInterrupt, torch's launcher's own)
    had its exception dropped and left the handlers after it held for good. Now the stop is
    noted and sent again, and every handler goes back."""
    olds = {s: signal.getsignal(s) for s in (signal.SIGHUP, signal.SIGQUIT)}
    signal.signal(signal.SIGHUP, _raise_hup)
    monkeypatch.setattr(rankstart, "_forking_ranks", True)
    real = signal.signal
    raised = []

    def signal_then_stop(sig, handler):
        if sig == signal.SIGQUIT and not raised:  # SIGHUP's handler, back, runs and raises
            raised.append(sig)
            _raise_hup()
        return real(sig, handler)

    try:
        rankstart._hold_stop_signals()
        monkeypatch.setattr(rankstart.signal, "signal", signal_then_stop)
        rankstart._release_stop_signals()
        monkeypatch.setattr(rankstart.signal, "signal", real)
        assert raised and signal.getsignal(signal.SIGQUIT) is olds[signal.SIGQUIT]
        assert signal.getsignal(signal.SIGHUP) is _raise_hup and not rankstart.in_fork_hooks()
        with pytest.raises(StopHup):  # the stop, sent again
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        for sig, h in olds.items():
            real(sig, h)
        rankstart._deferred.clear()


def test_the_launchers_stop_inside_the_fork_hooks_is_told_and_sent_again(tmp_path):
    """The launcher's own stop handler, run inside the at-fork hooks, tells the watch and
    raises nothing there; the stop is raised once the hooks are over."""
    from torch.distributed.elastic.multiprocessing.api import SignalException

    from scaleprobe.launch.rankwatch import RankWatch

    old = signal.getsignal(signal.SIGTERM)
    watch = RankWatch(str(tmp_path))
    try:
        with launch._stops_told_to(watch):
            rankstart._held[signal.SIGQUIT] = signal.getsignal(signal.SIGQUIT)  # a fork under way
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(20):  # 0.2 s: sent again every 0.05 s, raised nowhere
                time.sleep(0.01)
            assert watch.stop_asked is not None and watch.stop_asked[1] == "SIGTERM"
            with pytest.raises(SignalException):
                rankstart._held.clear()  # the hooks are over
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline:
                    time.sleep(0.01)
    finally:
        rankstart._held.clear()
        signal.signal(signal.SIGTERM, old)


def test_a_fork_that_is_not_a_ranks_holds_nothing(monkeypatch):
    monkeypatch.setattr(rankstart, "_forking_ranks", False)
    before = signal.getsignal(signal.SIGINT)
    rankstart._hold_stop_signals()
    assert signal.getsignal(signal.SIGINT) is before and not rankstart._held


def test_a_forked_rank_begins_with_default_handlers_and_its_own_streams(monkeypatch):
    """The launcher's handlers raise its own exception type and another of its threads may
    hold its stdout's lock at the fork: a rank gets Python's defaults and new stream objects,
    and a plain fork (a loader worker) keeps everything. Any other handler of the launcher's
    process goes too (a Slurm job's: submitit's SIGUSR2), as a fresh interpreter has none."""
    monkeypatch.setattr(rankstart, "_forking_ranks", True)
    old = signal.signal(signal.SIGTERM, _raise_stop)
    old_usr2 = signal.signal(signal.SIGUSR2, _raise_stop)
    r, w = os.pipe()
    try:
        pid = os.fork()
        if pid == 0:  # the rank: Ctrl+C held until its entry runs
            ok = (signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
                  and signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL
                  and signal.getsignal(signal.SIGINT) is rankstart._defer
                  and sys.stdout is not rankstart._stale_streams[0]
                  and not rankstart._forking_ranks
                  and rankstart.armed(lambda: signal.getsignal(signal.SIGINT))()
                  is signal.default_int_handler)
            os.write(w, b"1" if ok else b"0")
            os._exit(0)
        os.waitpid(pid, 0)
        assert os.read(r, 1) == b"1"
        assert signal.getsignal(signal.SIGTERM) is _raise_stop  # the launcher keeps its own
        monkeypatch.setattr(rankstart, "_forking_ranks", False)
        pid = os.fork()
        if pid == 0:  # not a rank: nothing changed
            os.write(w, b"1" if signal.getsignal(signal.SIGTERM) is _raise_stop
                     and signal.getsignal(signal.SIGUSR2) is _raise_stop else b"0")
            os._exit(0)
        os.waitpid(pid, 0)
        assert os.read(r, 1) == b"1"
    finally:
        signal.signal(signal.SIGTERM, old)
        signal.signal(signal.SIGUSR2, old_usr2)
        os.close(r)
        os.close(w)


def test_ctrl_c_between_a_ranks_fork_and_its_entry_is_raised_in_the_entry(monkeypatch):
    """Bug caught: Ctrl+C that reached a rank just forked, before multiprocessing's own try,
    raised KeyboardInterrupt through the launcher's stack copied into the child: the child
    finished the launcher's run and recorded it a second time (two records of one run)."""
    monkeypatch.setattr(rankstart, "_forking_ranks", True)
    r, w = os.pipe()
    try:
        pid = os.fork()
        if pid == 0:  # the rank, in the window
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)  # held: nothing raised here
                ran = []
                try:
                    rankstart.armed(lambda: ran.append(1))()
                    got = b"n"
                except KeyboardInterrupt:
                    got = b"k" if not ran else b"r"
            except BaseException:  # noqa: BLE001  (raised in the window: the bug)
                got = b"w"
            os.write(w, got)
            os._exit(0)
        os.waitpid(pid, 0)
        assert os.read(r, 1) == b"k"
    finally:
        os.close(r)
        os.close(w)


def test_the_entry_keeps_its_name_for_torchs_launcher():
    def launched_worker():
        return 7
    armed = rankstart.armed(launched_worker)
    assert armed.__name__ == "launched_worker" and armed() == 7


class _Closer:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)  # the stop comes while a finaliser runs
        time.sleep(0.01)


def test_a_stop_inside_a_finaliser_is_raised_after_it(tmp_path):
    """Bug caught: Ctrl+C that came while a temporary file's finaliser ran in the launcher
    raised there, where Python prints "Exception ignored" and drops it: the 6 ranks trained
    on for a minute (and torch's own handler had replaced this one)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException

    from scaleprobe.launch.rankwatch import RankWatch

    old = signal.getsignal(signal.SIGTERM)
    watch = RankWatch(str(tmp_path))
    try:
        with launch._stops_told_to(watch):
            with pytest.raises(SignalException):
                obj = _Closer()
                del obj  # the handler runs inside __del__: deferred, sent again
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline:
                    time.sleep(0.01)
        assert watch.stop_asked is not None and watch.stop_asked[1] == "SIGTERM"
    finally:
        signal.signal(signal.SIGTERM, old)


def test_torchs_launcher_installs_no_stop_handler_of_its_own_under_a_watch():
    job = launch.Job(nproc=2)
    own = launch._launch_config(job, "127.0.0.1:1", "r", None, own_stop_handler=True)
    plain = launch._launch_config(job, "127.0.0.1:1", "r", None)
    if hasattr(own, "signals_to_handle"):
        assert own.signals_to_handle == "" and plain.signals_to_handle != ""
