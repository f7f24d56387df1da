"""The one definition of each derived figure, and the repeat intervals verdicts rest on."""

import math

import pytest

from scaleprobe.core import claim as CL
from scaleprobe.core import metrics as M


def test_figures_and_their_missing_cases():
    assert M.speedup(300.0, 200.0) == pytest.approx(1.5)
    assert M.speedup(None, 200.0) is None and M.speedup(300.0, 0.0) is None
    assert M.efficiency(1.5, 2) == pytest.approx(0.75)
    assert M.growth(150.0, 100.0) == pytest.approx(0.5)
    assert M.growth(1.0, 0.0) is None
    assert M.slowdown(100.0, 80.0) == pytest.approx(1.25)
    assert M.compute_s({"data": 5.0, "h2d": 1.0, "forward": 2.0, "backward": 3.0,
                        "optimizer": 0.5, "comm": 9.0}) == pytest.approx(6.5)
    assert M.compute_s({"data": 1.0}) is None
    assert M.samples_per_s(640, 2.0) == 320.0 and M.samples_per_s(640, 0) is None


def test_implausible_speedup_is_above_n_times_1_1():
    assert M.plausible_speedup(2.2, 2)
    assert not M.plausible_speedup(2.21, 2)
    assert not M.plausible_speedup(6.02, 2)  # the printed-without-warning case
    assert M.plausible_speedup(None, 2)


def test_paired_interval_matches_a_hand_computed_t_interval():
    a = [100.0, 110.0, 90.0]
    b = [150.0, 160.0, 140.0]
    iv = M.ratio_interval(a, b)
    logs = [math.log(y / x) for x, y in zip(a, b, strict=True)]
    m = sum(logs) / 3
    sd = math.sqrt(sum((v - m) ** 2 for v in logs) / 2)
    h = 4.302652729911275 * sd / math.sqrt(3)  # t(0.975, 2)
    assert iv.n == 3
    assert iv.estimate == pytest.approx(math.exp(m))
    assert iv.lo == pytest.approx(math.exp(m - h)) and iv.hi == pytest.approx(math.exp(m + h))
    assert iv.above(1.0) and not iv.below(1.0)


def test_pairing_is_by_repeat_not_by_sorted_value():
    # B is 10% faster than A in every repeat, while the repeats themselves drift 2x: paired,
    # the ratio is certain; unpaired (sorted) it would not be
    a = [100.0, 200.0, 150.0]
    b = [110.0, 220.0, 165.0]
    iv = M.ratio_interval(a, b)
    assert iv.estimate == pytest.approx(1.1)
    assert iv.lo == pytest.approx(1.1) and iv.hi == pytest.approx(1.1)


def test_noise_gives_an_interval_that_does_not_decide():
    iv = M.ratio_interval([100.0, 120.0, 95.0], [105.0, 99.0, 112.0])
    assert not iv.decides(1.0)
    text = CL.undecided(iv, 1.0, "B/A")
    assert text.startswith("inconclusive: B/A") and "repeats" in text


def test_within_run_spread_widens_a_lucky_pair_of_repeats():
    # two repeats that agree exactly would give zero width; the runs' own spread keeps it open
    iv = M.ratio_interval([100.0, 100.0], [104.0, 104.0], [0.05, 0.05], [0.05, 0.05])
    assert iv.lo < 1.0 < iv.hi


def test_one_repeat_uses_the_within_run_spread_and_the_noise_floor():
    iv = M.ratio_interval([100.0], [104.0], [0.01], [0.01])
    assert iv.n == 1 and iv.lo < 1.0  # 4% is inside the 10% process-to-process floor
    big = M.ratio_interval([100.0], [200.0], [0.01], [0.01])
    assert big.lo > 1.5  # the interval lies above 1.5...
    # ...but one repeat cannot see drift between runs: it decides nothing (issue: "use 2
    # loader workers" and "faster together" decided from one repeat under drifting load)
    assert not big.above(1.5) and not big.below(2.5) and not big.decides(1.0)
    need = M.repeats_to_decide(big, 1.5)  # at least two, and the fewest that would decide
    assert need >= 2 and M.projected(big, need).decides(1.5)
    assert not M.projected(big, need - 1).decides(1.5)
    assert CL.undecided(big, 1.5, "B / A").startswith("inconclusive (1 repeat): B / A 2.00x")
    two = M.ratio_interval([100.0, 101.0], [200.0, 203.0], [0.01, 0.01], [0.01, 0.01])
    assert two.n == 2 and two.above(1.5)
    assert M.ratio_interval([100.0], [200.0]) is None  # no spread at all: nothing to say


def test_missing_repeats_are_dropped_from_the_pairs():
    iv = M.ratio_interval([100.0, None, 100.0], [200.0, 180.0, 200.0], [0.01] * 3, [0.01] * 3)
    assert iv.n == 2 and iv.estimate == pytest.approx(2.0)


def test_repeats_to_decide_grows_as_the_effect_shrinks():
    iv_small = M.ratio_interval([100.0, 110.0, 95.0], [112.0, 113.0, 104.0])
    iv_smaller = M.ratio_interval([100.0, 110.0, 95.0], [106.0, 111.0, 98.0])
    assert not iv_small.decides(1.0) and not iv_smaller.decides(1.0)
    n1 = M.repeats_to_decide(iv_small, 1.0)
    n2 = M.repeats_to_decide(iv_smaller, 1.0)
    assert n1 is not None and n1 > 3
    assert n2 is not None and n2 > n1  # 4 and 5: a smaller effect needs more repeats
    decided = M.ratio_interval([100.0, 110.0, 95.0], [150.0, 160.0, 140.0])
    assert M.repeats_to_decide(decided, 1.0) == 3  # already decided with what it has


def test_scaled_interval_is_efficiency():
    iv = M.ratio_interval([100.0, 100.0, 100.0], [180.0, 170.0, 190.0]).scaled(1 / 2)
    assert 0.8 < iv.estimate < 0.95 and iv.lo < iv.estimate < iv.hi


def test_mean_difference_interval_welch():
    d, lo, hi = M.mean_difference_interval([0.80, 0.82, 0.81], [0.70, 0.71, 0.69])
    assert d == pytest.approx(-0.11) and hi < 0
    d, lo, hi = M.mean_difference_interval([0.77, 0.85, 0.80], [0.81, 0.79, 0.83])
    assert lo < 0 < hi
    assert M.mean_difference_interval([0.8], [0.7, 0.71]) is None


def test_welch_interval_against_a_hand_computation():
    """Catches each side's variance divided by n instead of n - 1, or the standard error
    taken without dividing by the sample counts. Hand-computed: a = 1, 2, 3 (variance 1),
    b = 3, 5, 7 (variance 4); se^2 = 1/3 + 4/3 = 5/3; Welch's df = (5/3)^2 / ((1/3)^2 / 2 +
    (4/3)^2 / 2) = 2.94, taken as 2; t(0.975, 2) = 4.303."""
    d, lo, hi = M.mean_difference_interval([1.0, 2.0, 3.0], [3.0, 5.0, 7.0])
    assert d == pytest.approx(3.0)
    assert hi - d == pytest.approx(4.3027 * math.sqrt(5.0 / 3.0), rel=1e-3)


def test_sample_sd():
    """Hand-computed: 0.80, 0.81, 0.82 have a sample sd (n - 1) of 0.01; one value has none."""
    assert M.sample_sd([0.80, 0.81, 0.82]) == pytest.approx(0.01)
    assert M.sample_sd([0.8]) is None


def test_interval_text_prints_unbounded_ends_as_such():
    """Bug caught: two noisy repeats printed "3.23x [0.00, 281257.25]", a precision the
    interval does not have."""
    iv = M.Interval(0.003, 1e-5, 0.5, 2, "t")  # excludes 1: says "at least 2x slower"
    assert iv.text() == "0.00x [<0.01, 0.50], 2 repeats"
    assert M.Interval(1.1, 0.9, 1.3, 3, "t").text() == "1.10x [0.90, 1.30], 3 repeats"


@pytest.mark.parametrize("est,lo,hi", [(1.04, 0.03, 39.44), (3.23, 1e-5, 281257.25),
                                       (1.0, -5.12, 1.73), (1.1, 0.45, 1.9),
                                       (1.0, 0.0, 2.0), (1.0, 0.9, math.inf)])
def test_an_interval_too_wide_to_mean_anything_is_never_printed_as_numbers(est, lo, hi):
    """Bug: "1.04x [0.03, 39.44]", "+4% [-97.3%, +3844.4%]" and "-5.12x to 1.73x" were
    printed as if they said something: spread wider than a factor of 4 around 1, a bound
    at or below 0 or infinite."""
    iv = M.Interval(est, lo, hi, 2, "t")
    assert iv.too_wide()
    assert iv.text() == "inconclusive: 2 repeats, spread too large"
    assert iv.short() == f"{est:.2f}x (spread too large, 2 repeats)"
    assert iv.bounds(lambda v: f"{v - 1:+.1%}") == "(spread too large, 2 repeats)"
    text = CL.undecided(iv, 1.0, "samples/s B / A", need=None)
    assert text.startswith("inconclusive: samples/s B / A: 2 repeats, spread too large; ")
    for shown in (iv.text(), iv.short(), iv.bounds(), text):
        assert not any(f"{b:.2f}" in shown for b in (lo, hi) if math.isfinite(b) and b), shown


def test_a_wide_interval_that_excludes_its_reference_keeps_its_numbers():
    iv = M.Interval(3.0, 1.2, 7.5, 2, "t")  # a factor of 6.25, but wholly above 1
    assert not iv.too_wide() and iv.text() == "3.00x [1.20, 7.50], 2 repeats"
    assert iv.too_wide(None) and iv.too_wide(2.0)
    assert not M.Interval(1.0, 0.6, 2.3, 3, "t").too_wide()  # a factor of 3.8


def test_projected_keeps_a_zero_spread_the_runs_own_floor_and_welch_s_df():
    """Three ways a projection promised the wrong number of repeats. Bugs caught: a spread
    of exactly zero (device memory, the same every repeat) taken for "unknown" and widened
    to one run's noise; the runs' own spread (the interval's floor) dropped, so 4 repeats
    were promised where 16 are needed; a Welch interval projected with n - 1 degrees of
    freedom instead of its 2n - 2."""
    same = M.ratio_interval([100.0] * 3, [150.0] * 3)
    assert same.log_sd == 0.0
    p = M.projected(same, 5)
    assert p.lo == p.hi == pytest.approx(1.5)
    floor = M.ratio_interval([100.0] * 3, [105.0, 105.5, 104.6], [0.1] * 3, [0.1] * 3)
    assert M.repeats_to_decide(floor, 1.0) == 16  # log(1.05) > 2 x log(1.1) / sqrt(16)
    assert M.projected(floor, 15).lo < 1.0 < M.projected(floor, 16).lo
    w = M.unpaired_ratio_interval([100.0, 104.0, 96.0], [104.0, 108.0, 100.0])
    assert w.welch and not floor.welch
    h9 = math.log(M.projected(w, 9).hi / w.estimate)
    assert h9 == pytest.approx(M.t_quantile(16) * w.log_sd / 3)


def test_an_interval_knows_when_the_runs_own_spread_set_its_width():
    """Repeats that agree but runs whose medians are uncertain: the within-run floor sets
    the width; repeats that disagree over steady runs: the repeats' spread does; one repeat
    below the process-to-process floor: neither the runs' own spread."""
    same = M.ratio_interval([1.0, 1.0, 1.0], [1.1, 1.1, 1.1], [0.3] * 3, [0.3] * 3)
    assert same.within_run_bound
    apart = M.ratio_interval([1.0, 1.0, 1.0], [0.9, 1.3, 1.1], [0.01] * 3, [0.01] * 3)
    assert not apart.within_run_bound
    one = M.ratio_interval([1.0], [1.1], [0.01], [0.01])
    assert not one.within_run_bound  # the 10% process-to-process floor, not the runs'
    assert M.ratio_interval([1.0], [1.1], [0.2], [0.2]).within_run_bound
    assert not M.ratio_interval([1.0, 1.0], [1.1, 1.2]).within_run_bound  # unknown: no claim


def test_paired_difference_interval_by_hand():
    """Differences 0.01, -0.01, -0.02: mean -0.00667, sd 0.015275, t(2, 95%) 4.3027: the
    interval is mean +/- 4.3027 x 0.015275 / sqrt(3). Bug caught: an unpaired (Welch)
    interval over pairs that share a seed, twice as wide here."""
    d, lo, hi, sd = M.paired_difference_interval([0.80, 0.84, 0.82], [0.81, 0.83, 0.80])
    h = 4.302652729911275 * 0.015275252316519465 / 3 ** 0.5
    assert d == pytest.approx(-0.02 / 3) and sd == pytest.approx(0.015275252316519465)
    assert (lo, hi) == pytest.approx((d - h, d + h))
    welch = M.mean_difference_interval([0.80, 0.84, 0.82], [0.81, 0.83, 0.80])
    assert welch[2] - welch[1] > 1.2 * (hi - lo)
    assert M.paired_difference_interval([0.8], [0.7]) is None
    assert M.repeats_to_decide_paired(-0.05, 0.01, 0.01, 3) == 4  # t(3) 3.18 x 0.01 / 2 < 0.04
    assert M.repeats_to_decide_paired(0.01, 0.01, 0.01, 3) is None  # on the tolerance


def test_energy_figures_from_the_windows_draw():
    """200 W at 40 samples/s is 5 J a sample; 100 s to the target at that rate is 20 kJ."""
    assert M.joules_per_sample(200.0, 40.0) == pytest.approx(5.0)
    assert M.joules_to_target(5.0, 40.0, 100.0) == pytest.approx(20_000.0)
    assert M.joules_per_sample(None, 40.0) is None and M.joules_to_target(5.0, 40.0, None) is None


def test_compile_against_eager_by_hand():
    """Compiled forward + backward 10, 10, 10, 12 ms over the window, eager 20, 20, 22 ms:
    medians 10 and 20; the step (median 30 ms) projected eager is 30 - 10 + 20 = 40 ms, 1.33x;
    a compile time of 1 s is paid back after ceil(1 / 0.010) = 100 steps."""
    import math

    from scaleprobe.core.metrics import compile_vs_eager

    vs = compile_vs_eager([0.010, 0.010, 0.010, 0.012], [0.020, 0.020, 0.022], 0.030, 1.0)
    gc = math.exp(sum(map(math.log, [0.010, 0.010, 0.010, 0.012])) / 4)
    ge = math.exp(sum(map(math.log, [0.020, 0.020, 0.022])) / 3)
    assert vs["fwd_bwd_speedup"] == pytest.approx(ge / gc)  # geometric means
    lo, hi = vs["fwd_bwd_speedup_interval"]
    assert 1.0 < lo < ge / gc < hi
    assert vs["compiled_fwd_bwd_s"] == pytest.approx(0.010)
    assert vs["eager_fwd_bwd_s"] == pytest.approx(0.020)
    assert vs["eager_step_s_projected"] == pytest.approx(0.040)
    assert vs["step_speedup_projected"] == pytest.approx(4 / 3)
    assert vs["payback_steps"] == 100
    assert not vs["paired"] and vs["pairs"] == 0
    # interleaved pairs: the interval is the pairs' own (each saw the same load), centred on
    # the geometric mean of their ratios, 2.0x here whatever the window's steps say
    paired = compile_vs_eager([0.010] * 4, [0.020, 0.021, 0.019], 0.030, 1.0,
                              [0.010, 0.0105, 0.0095])
    assert paired["paired"] and paired["pairs"] == 3
    assert paired["fwd_bwd_speedup"] == pytest.approx(2.0)
    lo, hi = paired["fwd_bwd_speedup_interval"]
    assert lo == pytest.approx(2.0) and hi == pytest.approx(2.0)  # every pair exactly 2x
    slower = compile_vs_eager([0.03, 0.03], [0.02, 0.02], 0.05, 1.0)
    assert slower["payback_steps"] is None and slower["step_speedup_projected"] < 1
    assert compile_vs_eager([], [0.02], 0.05, 1.0) is None


def test_the_compile_against_eager_line_says_what_the_interval_allows():
    from scaleprobe.measure.compiled import vs_eager_line

    vs = {"fwd_bwd_speedup": 2.0, "fwd_bwd_speedup_interval": [1.8, 2.2],
          "compiled_fwd_bwd_s": 0.010, "eager_fwd_bwd_s": 0.020, "compiled_steps": 8,
          "eager_passes": 5, "pairs": 5, "step_speedup_projected": 4 / 3,
          "payback_steps": 100}
    assert vs_eager_line({"vs_eager": vs}, {}) == (
        "compiled against eager: forward + backward 2.00x [1.80, 2.20] faster (geometric "
        "mean of 5 pairs of passes, a compiled one then an eager one, after the window; "
        "median 10.0 ms compiled over 8 timed steps, 20.0 ms eager over 5 passes); the whole "
        "step 1.33x (projected from the medians), the compile time paid back after 100 steps")
    vs["fwd_bwd_speedup_interval"] = [0.9, 4.3]
    line = vs_eager_line({"vs_eager": vs}, {})
    assert "2.00x [0.90, 4.30] not resolved (the interval includes 1x)" in line
    assert line.endswith("paid back after 100 steps if the medians hold")
    # a slower compiled pass in the claim module's words, never "SLOWER"
    vs.update(fwd_bwd_speedup=0.8, fwd_bwd_speedup_interval=[0.7, 0.9])
    assert "0.80x [0.70, 0.90] slower (" in vs_eager_line({"vs_eager": vs}, {})
    # the window's steps against passes after it (no pairs): one comparison in time, which
    # load changing between the two moves: never decided, however narrow its interval
    vs.update(fwd_bwd_speedup=2.0, fwd_bwd_speedup_interval=[1.8, 2.2], pairs=0)
    line = vs_eager_line({"vs_eager": vs}, {})
    assert "2.00x [1.80, 2.20] inconclusive (1 repeat), leaning faster (geometric means of " \
           "the window's steps and 5 eager passes after it, not interleaved" in line
    assert vs_eager_line({"vs_eager": None}, {"compile.vs_eager": "not measured: more than "
                         "one process"}) == ("compiled against eager: not measured: more than "
                                             "one process")
    assert vs_eager_line(None, {}) is None
