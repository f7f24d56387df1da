import time

import pytest

from scaleprobe.core.rank_record import RankRecord
from scaleprobe.core.run_metrics import StepTime
from scaleprobe.core.run_parts import RankSummary
from scaleprobe.measure import stats
from scaleprobe.measure.aggregate import breakdown, epoch_time, straggler
from scaleprobe.measure.audit import audit, expected_dropped
from scaleprobe.measure.timer import PHASES, StepTimer


def test_quantiles_and_summary():
    xs = [float(i) for i in range(1, 101)]
    s = stats.summarize(xs)
    assert s["median"] == pytest.approx(50.5)
    assert s["p95"] == pytest.approx(95.05)
    assert s["n"] == 100 and s["min"] == 1 and s["max"] == 100
    assert stats.summarize([]) is None


def test_median_ci_narrows_with_more_samples_and_stability_rule():
    import random

    rng = random.Random(0)
    few = [1 + rng.gauss(0, 0.05) for _ in range(10)]
    many = [1 + rng.gauss(0, 0.05) for _ in range(400)]
    assert stats.rel_ci_halfwidth(many) < stats.rel_ci_halfwidth(few)
    assert stats.is_stable(many, 0.02, 10)
    assert not stats.is_stable([1.0, 2.0, 3.0, 1.0, 2.5], 0.02, 3)
    assert not stats.is_stable(many[:5], 0.02, 10)  # below the minimum


def test_median_ci_is_scipy_quantile_tests_interval():
    """Bug caught: an order statistic off by one, or a normal approximation (the interval this
    replaced: at 8 steps it claimed 95% for (x2, x7), which covers the median 93% of the
    time). The interval must be the one scipy's exact binomial test gives, at every n."""
    import random

    from scipy.stats import quantile_test

    rng = random.Random(1)
    for n in range(6, 161, 7):  # 6, 13, ..., 160
        xs = [rng.lognormvariate(0, 0.3) for _ in range(n)]
        ci = quantile_test(xs, p=0.5).confidence_interval(0.95)
        assert stats.median_ci(xs) == (ci.low, ci.high), n


def test_median_ci_of_too_few_steps_is_the_whole_range():
    """Bug caught: scipy gives nan there, and a nan half-width would reach result.json and
    the comparisons. Five steps cannot give a 95% interval between order statistics: the
    range, the widest there is, stands in."""
    xs = [3.0, 1.0, 5.0, 2.0, 4.0]
    assert stats.median_ci(xs) == (1.0, 5.0)
    assert stats.rel_ci_halfwidth(xs) == pytest.approx(2 / 3)


def test_timer_phases_add_up_to_step():
    t = StepTimer("cpu")
    for _ in range(4):
        t.start()
        for p in ("data", "h2d", "forward", "backward", "optimizer"):
            time.sleep(0.002)
            t.mark(p)
    t.close()
    steps = t.step_times()
    phases = t.phase_times()
    assert len(steps) == 4 and set(phases) == set(PHASES)
    for i, s in enumerate(steps):
        assert sum(phases[p][i] for p in PHASES) == pytest.approx(s, rel=1e-9)
        assert phases["forward"][i] >= 0.0019
    assert all(v == 0.0 for v in phases["comm"])


def test_breakdown_is_what_each_phase_measured():
    """The comm phase is the step's own measurement, laid over the median step like every
    phase; nothing is carved out of backward afterwards (bug caught: a calibration's
    difference of two medians moved into comm left backward at 17 ms against 365 ms
    measured)."""
    pt = {"data": [1.0, 1.0], "h2d": [0, 0], "forward": [2, 2], "backward": [2.5, 2.5],
          "comm": [1.5, 1.5], "optimizer": [1, 1]}
    bd = breakdown(pt, [8.0, 8.0])
    assert bd["backward"] == 2.5 and bd["comm"] == 1.5 and sum(bd.values()) == 8.0


def test_epoch_time_measured_vs_projected():
    walls = RankRecord(epoch_wall_s=[3.0, 2.0, 2.2], epochs_complete=3)
    assert epoch_time(walls, 0.1, 10) == (2.1, False)
    assert epoch_time(RankRecord(), 0.1, 10) == (pytest.approx(1.0), True)


def test_straggler_line():
    ranks = [RankSummary(rank=r, step_time_s=StepTime(median=t), steps_done=n)
             for r, t, n in ((0, 0.1, 100), (1, 0.1, 100), (2, 0.2, 4))]
    s = straggler(ranks)
    assert s["slowest_rank"] == 2 and s["slowest_vs_median"] == pytest.approx(2.0)
    assert "2:4" in s["line"]


def _sharded(n, world, batch, epochs, same_batch=False, same_order=False):
    import random

    out = [[] for _ in range(world)]
    for e in range(epochs):
        order = list(range(n))
        random.Random(0 if same_order else e).shuffle(order)
        per = n // world
        usable = (per // batch) * batch
        for r in range(world):
            rr = 0 if same_batch else r
            out[r].append(order[rr * per: rr * per + usable])
    return out


def test_audit_passes_a_correct_sharding():
    a = audit(_sharded(100, 2, 8, 3), 100, 8, 3)
    assert a["ok"] and a["duplicate_samples"] == 0 and a["missing_samples"] == 0
    assert a["same_order_across_epochs"] is False


def test_audit_catches_every_rank_on_the_same_batch():
    a = audit(_sharded(100, 2, 8, 2, same_batch=True), 100, 8, 2)
    assert not a["ok"] and a["duplicate_samples"] == 2 * 48
    assert a["missing_samples"] > 0 and "more than one rank" in a["detail"]


def test_audit_catches_a_forgotten_set_epoch():
    a = audit(_sharded(100, 2, 8, 2, same_order=True), 100, 8, 2)
    assert not a["ok"] and a["same_order_across_epochs"] is True
    assert "set_epoch" in a["detail"]


def test_expected_dropped_matches_drop_last():
    assert expected_dropped(100, 2, 8) == 100 - 2 * 48
    assert expected_dropped(64, 2, 8) == 0


def test_audit_unique_fraction():
    """Catches a headline that counts two ranks reading the same batches as twice the data."""
    assert audit(_sharded(100, 2, 8, 2), 100, 8, 2)["unique_fraction"] == 1.0
    same = audit(_sharded(100, 2, 8, 2, same_batch=True), 100, 8, 2)
    assert same["unique_fraction"] == pytest.approx(0.5)


def test_audit_partial_overlap_across_ranks():
    """Rank 1 reads 4 of rank 0's samples: 4 duplicates, named as across ranks."""
    r0 = [list(range(0, 16))]
    r1 = [list(range(12, 28))]
    a = audit([r0, r1], 28, 8, 0)
    assert not a["ok"] and a["duplicate_samples"] == 4
    assert "4 samples were consumed by more than one rank" in a["detail"]
    assert "within one rank" not in a["detail"]
    assert a["unique_fraction"] == pytest.approx(28 / 32)


def test_audit_sample_repeated_within_one_rank_is_a_duplicate_not_missing():
    """A sampler that hands one rank the same sample twice: reported as a repeat within the
    rank (it used to read as 'missing' with 0 duplicates)."""
    r0 = [[0, 1, 2, 3, 4, 5, 6, 6]]
    r1 = [[8, 9, 10, 11, 12, 13, 14, 15]]
    a = audit([r0, r1], 16, 8, 0)  # no complete epoch: coverage not checked
    assert not a["ok"] and a["duplicate_samples"] == 1 and a["missing_samples"] == 0
    assert "1 repeated consumptions within one rank" in a["detail"]


def test_audit_repeat_in_a_complete_epoch_is_both_a_duplicate_and_a_missing_sample():
    """In a complete epoch a sample read twice by one rank takes the place of one never read:
    the audit must name both (catches a repeat counted as coverage, or the missing sample
    excused by drop_last when the epoch divides evenly and nothing was dropped)."""
    r0 = [[0, 1, 2, 3, 4, 5, 6, 6]]  # 7 is never read
    r1 = [[8, 9, 10, 11, 12, 13, 14, 15]]
    a = audit([r0, r1], 16, 8, 1)
    assert not a["ok"] and a["duplicate_samples"] == 1 and a["missing_samples"] == 1
    assert "1 repeated consumptions within one rank" in a["detail"]
    assert "1 samples never seen (drop_last accounts for 0)" in a["detail"]
    assert a["unique_fraction"] == pytest.approx(15 / 16)


def test_median_ci_order_statistics_are_scipys_binomial_quantiles_at_every_count():
    """Bug caught: the exact integer tails off by one at a boundary (``>=`` against ``>``), or
    the carried binomial coefficient drifting: the indices must be scipy's ``binom.ppf`` and
    ``binom.isf`` at every step count up to the exact path's limit and beyond it."""
    from scipy.stats import binom

    stats._order_statistics.cache_clear()
    for n in [*range(1, 700), 1001, 2048, stats.EXACT_MAX_N, stats.EXACT_MAX_N + 1]:
        for alpha in (0.025, 0.05, 0.005):
            expect = int(binom.ppf(alpha, n, 0.5)) - 1, int(binom.isf(alpha, n, 0.5))
            assert stats._order_statistics(n, alpha) == expect, (n, alpha)


def test_t_quantile_is_scipys():
    from scipy.stats import t

    from scaleprobe.core.metrics import t_quantile

    for df in (1, 2, 3, 7, 30):
        assert t_quantile(df) == pytest.approx(float(t.ppf(0.975, df)), rel=1e-12)
