"""Summary statistics of step times, and the stopping rule for an adaptive window."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def quantile(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    if not s:
        raise ValueError("no values")
    pos = q * (len(s) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def median(xs: Sequence[float]) -> float:
    return quantile(xs, 0.5)


def median_ci(xs: Sequence[float], z: float = 1.96) -> tuple[float, float]:
    """Distribution-free 95% confidence interval of the median (order statistics)."""
    s = sorted(xs)
    n = len(s)
    if n < 3:
        return s[0], s[-1]
    half = z * math.sqrt(n) / 2
    lo = max(0, int(math.floor(n / 2 - half)))
    hi = min(n - 1, int(math.ceil(n / 2 + half)) - 1)
    return s[lo], s[max(lo, hi)]


def rel_ci_halfwidth(xs: Sequence[float]) -> float:
    """Half-width of the median's 95% CI relative to the median."""
    if len(xs) < 3:
        return math.inf
    lo, hi = median_ci(xs)
    m = median(xs)
    return (hi - lo) / 2 / m if m > 0 else math.inf


def summarize(xs: Sequence[float]) -> dict[str, Any] | None:
    if not xs:
        return None
    return {
        "median": median(xs),
        "p95": quantile(xs, 0.95),
        "mean": sum(xs) / len(xs),
        "min": min(xs),
        "max": max(xs),
        "n": len(xs),
        "rel_ci": rel_ci_halfwidth(xs) if len(xs) >= 3 else None,
    }


def is_stable(xs: Sequence[float], rel: float, min_n: int) -> bool:
    return len(xs) >= max(3, min_n) and rel_ci_halfwidth(xs) <= rel
