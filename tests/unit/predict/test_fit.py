"""The alpha-beta fit recovers known latency and bandwidth, and survives few or odd points."""

import random

import pytest

from scaleprobe.predict.fit import fit_alpha_beta, fit_rows

SIZES = [1 << 10, 1 << 16, 1 << 20, 16 << 20, 256 << 20]


def test_recovers_exact_alpha_beta():
    alpha, beta = 50e-6, 1 / 1.25e9  # 50 us, 10 Gbit/s
    fit = fit_alpha_beta(SIZES, [alpha + beta * s for s in SIZES])
    assert fit.alpha_s == pytest.approx(alpha, rel=1e-6)
    assert fit.beta_s_per_byte == pytest.approx(beta, rel=1e-6)
    assert fit.bandwidth_gbit_s == pytest.approx(10.0, rel=1e-6)
    assert fit.max_rel_err < 1e-9 and fit.points == 5


def test_recovers_alpha_beta_under_multiplicative_noise():
    rng = random.Random(0)
    alpha, beta = 200e-6, 1 / 1e9
    times = [(alpha + beta * s) * rng.uniform(0.9, 1.1) for s in SIZES for _ in range(4)]
    fit = fit_alpha_beta([s for s in SIZES for _ in range(4)], times)
    assert fit.alpha_s == pytest.approx(alpha, rel=0.15)
    assert fit.beta_s_per_byte == pytest.approx(beta, rel=0.15)


def test_one_point_is_all_bandwidth():
    fit = fit_alpha_beta([1e6], [1e-3])
    assert fit.alpha_s == 0 and fit.beta_s_per_byte == pytest.approx(1e-9)
    assert fit.predict_s(2e6) == pytest.approx(2e-3)


def test_two_points_solve_exactly():
    fit = fit_alpha_beta([1e3, 1e6], [1e-4 + 1e-6, 1e-4 + 1e-3])
    assert fit.alpha_s == pytest.approx(1e-4) and fit.beta_s_per_byte == pytest.approx(1e-9)


def test_parameters_never_negative():
    # time shrinking with size (noise on tiny messages): latency only, no bandwidth term
    flat = fit_alpha_beta([1e3, 2e3, 4e3], [3e-4, 2.9e-4, 2.8e-4])
    assert flat.beta_s_per_byte == 0 and flat.alpha_s > 0 and flat.bandwidth_gbit_s is None
    # a line through a negative intercept: refit through the origin
    steep = fit_alpha_beta([1e6, 2e6], [1e-3, 3e-3])
    assert steep.alpha_s == 0 and steep.beta_s_per_byte > 0
    same = fit_alpha_beta([1e6, 1e6], [1e-3, 1.2e-3])
    assert same.alpha_s == 0 and same.beta_s_per_byte > 0


def test_no_usable_points():
    with pytest.raises(ValueError):
        fit_alpha_beta([1e6], [0.0])


def test_fit_rows_groups_by_op():
    rows = [{"op": op, "size_bytes": s, "time_s": k * (1e-5 + s / 1e9)}
            for op, k in (("all_reduce", 1), ("ps_push_pull", 2)) for s in SIZES]
    fits = fit_rows(rows)
    assert set(fits) == {"all_reduce", "ps_push_pull"}
    assert fits["ps_push_pull"].beta_s_per_byte == pytest.approx(2e-9)
    assert fits["all_reduce"].to_dict()["bandwidth_gbit_s"] == pytest.approx(8.0)
