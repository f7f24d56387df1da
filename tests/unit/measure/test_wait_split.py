"""Time blocked on communication moves out of the phase it fell in, into comm, and the phases
still add up to the step exactly (measure/timer.py: StepTimer.move, WaitSplit)."""

from __future__ import annotations

import pytest

from scaleprobe.measure import timer as T
from scaleprobe.strategies.fsdp_comm import WaitClock

pytestmark = pytest.mark.timeout(30)


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    monkeypatch.setattr(T.time, "perf_counter", c)
    return c


def test_waits_move_from_forward_and_backward_into_comm(clock):
    timer, waits = T.StepTimer("cpu"), WaitClock(clock=clock)
    tm = T.WaitSplit(timer, waits)
    for _ in range(2):
        tm.start()
        clock.t += 0.010
        tm.mark("data")
        clock.t += 0.050  # forward: 20 ms of it inside all-gathers
        waits.add("all_gather", 0.020)
        tm.mark("forward")
        clock.t += 0.080  # backward: 30 ms gathers + reduce-scatters
        waits.add("all_gather", 0.010)
        waits.add("reduce_scatter", 0.020)
        tm.mark("backward")
        clock.t += 0.005
        tm.mark("optimizer")
    waits.add("all_gather", 0.5)  # between steps (an evaluation): belongs to no step
    tm.start()
    timer.discard_open()
    ph = timer.phase_times()
    assert ph["forward"] == pytest.approx([0.030] * 2)
    assert ph["backward"] == pytest.approx([0.050] * 2)
    assert ph["comm"] == pytest.approx([0.050] * 2)
    steps = timer.step_times()
    for i, st in enumerate(steps):  # the phases add up to the step exactly
        assert sum(v[i] for v in ph.values()) == pytest.approx(st)
    assert steps == pytest.approx([0.145] * 2)
    assert waits.step_calls == {"all_gather": 2, "reduce_scatter": 1}
    # each kind's seconds per step, the wait between steps in neither (the step model
    # prices FSDP's all-gathers and reduce-scatters apart: gloo runs them at other rates)
    assert waits.seconds_per_step() == pytest.approx({"all_gather": 0.030,
                                                      "reduce_scatter": 0.020})


def test_a_move_never_takes_more_than_the_phase_lasted(clock):
    """A wait clocked across a mark (it started before the phase) cannot make a phase
    negative: at most what the phase lasted moves, so the step still adds up."""
    timer = T.StepTimer("cpu")
    timer.start()
    clock.t += 0.004
    timer.mark("forward")
    timer.move("forward", "comm", 0.010)
    clock.t += 0.002
    timer.close()
    ph = timer.phase_times()
    assert ph["forward"] == [0.0] and ph["comm"] == pytest.approx([0.004])
    assert sum(v[0] for v in ph.values()) == pytest.approx(timer.step_times()[0])
