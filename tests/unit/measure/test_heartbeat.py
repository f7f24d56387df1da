"""Heartbeats (``measure/heartbeat.py``): what a rank writes, and which rank they name as the
one that stopped making progress."""

import multiprocessing as mp
import time
from dataclasses import replace

from scaleprobe.measure.heartbeat import (
    FROZEN_AFTER_S,
    SETUP_BASE,
    SETUP_MARKS,
    Beat,
    Heartbeat,
    find_stalled,
    read_beats,
    stall_text,
)


def _beat(rank, step, mark, beat_age, state="training", now=1000.0, moved_age=None):
    return Beat(rank=rank, pid=100 + rank, state=state, step=step, mark=mark,
                step_wall=now - 1,
                progress_wall=now - (moved_age if moved_age is not None else beat_age),
                beat_wall=now - beat_age)


def test_the_file_holds_the_position_and_the_state(tmp_path):
    """Bug caught: a position written late (a step behind) or not at all, so the launcher
    named the wrong step or saw no rank."""
    hb = Heartbeat(tmp_path, 3).start()
    try:
        hb.set_state("training")
        hb.step_done(7)
        hb.passed("forward")
        b = read_beats(tmp_path)[3]
        assert (b.state, b.step, b.mark) == ("training", 7, 3)
        assert abs(b.progress_wall - time.time()) < 5
    finally:
        hb.finish("done")
    assert read_beats(tmp_path)[3].state == "done"


def _end_steps_until(run_dir, stop):
    hb = Heartbeat(run_dir, 0, interval_s=0.001).start()
    hb.busy = lambda: True  # the beat thread moves progress_wall too
    hb.set_state("training")
    step = 0
    while not stop.is_set():
        step += 1
        hb.step_done(step)
        hb.passed("forward")


def test_a_reader_never_sees_a_position_without_its_time(tmp_path):
    """Bug caught: each store zeroed its span before writing it (``struct.pack_into``), so
    the launcher's watch, reading while a rank ended steps, saw one read in 15 with a step and
    no time: the job was killed as "stalled: no progress for 1796014666.2 s at step 6"."""
    stop = mp.get_context("spawn").Event()
    writer = mp.get_context("spawn").Process(target=_end_steps_until, args=(tmp_path, stop))
    writer.start()
    try:
        deadline = time.time() + 30
        while time.time() < deadline and read_beats(tmp_path).get(0, Beat(
                0, 0, "setup", 0, None, 0, 0.0, 0.0)).step < 100:
            time.sleep(0.01)
        torn, reads, t0 = 0, 0, time.time()
        while time.time() - t0 < 1.0:
            b = read_beats(tmp_path)[0]
            reads += 1
            torn += b.progress_wall == 0 or b.beat_wall == 0 or b.state != "training"
        assert reads > 1000 and torn == 0, f"{torn} of {reads} reads torn"
    finally:
        stop.set()
        writer.join(timeout=10)


def test_a_rank_that_stopped_beating_is_named_not_the_one_that_waited():
    """SIGSTOP: both ranks finished step 7; rank 0 waits in backward and beats, rank 1 froze
    in forward. Bug caught: naming rank 0, the one whose collective timed out."""
    beats = {0: _beat(0, 7, 3, beat_age=0.2, state="failed", moved_age=10),
             1: _beat(1, 7, 3, beat_age=FROZEN_AFTER_S + 7)}
    assert find_stalled(beats, 1000.0) == 1


def test_a_rank_frozen_before_its_first_step_is_named_and_said_to_be_in_its_setup():
    """SIGSTOP of a rank before it joined the process group (or while it builds its data):
    the others wait in the rendezvous, beating, and one gives up at the timeout. Bug caught:
    only ranks in training were looked at, so the job's error named the rank that waited
    ("DistStoreError: wait timeout") and not the one that never came."""
    beats = {0: _beat(0, 0, 0, beat_age=0.3, state="failed"),
             1: _beat(1, 0, 0, beat_age=0.2, state="setup"),
             2: _beat(2, 0, 0, beat_age=FROZEN_AFTER_S + 6, state="setup")}
    assert find_stalled(beats, 1000.0) == 2
    assert stall_text(beats[2], 1000.0) == (
        "stopped making progress in its setup, before its first step (joining the process "
        "group, building its data and model), 9.0 s before the job was stopped")
    # a frozen parameter server is named too, where it is said
    server = {0: _beat(0, 0, 0, beat_age=FROZEN_AFTER_S + 1, state="serving"),
              1: _beat(1, 3, 2, beat_age=0.1, state="failed")}
    assert find_stalled(server, 1000.0) == 0
    assert stall_text(server[0], 1000.0).startswith(
        "stopped making progress while serving the workers (a parameter server), 4.0 s ")
    # every rank in its setup and beating (one still importing, slow, not stopped): no name
    slow = {0: _beat(0, 0, 0, 0.1, state="failed"), 1: _beat(1, 0, 0, 0.4, state="setup")}
    assert find_stalled(slow, 1000.0) is None
    # a rank in training is still placed by its step
    assert stall_text(_beat(1, 7, 3, 2.0), 1000.0).startswith("stopped making progress at "
                                                              "step 7, 2.0 s ")


def test_a_live_rank_behind_the_others_is_named():
    """A rank stuck in its own code (an endless loop: it keeps beating) while the other waits
    in backward: the one furthest behind is named."""
    beats = {0: _beat(0, 7, 4, beat_age=0.1, state="failed"), 1: _beat(1, 7, 2, beat_age=0.1)}
    assert find_stalled(beats, 1000.0) == 1


def test_no_rank_is_named_when_the_beats_cannot_tell():
    """Both at the same place and beating, one rank alone, or the only laggard a parameter
    server (it has no steps): None, rather than a guess."""
    same = {0: _beat(0, 7, 3, 0.1), 1: _beat(1, 7, 3, 0.1)}
    assert find_stalled(same, 1000.0) is None
    assert find_stalled({0: _beat(0, 7, 3, 50)}, 1000.0) is None
    server = {0: _beat(0, 0, 0, 0.1, state="serving"), 1: _beat(1, 3, 2, 0.1, "failed"),
              2: _beat(2, 3, 5, 0.1)}
    # the failed worker is the one behind: no other rank stalled (and never the server)
    assert find_stalled(server, 1000.0) is None


def test_the_stall_text_counts_from_the_last_move():
    b = _beat(1, 7, 3, beat_age=12, moved_age=12.3)
    assert stall_text(b, 1000.0) == ("stopped making progress at step 7, 12.3 s before the job "
                                     "was stopped")


def _write_beat(run_dir, rank, pid, state, beat_wall):
    """A rank's heartbeat file as the rank writes it (eight float64 fields)."""
    import struct

    from scaleprobe.measure.heartbeat import STATES, beat_dir

    beat_dir(run_dir).mkdir(parents=True, exist_ok=True)
    (beat_dir(run_dir) / f"rank-{rank}.hb").write_bytes(struct.pack(
        "<8d", rank, pid, STATES.index(state), 9, beat_wall, 3, beat_wall, beat_wall))


def _killed_by_9(now):
    """A failure as the elastic launcher lists it: its rank was killed by SIGKILL."""
    from types import SimpleNamespace

    return SimpleNamespace(exitcode=-9, timestamp=int(now), message="", error_file_data=None)


def test_a_rank_gone_before_the_watch_first_saw_it_is_the_one_that_died(tmp_path):
    """SIGKILL of rank 0, whose process the launcher reaped before the watch's first look at
    it (a loaded machine), while rank 1 then raised on the closed connection. Bug caught: the
    dead rank skipped for good (its pid no longer opens), so the job blamed rank 1."""
    import subprocess

    from scaleprobe.launch.rankwatch import RankWatch

    gone = subprocess.Popen(["true"])
    gone.wait()  # exited and reaped: its pid opens no process
    waiting = subprocess.Popen(["sleep", "60"])  # rank 1, still exiting
    try:
        now = time.time()
        _write_beat(tmp_path, 0, gone.pid, "training", now - 1.0)
        _write_beat(tmp_path, 1, waiting.pid, "failed", now - 0.5)
        watch = RankWatch(str(tmp_path))
        watch.poll()
        assert watch.first is not None and watch.first[0] == 0, watch.first
        assert watch.first[2] is False  # killed, not raised
        watch.kill_all()  # the rank without a process is skipped; the live one is killed
        assert waiting.wait(timeout=10) == -9
    finally:
        waiting.kill()


def test_a_rank_the_launcher_stopped_is_not_blamed_for_the_one_it_stopped_for(tmp_path):
    """SIGKILL of rank 1 just after its heartbeat thread beat; rank 0, waiting for it, last beat
    0.3 s earlier and was then stopped by the launcher, so by last beats rank 0 looks first.
    The launcher lists only rank 1 (killed by signal 9). Bug caught (seen in CI): the job
    blamed rank 0 with "exited"."""
    import subprocess
    from types import SimpleNamespace

    from scaleprobe.launch.rankwatch import RankWatch

    procs = [subprocess.Popen(["true"]) for _ in range(2)]
    for p in procs:
        p.wait()
    now = time.time()
    _write_beat(tmp_path, 0, procs[0].pid, "training", now - 0.4)
    _write_beat(tmp_path, 1, procs[1].pid, "training", now - 0.1)
    watch = RankWatch(str(tmp_path))
    watch.poll()
    assert watch.first is not None and watch.first[0] == 0  # what the beats alone say
    fail = _killed_by_9(now)
    err = SimpleNamespace(failures={1: fail})
    got = watch.failure(err)
    assert (got.rank, got.message) == (1, "killed by signal 9"), got
    # a rank the launcher does list keeps the watch's order
    err_both = SimpleNamespace(failures={0: fail, 1: fail})
    assert watch.failure(err_both).rank == 0


def test_a_rank_the_launcher_has_not_seen_end_is_named_with_how_it_died(tmp_path):
    """SIGKILL of rank 1, whose forked loader worker still holds the pipe the launcher waits
    on: the launcher has not seen rank 1 end, and lists only rank 0, which this watch killed
    a second later. Bugs caught (both seen): the job blamed rank 0 ("killed by signal 9", the
    watch's own kill), or named rank 1 with "exited" and no signal."""
    import signal
    import subprocess
    from types import SimpleNamespace

    from scaleprobe.launch.rankwatch import RankWatch

    dead = subprocess.Popen(["sleep", "60"])
    dead.send_signal(signal.SIGKILL)  # not waited for: ended, not yet collected (a zombie)
    waiting = subprocess.Popen(["sleep", "60"])  # rank 0, in a collective
    try:
        time.sleep(0.3)
        now = time.time()
        _write_beat(tmp_path, 0, waiting.pid, "training", now - 0.05)
        _write_beat(tmp_path, 1, dead.pid, "training", now - 0.3)
        watch = RankWatch(str(tmp_path))
        watch.poll()
        assert watch.first is not None and watch.first[0] == 1, watch.first
        assert watch.exits.get(1) == "killed by signal 9", watch.exits
        watch.kill_all()
        assert waiting.wait(timeout=10) == -9 and watch.killed == {0}
        fail = _killed_by_9(now)
        got = watch.failure(SimpleNamespace(failures={0: fail}))
        assert (got.rank, got.message) == (1, "killed by signal 9"), got
        assert dead.wait(timeout=5) == -9  # the watch read it without collecting it
    finally:
        waiting.kill()
        dead.kill()


def test_a_compiling_rank_moves_at_every_beat_without_a_step(tmp_path):
    """torch.compile's warm-up (minutes for a large model) passes no mark. Bug caught: a
    wrapped script killed as "stalled: no progress for 10.0 s at step 0" while inductor
    compiled; now the beat moves the position's time while ``busy`` says so."""
    compiling = [True]
    hb = Heartbeat(tmp_path, 0, interval_s=0.02).start()
    try:
        hb.busy = lambda: compiling[0]
        hb.passed("forward")
        t0 = read_beats(tmp_path)[0].progress_wall
        time.sleep(0.2)
        moved = read_beats(tmp_path)[0]
        assert moved.progress_wall > t0 + 0.1 and moved.mark == 3
        compiling[0] = False
        time.sleep(0.05)
        t1 = read_beats(tmp_path)[0].progress_wall
        time.sleep(0.2)
        assert read_beats(tmp_path)[0].progress_wall == t1  # done compiling: still
    finally:
        hb.finish("done")


def test_an_old_eight_field_file_is_still_read(tmp_path):
    import struct

    from scaleprobe.measure.heartbeat import STATES, beat_dir

    beat_dir(tmp_path).mkdir(parents=True)
    (beat_dir(tmp_path) / "rank-2.hb").write_bytes(struct.pack(
        "<8d", 2, 99, STATES.index("training"), 4, 1.0, 3, 1.0, 1.0))
    b = read_beats(tmp_path)[2]
    assert (b.pid, b.step, b.stop) == (99, 4, 0)


def test_the_stop_a_rank_was_sent_is_named_for_a_host_without_rank_0():
    """Two hosts; rank 1, on host 1, was sent SIGTERM. Bug caught: host 1's launcher got no
    record back (rank 0's hand-off is on host 0) and recorded its run "ok" with 0 steps, exit
    0. Its heartbeats name the signal: the run is interrupted, its steps read from the logs."""
    from scaleprobe.measure.heartbeat import stop_named

    beats = {r: _beat(r, 4, 0, 0.1) for r in (2, 3)}
    assert stop_named(beats) is None
    beats[3] = replace(beats[3], stop=15)
    assert stop_named(beats) == "SIGTERM to rank 3"
    beats[2] = replace(beats[2], stop=15)  # every rank was sent it: the launcher's signal
    assert stop_named(beats) == "SIGTERM"



def _setup(rank, place, beat_age=0.2, state="setup", moved_age=12.0):
    """A rank whose setup got to ``place`` (of SETUP_MARKS) ``moved_age`` s ago, beating."""
    return _beat(rank, 0, SETUP_BASE + SETUP_MARKS.index(place), beat_age, state=state,
                 moved_age=moved_age)


def test_a_rank_beating_but_behind_in_its_setup_is_named_where_it_is():
    """Rank 1's model builder waits forever (a lock, a download): its heartbeat beats, so it
    is not frozen, but its setup is still at "data" (building its model) while rank 0 built
    its model and failed waiting in DDP's first broadcast. Bug caught: the job named rank 0
    and its collective timeout."""
    beats = {0: _setup(0, "model", state="failed", moved_age=10.0), 1: _setup(1, "data")}
    assert find_stalled(beats, 1000.0) == 1
    assert stall_text(beats[1], 1000.0) == (
        "stopped making progress in its setup, building its model, before its first step, "
        "12.0 s before the job was stopped")
    # a rank past its setup (training) counts as further than one still in it
    beats = {0: _beat(0, 3, 2, 0.1), 1: _setup(1, "joined"), 2: _beat(2, 3, 2, 0.1)}
    assert find_stalled(beats, 1000.0) == 1
    # every rank at the same place, or the one behind not live (it failed): no name
    same = {0: _setup(0, "data"), 1: _setup(1, "data")}
    assert find_stalled(same, 1000.0) is None
    failed_behind = {0: _setup(0, "joined", state="failed"), 1: _setup(1, "wrapped")}
    assert find_stalled(failed_behind, 1000.0) is None
    # two ranks behind together: which one waits is not told
    two = {0: _setup(0, "joined"), 1: _setup(1, "joined"), 2: _setup(2, "model")}
    assert find_stalled(two, 1000.0) is None


def test_setup_places_are_not_a_steps_progress(tmp_path):
    """A setup's places move the rank's time but are not steps' phases: a rank in a long
    setup is judged by its CPU (``moved`` false), and a wrapped script's ranks, which pass no
    place, read as at the start."""
    hb = Heartbeat(tmp_path, 0).start()
    try:
        hb.setup_passed("joined")
        hb.setup_passed("data")
        b = read_beats(tmp_path)[0]
        assert b.setup_at == SETUP_MARKS.index("data") and not b.moved
        hb.set_state("training")
        hb.passed("forward")  # the first step's phases replace the setup's place
        b = read_beats(tmp_path)[0]
        assert b.moved and b.setup_at == len(SETUP_MARKS)
    finally:
        hb.finish("done")
    script = _beat(0, 0, 0, 0.1, state="setup")
    assert script.setup_at == 0 and not script.moved


def test_a_wrapped_scripts_ranks_are_placed_by_their_setup_before_their_first_phase():
    """A wrapped script's ranks are in state "training" from its first line and pass the
    setup places wrap sees (joining, joined, model, wrapped). Every setup place comes before
    any phase of the first step (a rank in its first forward is further than one still
    building its model: FSDP has no collective in its wrapper), and a rank that passed none
    is at the start."""
    base = SETUP_BASE
    start = _beat(0, 0, 0, 0.1)
    joining = _beat(1, 0, base + SETUP_MARKS.index("joining"), 0.1)
    model = _beat(2, 0, base + SETUP_MARKS.index("model"), 0.1)
    forward = _beat(3, 0, 3, 0.1)
    stepped = _beat(4, 1, 0, 0.1)
    order = [b.place for b in (start, joining, model, forward, stepped)]
    assert order == sorted(order) and len(set(order)) == 5
    # rank 1 never got to the rendezvous; rank 0 waits in it: rank 1 is named, with where
    beats = {0: _beat(0, 0, base + SETUP_MARKS.index("joining"), 0.1), 1: _beat(1, 0, 0, 0.2)}
    assert find_stalled(beats, 1000.0) == 1
    fsdp = {0: _beat(0, 0, 3, 0.1), 1: _beat(1, 0, base + SETUP_MARKS.index("joined"), 0.1)}
    assert find_stalled(fsdp, 1000.0) == 1
    assert stall_text(fsdp[1], 1000.0).startswith(
        "stopped making progress in its setup, after joining the process group (building its "
        "data and model), before its first step, ")
