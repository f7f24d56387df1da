"""Why the built-in loop's timed window ends (train/stopping.py), and the progress bar's
total under --steps auto (measure/progress.py)."""

import time
from types import SimpleNamespace

import pytest

from scaleprobe.config import runconfig as C
from scaleprobe.measure.progress import projected_total
from scaleprobe.train.stopping import stop_reason


class Timer:
    def __init__(self, times):
        self.times = times

    def ready_count(self):
        return len(self.times)

    def step_times(self, upto=None):
        return self.times[:upto]


def _parts(any_true=None, distributed=False, **over):
    cfg = C.build({"steps": "auto", "min_steps": 10, "max_steps": 100, "max_seconds": 30.0,
                   **over})
    strategy = SimpleNamespace(distributed=distributed,
                               any_true=any_true or (lambda flag: flag))
    return SimpleNamespace(cfg=cfg, strategy=strategy)


def _st(timed, elapsed_s):
    return SimpleNamespace(timed=timed, window_t0=time.perf_counter() - elapsed_s)


NOISY = [0.1, 0.2, 0.12, 0.3, 0.11, 0.25, 0.09, 0.4, 0.15, 0.2] * 2
STEADY = [0.1] * 20


@pytest.mark.parametrize("timed, elapsed, times, want", [
    (20, 1.0, STEADY, "stable"),
    (20, 1.0, NOISY, None),  # not stable, no cap reached: go on
    (20, 31.0, NOISY, "max-seconds"),
    (100, 1.0, NOISY, "max-steps"),
    (5, 31.0, NOISY, None),  # never before --min-steps
    (100, 31.0, STEADY, "stable"),  # at a cap, but the median was stable: said so
    (21, 1.0, STEADY, None),  # stability is tested every 5 steps
])
def test_each_cap_and_the_stable_median_is_named(timed, elapsed, times, want):
    """Bug caught: a window ended by --max-seconds with an unstable median recorded no
    reason at all, so nothing said the headline was not stable."""
    assert stop_reason(_parts(), _st(timed, elapsed), Timer(times)) == want


def test_a_stop_another_rank_decided_is_named_as_its():
    p = _parts(any_true=lambda flag: True, distributed=True)
    assert stop_reason(p, _st(20, 1.0), Timer(NOISY)) == "peer"
    assert stop_reason(p, _st(21, 1.0), Timer(NOISY)) is None  # ranks agree every 5 steps


def test_fixed_steps_and_epochs():
    assert stop_reason(_parts(steps=7), _st(7, 0.1), Timer(STEADY)) == "steps"
    assert stop_reason(_parts(steps=7), _st(6, 0.1), Timer(STEADY)) is None
    assert stop_reason(_parts(steps=None, epochs=1), _st(99, 99), Timer(STEADY)) is None


def test_progress_total_follows_max_seconds():
    """--steps auto, --max-steps 200, --max-seconds 30: 50 timed steps in 10 s reach 150 by
    the cap, so the bar's total is 5 + 150, not 5 + 200 (bug caught: "11:15 left" one step
    before the run ended at --max-seconds)."""
    train = C.build({"steps": "auto", "max_steps": 200, "max_seconds": 30.0,
                     "warmup_steps": 5}).train
    now = 1000.0
    st = SimpleNamespace(timed=50, step=55, window_t0=now - 10.0)
    assert projected_total(train, st, now, now - 12.0) == 5 + 150
    fast = SimpleNamespace(timed=50, step=55, window_t0=now - 1.0)
    assert projected_total(train, fast, now, now - 2.0) == 5 + 200  # --max-steps first
    late = SimpleNamespace(timed=50, step=55, window_t0=now - 31.0)
    assert projected_total(train, late, now, now - 33.0) == 5 + 50  # at the cap: now
    warm = SimpleNamespace(timed=0, step=4, window_t0=None)
    assert projected_total(train, warm, now, now - 4.0) == 5 + 30  # 1 s a warm-up step
