"""The launcher's watch over a job's ranks (rankwatch.py): a rank's death read before the
launcher collects it, a stalled job ended, and error lines that name the signal."""

import signal
import struct
import subprocess
import time
from types import SimpleNamespace

import psutil
import pytest

from scaleprobe.launch.lines import last_meaningful_line, name_signal
from scaleprobe.launch.rankwatch import RankWatch
from scaleprobe.measure.heartbeat import STATES, Beat, RankError, beat_dir, write_error


def _beat(run_dir, rank, pid, state="training", step=5, mark=3, moved_age=0.0):
    now = time.time()
    beat_dir(run_dir).mkdir(parents=True, exist_ok=True)
    (beat_dir(run_dir) / f"rank-{rank}.hb").write_bytes(struct.pack(
        "<9d", rank, pid, STATES.index(state), step, now - moved_age, mark, now - moved_age,
        now, 0))


def test_a_rank_killed_is_read_before_the_launcher_collects_it(tmp_path, monkeypatch):
    """SIGKILL of a rank, collected (waited for) by the launcher 0.3 s later. Bug caught: the
    rank named "exited", without the signal, when the launcher collected it between two of
    the watch's looks (1 of 2 tries under load): its death now wakes the watch at once."""
    monkeypatch.setattr(RankWatch, "POLL_S", 5.0)  # only the death can wake it in time
    rank = subprocess.Popen(["sleep", "60"])
    try:
        _beat(tmp_path, 1, rank.pid)
        watch = RankWatch(str(tmp_path))
        watch.poll()  # the watch has seen the rank
        with watch:
            time.sleep(0.2)
            rank.send_signal(signal.SIGKILL)
            time.sleep(0.3)
            assert rank.wait(timeout=5) == -9  # the launcher collects it
            assert watch.exits.get(1) == "killed by signal 9", watch.exits
    finally:
        rank.kill()


def test_a_job_with_no_progress_for_the_timeout_is_ended_as_stalled(tmp_path):
    """wrap: a script stuck inside a step (no step ends, no batch, no forward) for --timeout.
    Bug caught: the job ran forever; now every rank is killed and the stall named, with the
    rank the other waited for (it is behind)."""
    ranks = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
    try:
        _beat(tmp_path, 0, ranks[0].pid, step=7, mark=4, moved_age=31)
        _beat(tmp_path, 1, ranks[1].pid, step=7, mark=2, moved_age=33)
        watch = RankWatch(str(tmp_path), stall_after_s=30)
        watch.poll()
        assert [r.wait(timeout=10) for r in ranks] == [-9, -9]
        got = watch.failure(SimpleNamespace(failures={}))
        assert got.rank == 1 and got.message.startswith("stalled: no progress for 3"), got
        assert "at step 7" in got.message and "--timeout 30" in got.message
    finally:
        for r in ranks:
            r.kill()


def test_a_rank_that_raised_is_named_by_its_own_error_line_when_the_watch_saw_nothing(
        tmp_path):
    """The launcher saw rank 1 exit (code 1) before the watch read its last beat: the job's
    error is still the rank's own line, not "exited with code 1". Bug caught: a killed
    DataLoader worker's error was lost this way under load (1 run of 3)."""
    beat_dir(tmp_path).mkdir(parents=True)
    write_error(tmp_path, 1, RankError("RuntimeError: DataLoader worker (pid 7) is killed by signal"))
    fail = SimpleNamespace(exitcode=1, message="", error_file_data=None, timestamp=5)
    watch = RankWatch(str(tmp_path))  # it never polled: it saw no failure
    got = watch.failure(SimpleNamespace(failures={1: fail}))
    assert (got.rank, got.message) == (1, "RuntimeError: DataLoader worker (pid 7) is killed "
                                          "by signal")
    # a rank without a line of its own keeps the launcher's words
    got = watch.failure(SimpleNamespace(failures={0: fail}))
    assert (got.rank, got.message) == (0, "exited with code 1")


def test_no_stall_before_the_first_progress_nor_within_the_timeout(tmp_path):
    """A rank the watch has only just seen (no step, no batch yet: it was idle before the
    watch could tell) or one whose step is slow but within the timeout is left alone; so is
    a job without a stall limit (the built-in loop's ranks end on the collective timeout)."""
    rank = subprocess.Popen(["sleep", "60"])
    try:
        _beat(tmp_path, 0, rank.pid, step=0, mark=0, moved_age=100)
        watch = RankWatch(str(tmp_path), stall_after_s=30)
        watch.poll()
        _beat(tmp_path, 0, rank.pid, step=3, mark=2, moved_age=20)
        watch.poll()
        _beat(tmp_path, 0, rank.pid, step=3, mark=2, moved_age=100)
        RankWatch(str(tmp_path)).poll()
        assert watch.stall is None and rank.poll() is None
    finally:
        rank.kill()


def test_a_killed_loader_worker_is_named_with_its_signal():
    """PyTorch's "exited unexpectedly" says nothing of the signal; its SIGCHLD path says
    "Killed." in words (bug caught: a wrapped script's killed worker recorded without
    "killed by signal 9")."""
    line = "RuntimeError: DataLoader worker (pid(s) 4321) exited unexpectedly"
    assert name_signal(line, [(4321, -9)]) == (
        line + "; DataLoader worker (pid 4321) was killed by signal 9 (SIGKILL)")
    assert name_signal(line, [(4321, 1)]) == line  # exited on its own: nothing to add
    words = "RuntimeError: DataLoader worker (pid 4321) is killed by signal: Killed."
    assert name_signal(words) == words[:-1] + " (signal 9, SIGKILL)"


class _SlowFromEight:
    """64 samples; from the ninth on, each takes a minute (the worker waits there)."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> float:
        if i >= 8:
            time.sleep(60)
        return float(i)


@pytest.mark.timeout(60)
def test_the_killed_worker_is_found_in_the_failed_batchs_frames():
    """A real DataLoader whose worker is killed: the error's traceback holds the iterator,
    whose workers say how they ended (PyTorch raised "exited unexpectedly" or a reset
    connection, neither naming the signal)."""
    import os

    import numpy.random  # noqa: F401  (see below)
    from torch.utils.data import DataLoader

    from scaleprobe.launch.lines import loader_worker_exits

    # numpy.random imported here, as every rank's seeding does: numpy loads it lazily, and a
    # worker forked from a process without it imported it to seed itself, where Python 3.11's
    # module lock failed once in about 200 forks (KeyError in importlib's acquire)

    # timeout: the loader looks at its workers once a batch is that late (by default once
    # every 5 s, PyTorch's status-check interval, which this test would wait out)
    loader = DataLoader(_SlowFromEight(), batch_size=4, num_workers=1, prefetch_factor=1,
                        timeout=1)
    it = iter(loader)
    # PyTorch's SIGCHLD handler would raise "is killed by signal: Killed." wherever the main
    # thread is (name_signal reads those words); without it the death surfaces at a batch
    before = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    next(it), next(it)  # batch 2 asked for: the worker sleeps in its first sample
    time.sleep(0.5)
    # killed there, it holds none of the loader's locks: killed at any moment, it could hold
    # its done event's (it reads the event after every index), and the loader waited on that
    # lock for good (1 in about 150 runs)
    pid = it._workers[0].pid
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
    try:
        for _ in range(20):
            next(it)
    except Exception as e:  # noqa: BLE001  (whichever way PyTorch reports it)
        assert (pid, -9) in loader_worker_exits(e), repr(e)
    else:
        raise AssertionError("the loader went on without its worker")
    finally:
        del it
        signal.signal(signal.SIGCHLD, before)


def test_a_rank_killed_by_sigkill_goes_before_the_peer_that_raised_after_it(tmp_path):
    """SIGKILL of rank 1 mid-training: rank 0 raises in DDP's comm hook (its peer is gone) and
    the launcher can list rank 0's failure first. Bug caught: the run blamed "rank 0:
    .../measure/comm/hook.py(101): done" for the kill of rank 1 (1 of 3 runs with forked ranks)."""
    beat_dir(tmp_path).mkdir(parents=True)
    write_error(tmp_path, 0, RankError("RuntimeError: Connection reset by peer"))
    fail = SimpleNamespace(exitcode=1, message="", error_file_data=None, timestamp=5)
    watch = RankWatch(str(tmp_path))
    watch.exits[1] = "killed by signal 9"
    got = watch.failure(SimpleNamespace(failures={0: fail}))
    assert got.rank == 1 and got.exitcode == -9
    assert got.message == ("killed by signal 9; rank 0 then failed: RuntimeError: Connection "
                           "reset by peer")
    # a rank this watch killed (after another's failure) is no cause
    watch.killed.add(1)
    assert watch.failure(SimpleNamespace(failures={0: fail})).rank == 0
    # a SIGTERM (the launcher stopping the others) is no cause either
    watch.killed.clear()
    watch.exits[1] = "killed by signal 15"
    assert watch.failure(SimpleNamespace(failures={0: fail})).rank == 0


def test_a_job_idle_before_its_first_step_is_ended_and_a_busy_one_is_not(tmp_path,
                                                                         monkeypatch):
    """A wrapped script that waits before its first step for what never comes (its own
    ranks' store, under torch.multiprocessing.spawn). Bug caught: no answer in 300 s, the
    stall watch began only at the first batch. Now a job none of whose ranks has moved or
    used the CPU for --timeout is ended, named as stalled before its first step; a rank that
    works (importing, preparing data: it uses the CPU) is left alone."""
    import sys

    from scaleprobe.launch import rankwatch

    later = [0.0]
    real = time.time
    monkeypatch.setattr(rankwatch, "time", SimpleNamespace(time=lambda: real() + later[0]))
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    idle = subprocess.Popen(["sleep", "60"])
    try:
        for run, proc in (("busy", busy), ("idle", idle)):
            _beat(tmp_path / run, 0, proc.pid, step=0, mark=0)
        watches = {run: RankWatch(str(tmp_path / run), stall_after_s=30)
                   for run in ("busy", "idle")}
        for w in watches.values():
            w.poll()  # the first look: the CPU each has used so far
        spun = psutil.Process(busy.pid).cpu_times()
        deadline = time.monotonic() + 30  # the busy one spins (slowly, on a loaded machine)
        while time.monotonic() < deadline:
            now = psutil.Process(busy.pid).cpu_times()
            if now.user + now.system - spun.user - spun.system >= 3 * rankwatch.CPU_MOVED_S:
                break
            time.sleep(0.05)
        later[0] = 40.0  # the timeout has passed since
        for w in watches.values():
            w.poll()
        assert watches["busy"].stall is None and busy.poll() is None
        assert idle.wait(timeout=10) == -9
        got = watches["idle"].failure(SimpleNamespace(failures={}))
        assert got.rank == 0 and got.message.startswith(
            "stalled before the first step: for 4"), got.message
        assert "--timeout 30)" in got.message
    finally:
        busy.kill()
        idle.kill()


def _sharer_child(quiet, err_path, conn):
    """A forked process serving a file descriptor through multiprocessing's resource sharer,
    as a DataLoader worker serves a batch's tensors to its rank."""
    import os
    import sys
    from multiprocessing import resource_sharer

    from scaleprobe.measure.env import quiet_fd_sharing

    sys.stderr = open(err_path, "w", buffering=1)  # noqa: SIM115  (the child's, to its end)
    sys.excepthook = sys.__excepthook__
    if quiet:
        quiet_fd_sharing()
    resource_sharer.DupFd(os.open(os.devnull, os.O_RDONLY))
    conn.send(resource_sharer._resource_sharer._address)
    time.sleep(1.5)


@pytest.mark.parametrize("quiet", [False, True])
def test_a_loader_workers_fd_sharing_error_stays_off_the_output(tmp_path, quiet):
    """SIGKILL of a DDP rank with loader workers. Bug caught: a 19-line traceback of
    multiprocessing's resource sharer (``ConnectionResetError``) on the launcher's stderr,
    printed by a worker's sharing thread when its rank went away mid-handover. Here the rank
    connects and goes away; without the filter (``quiet`` False) the thread prints it."""
    import multiprocessing
    from multiprocessing.connection import Client

    ctx = multiprocessing.get_context("fork")
    mine, theirs = ctx.Pipe()
    err = tmp_path / "stderr.txt"
    child = ctx.Process(target=_sharer_child, args=(quiet, str(err), theirs))
    child.start()
    address = mine.recv()
    Client(address, authkey=multiprocessing.current_process().authkey).close()
    child.join(timeout=20)
    text = err.read_text()
    if quiet:
        assert text == "", text
    else:  # the mechanism the filter silences
        assert "resource_sharer.py" in text and "Traceback" in text, text


# rank 0's traceback when its peer froze: DDP's comm hook raised through torch's future, and
# pybind11 appended the Python stack ("At:" and one line a frame) after the error
WAITED_TB = """Traceback (most recent call last):
  File "/x/scaleprobe/train/engine.py", line 128, in train_step
    loss.backward()
RuntimeError: Got the following error when running the callback: RuntimeError: Got the \
following error when running the callback: RuntimeError: [/__w/pytorch/pytorch/third_party/\
gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 10000ms for recv operation to \
complete

At:
  /x/torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py(31): <lambda>


At:
  /x/scaleprobe/measure/comm/hook.py(101): done

"""


def test_the_rank_that_waited_for_a_frozen_peer_is_described_in_plain_words(tmp_path):
    """Rank 1 froze at step 11, rank 0 gave up at the collective timeout 10 s later. Bug
    caught: the error read "rank 0 then failed: .../measure/comm/hook.py(101): done", the last frame
    of the stack pybind11 appends (once for each callback the error passed through: DDP's
    default hook inside scaleprobe's timing hook), taken for rank 0's error line."""
    line = last_meaningful_line(WAITED_TB)
    assert line.startswith("RuntimeError: Got the following error") and "10000ms" in line
    assert last_meaningful_line("ValueError: f(3): x") == "ValueError: f(3): x"  # no "At:"
    beat_dir(tmp_path).mkdir(parents=True)
    write_error(tmp_path, 0, RankError(line))
    now = time.time()
    watch = RankWatch(str(tmp_path))
    watch.first = (0, now, True)
    watch.stalled = (1, Beat(rank=1, pid=1, state="training", step=11, step_wall=now - 11.0,
                               mark=3, progress_wall=now - 10.0, beat_wall=now - 10.0))
    got = watch.failure(SimpleNamespace(failures={}))
    assert got.rank == 1
    assert got.message == (
        "stopped making progress at step 11, 10.0 s before the job was stopped; rank 0 waited "
        "for it and gave up at the collective timeout (--timeout): RuntimeError: Timed out "
        "waiting 10000ms for recv operation to complete"), got.message
    # another error of the rank that waited is still said, as what it did next
    write_error(tmp_path, 0, RankError("RuntimeError: Connection closed by peer"))
    assert watch.failure(SimpleNamespace(failures={})).message.endswith(
        "; rank 0, which waited for it, then failed: RuntimeError: Connection closed by peer")


def test_a_peer_frozen_in_its_setup_is_named_only_where_the_failed_rank_waited(tmp_path):
    """Rank 2 froze before its first step; rank 0 gave up in the rendezvous at the timeout:
    rank 2 is named, with what rank 0 did after it. Where rank 0 failed on its own (an error
    that is no wait), its error comes first: a peer that had not begun training is no proof
    that rank 0 waited for it."""
    beat_dir(tmp_path).mkdir(parents=True)
    now = time.time()
    watch = RankWatch(str(tmp_path))
    watch.first = (0, now, True)
    watch.stalled = (2, Beat(rank=2, pid=2, state="setup", step=0, step_wall=None, mark=0,
                               progress_wall=now - 10.0, beat_wall=now - 9.9))
    waited = ("torch.distributed.DistStoreError: wait timeout after 10000ms, keys: "
              "/default_pg/0//cpu//0/2")
    write_error(tmp_path, 0, RankError(waited))
    got = watch.failure(SimpleNamespace(failures={}))
    assert got.rank == 2
    assert got.message == (
        "stopped making progress in its setup, before its first step (joining the process "
        "group, building its data and model), 10.0 s before the job was stopped; rank 0 "
        f"waited for it and gave up at the collective timeout (--timeout): {waited}")
    write_error(tmp_path, 0, RankError("ValueError: bad shape"))
    got = watch.failure(SimpleNamespace(failures={}))
    assert (got.rank, got.message) == (0, "ValueError: bad shape")


def test_a_rank_without_a_heartbeat_is_named_where_another_waited_for_it(tmp_path):
    """Ranks 0 and 2 of three wrote heartbeats and rank 0 gave up in the rendezvous: rank 1,
    which never wrote one, is named. Not where rank 0 failed on its own, not where the ranks
    of this host are not known (several hosts), and not where no rank has a heartbeat (a
    folder they could not be written to)."""
    now = time.time()
    waited = ("torch.distributed.DistStoreError: wait timeout after 10000ms, keys: "
              "/default_pg/0//cpu//0/1")
    for rank in (0, 2):
        _at(tmp_path, rank, 100 + rank, 0, 0.0, now - 12.0, state="setup")
    write_error(tmp_path, 0, RankError(waited))
    watch = RankWatch(str(tmp_path), ranks=range(3))
    watch.started_at = now - 12.5
    watch.first = (0, now, True)
    got = watch.failure(SimpleNamespace(failures={}))
    assert got.rank == 1
    assert got.message == (
        "never started: no heartbeat 12.5 s after the job began (its process never reached "
        "scaleprobe's code in the rank: stuck as it started, in an import, a lock held when "
        f"it was forked or a site hook); rank 0 waited for it and gave up at the collective "
        f"timeout (--timeout): {waited}")
    unknown = RankWatch(str(tmp_path))
    unknown.first = (0, now, True)
    assert unknown.failure(SimpleNamespace(failures={})).rank == 0
    write_error(tmp_path, 0, RankError("ValueError: bad shape"))
    assert watch.failure(SimpleNamespace(failures={})).rank == 0
    empty = RankWatch(str(tmp_path / "none"), ranks=range(3))
    empty.first = (0, now, True)
    assert empty._never_started() == []


def _at(run_dir, rank, pid, step, step_wall, progress_wall, stop=0, state="training"):
    beat_dir(run_dir).mkdir(parents=True, exist_ok=True)
    (beat_dir(run_dir) / f"rank-{rank}.hb").write_bytes(struct.pack(
        "<9d", rank, pid, STATES.index(state), step, step_wall, 3, progress_wall,
        max(step_wall, progress_wall), stop))


@pytest.mark.parametrize("hung", [False, True])
def test_a_stop_gives_slow_steps_their_time_and_still_ends_a_hang(tmp_path, monkeypatch, hung):
    """SIGTERM to rank 1 alone while steps take 10 s (gpt_tiny's took up to 11.8 s on the
    loaded 2-core machine). The ranks need the step under way and up to two more to stop
    together. Bug caught: a grace of a fixed 6 s whatever the step time. Now the grace is 4
    steps of the slowest seen (40 s here), never under 6 s: at 7 s nothing is killed; at 41 s
    the ranks are, and a rank that moved no more since the stop is named as hung, while ranks
    that still moved (slow, not hung) end as interrupted."""
    from scaleprobe.features.interrupt import Interrupted
    from scaleprobe.launch import rankwatch

    later = [0.0]
    real = time.time
    monkeypatch.setattr(rankwatch, "time", SimpleNamespace(time=lambda: real() + later[0]))
    strays = []
    monkeypatch.setattr(rankwatch, "kill_strays", lambda since, spare: strays.append(since))
    ranks = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
    try:
        t0 = real()
        watch = RankWatch(str(tmp_path))
        for r in (0, 1):
            _at(tmp_path, r, ranks[r].pid, 5, t0, t0)
        watch.poll()
        later[0] = 10.0
        for r in (0, 1):  # each ended a 10 s step; rank 1 was sent SIGTERM
            _at(tmp_path, r, ranks[r].pid, 6, t0 + 10, t0 + 10, stop=r * signal.SIGTERM)
        watch.poll()
        assert watch.slowest_step_s == pytest.approx(10.0)
        assert watch.stop_asked is not None and watch.stop_asked[1] == "SIGTERM to rank 1"
        assert watch.stop_grace_s() == pytest.approx(40.0)
        later[0] = 17.0  # past a fixed 6 s grace: slow steps are no hang
        watch.poll()
        assert watch.stop_overdue is None and [r.poll() for r in ranks] == [None, None]
        later[0] = 51.0  # past 4 steps of 10 s
        for r in (0, 1):  # rank 1 still moves; rank 0 too unless it hung at the stop
            moved = t0 + (10 if hung and r == 0 else 48)
            _at(tmp_path, r, ranks[r].pid, 6, t0 + 10, moved)
        watch.poll()
        assert [r.wait(timeout=10) for r in ranks] == [-9, -9] and strays
        watch.poll()  # the killed ranks seen as ended: the one named stays the hung one
        got = watch.overdue_ending()
        if hung:
            assert got.rank == 0 and got.message == (
                "did not stop within the 40.0 s given after SIGTERM to rank 1 (4 steps of "
                "the slowest, 10.0 s, at least 6 s): stopped making progress at step 6, "
                "40.0 s before the job was stopped"), got.message
        else:
            assert isinstance(got, Interrupted) and got.signame == "SIGTERM to rank 1"
    finally:
        for r in ranks:
            r.kill()


def test_the_grace_after_a_stop_is_never_under_its_floor(tmp_path):
    """Fast steps (10 ms) still get 6 s: ranks at the rendezvous, which no signal interrupts,
    are the ones that need it; a watch that saw no step gives the floor too."""
    watch = RankWatch(str(tmp_path))
    assert watch.stop_grace_s() == 6.0
    watch.slowest_step_s = 0.01
    assert watch.stop_grace_s() == 6.0
    assert RankWatch(str(tmp_path), stop_steps=11).stop_grace_s() == 6.0
