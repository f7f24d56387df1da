"""The step log (measure/steplog.py): what a launched rank writes as it trains, and what the
driver reads back when the rank returned no record."""

import json
import time

import pytest

from scaleprobe.measure.heartbeat import Heartbeat
from scaleprobe.measure.steplog import (
    StepHead,
    StepLog,
    discard,
    log_path,
    read_log,
    read_step_logs,
)
from scaleprobe.measure.timer import StepTimer


class Source:
    """Steps appended by hand, as a loop would."""

    def __init__(self, rank=1):
        self.times, self.walls = [], []
        self.info = {"rank": rank, "host": "h", "device": "cpu", "threads": 2,
                     "samples_per_step": 32, "warmup_steps": 3, "phases_unseen": {},
                     "mem": {"host_peak_rss": 100}}

    def add(self, t):
        self.times.append(t)
        self.walls.append(1000.0 + sum(self.times))

    def head(self):
        return StepHead.from_dict(self.info)

    def count(self, start):
        return len(self.times)

    def steps(self, a, b):
        return (self.times[a:b], {"data": [t / 4 for t in self.times[a:b]],
                                  "backward": [3 * t / 4 for t in self.times[a:b]]},
                self.walls[a:b])


def test_steps_written_beat_by_beat_read_back_as_one_rank_record(tmp_path):
    """Bugs caught: a step written twice or lost between flushes, a head written every beat,
    phases of a later chunk out of line with the steps, a torn last line failing the read."""
    src = Source()
    log = StepLog(tmp_path, 1, src)
    for t in (0.1, 0.2):
        src.add(t)
    log.flush()
    log.flush()  # nothing new: nothing written
    src.add(0.3)
    src.info["mem"] = {"host_peak_rss": 200}  # the head changed: written again
    log.flush()
    lines = log_path(tmp_path, 1).read_text().splitlines()
    assert [next(iter(json.loads(ln))) for ln in lines] == ["head", "t", "head", "t"]
    with log_path(tmp_path, 1).open("a") as fh:
        fh.write('{"t": [9.9], "p": {"da')  # killed mid-write
    rec = read_log(log_path(tmp_path, 1))
    assert rec.rank == 1 and rec.steps_timed == 3 and rec.steps_done == 6
    assert rec.step_times_s == [0.1, 0.2, 0.3]
    assert rec.phase_times_s["data"] == pytest.approx([0.025, 0.05, 0.075])
    assert rec.window_s == pytest.approx(0.6)
    assert rec.clock_window == pytest.approx([1000.0, 1000.6])
    assert rec.mem.host_peak_rss == 200 and rec.samples_per_step == 32
    assert rec.indices == []  # not logged: no audit of a partial run


def test_ranks_are_read_in_rank_order_and_a_rank_without_steps_is_left_out(tmp_path):
    for rank, steps in ((2, 2), (0, 1), (1, 0)):
        src = Source(rank)
        for _ in range(steps):
            src.add(0.1)
        StepLog(tmp_path, rank, src).flush()
    assert [r.rank for r in read_step_logs(tmp_path)] == [0, 2]
    discard(tmp_path)
    assert read_step_logs(tmp_path) == []


def test_cpu_timer_steps_are_read_without_waiting_with_their_wall_clock():
    """StepTimer.read: the closed steps only, phases adding up to each step, the wall clock
    of each step's end (bug caught: the open step read, or wall clocks from perf_counter)."""
    timer = StepTimer("cpu")
    for _ in range(3):
        timer.start()
        timer.mark("data")
        time.sleep(0.002)
        timer.mark("forward")
    assert timer.readable(0) == 2  # the third step is still open
    times, phases, walls = timer.read(0, 2)
    assert len(times) == 2 and all(t >= 0.002 for t in times)
    assert [sum(p[i] for p in phases.values()) for i in range(2)] == pytest.approx(times)
    assert all(abs(w - time.time()) < 5 for w in walls)
    assert timer.read(1, 2)[0] == times[1:]


def test_the_heartbeat_writes_the_log_at_each_beat_and_at_its_end(tmp_path):
    src = Source(0)
    beat = Heartbeat(tmp_path, 0, interval_s=0.05).start()
    beat.keep_steps(src)
    src.add(0.1)
    deadline = time.time() + 5
    while time.time() < deadline and not read_step_logs(tmp_path):
        time.sleep(0.05)
    assert [r.steps_timed for r in read_step_logs(tmp_path)] == [1]  # written by a beat
    src.add(0.2)
    beat.finish("failed")  # the last steps, written as the rank ends
    assert [r.steps_timed for r in read_step_logs(tmp_path)] == [2]
