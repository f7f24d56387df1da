"""Summary statistics of step times, and the stopping rule for an adaptive window.

Quantiles are numpy's (linear interpolation between order statistics). The median's 95%
confidence interval is the distribution-free one between two order statistics, chosen with
the binomial distribution as ``scipy.stats.quantile_test(...).confidence_interval()`` chooses
them (a test holds the two to the same answer). It is computed here rather than through
``quantile_test`` because the stopping rule asks for it every few steps inside the measured
window, and ``quantile_test`` costs several times as much per call
(``benchmarks/median_ci.py``; figures in docs/DEPENDENCIES.md). The two order statistics
depend only on the number of steps: they come from the exact binomial tail in integers,
cached per count, so a process that summarises its steps does not import ``scipy.stats``
(half a second of every run's start). With fewer than 6 steps no two order statistics reach
95%; the interval is then the whole range (min, max), as wide as the data allows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np

CONFIDENCE = 0.95
EXACT_MAX_N = 4096  # _order_statistics: integers up to here, scipy beyond
Floats = Sequence[float] | np.ndarray[Any, Any]  # step times: a list, or numpy's array of them


def quantile(xs: Floats, q: float) -> float:
    if not len(xs):
        raise ValueError("no values")
    return float(np.quantile(np.asarray(xs, dtype=np.float64), q))


def median(xs: Floats) -> float:
    return quantile(xs, 0.5)


def median_ci(xs: Floats, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Distribution-free confidence interval of the median (order statistics)."""
    s = np.sort(np.asarray(xs, dtype=np.float64))
    n = len(s)
    if n == 0:
        raise ValueError("no values")
    lo, hi = _order_statistics(n, (1.0 - confidence) / 2)
    if lo < 0 or hi >= n:  # too few values for this confidence
        return float(s[0]), float(s[-1])
    return float(s[lo]), float(s[hi])


@lru_cache(maxsize=4096)
def _order_statistics(n: int, alpha: float) -> tuple[int, int]:
    """0-based indices of the interval's ends among ``n`` sorted values: with X ~ Binomial(n,
    1/2), the lower end is the k-th value for the smallest k with P(X <= k) >= alpha (scipy's
    ``binom.ppf``), less one; the upper end the (k+1)-th for the smallest k with P(X > k) <=
    alpha (``binom.isf``). Exact: the tail sums are integers over 2**n, alpha an exact
    fraction, so no rounding decides a boundary. Beyond ``EXACT_MAX_N`` steps (where the
    integers grow long) scipy's ``binom``, which gives the same indices (a test compares them),
    imported there only."""
    if n > EXACT_MAX_N:
        from scipy.stats import binom  # heavy: scipy: only where an interval is computed

        return int(binom.ppf(alpha, n, 0.5)) - 1, int(binom.isf(alpha, n, 0.5))
    a = Fraction(alpha)
    target = a.numerator * 2**n  # P <= alpha  <=>  count * denominator <= target
    lo, cum, c, k = -1, 0, 1, 0  # c = comb(n, k), carried from one k to the next
    while k <= n:  # the smallest k with P(X <= k) >= alpha
        cum += c
        if cum * a.denominator >= target:
            lo = k - 1
            break
        c = c * (n - k) // (k + 1)
        k += 1
    tail, c, k = 2**n, 1, -1  # tail = P(X > k) * 2**n; c = comb(n, k + 1)
    while k < n and tail * a.denominator > target:  # the smallest k with P(X > k) <= alpha
        k += 1
        tail -= c
        c = c * (n - k) // (k + 1)
    return lo, k


def rel_ci_halfwidth(xs: Floats) -> float:
    """Half-width of the median's 95% CI relative to the median."""
    if len(xs) < 3:
        return math.inf
    lo, hi = median_ci(xs)
    m = median(xs)
    return (hi - lo) / 2 / m if m > 0 else math.inf


def summarize(xs: Sequence[float]) -> dict[str, Any] | None:
    if not len(xs):
        return None
    a = np.asarray(xs, dtype=np.float64)
    return {
        "median": median(a),
        "p95": quantile(a, 0.95),
        "mean": float(a.mean()),
        "min": float(a.min()),
        "max": float(a.max()),
        "n": len(a),
        "rel_ci": rel_ci_halfwidth(a) if len(a) >= 3 else None,
    }


def is_stable(xs: Sequence[float], rel: float, min_n: int) -> bool:
    return len(xs) >= max(3, min_n) and rel_ci_halfwidth(xs) <= rel
