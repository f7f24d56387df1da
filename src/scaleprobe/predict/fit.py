"""Fit ``time_s = alpha_s + beta_s_per_byte * size_bytes`` to benchmark points, per operation.

``alpha_s`` is the fixed cost of one operation (latency, software overhead) and
``beta_s_per_byte`` the cost of each byte; ``bandwidth_gbit_s = 8 / beta / 1e9`` is the
operation's effective (algorithm) bandwidth for large messages.

Message sizes in a benchmark span many orders of magnitude (1 KiB .. 256 MiB), so an
ordinary least-squares fit would be decided by the largest messages alone and could give a
negative latency. The fit minimises the *relative* error instead (each equation divided by
its measured time), keeps both parameters non-negative (``scipy.optimize.lsq_linear`` with
bounds), and works with any number of points:

    1 size     all of the time is taken as bandwidth cost (alpha = 0): with one message size
               latency and bandwidth cannot be told apart
    2+ sizes   bounded least squares, alpha >= 0 and beta >= 0
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.optimize import lsq_linear


@dataclass(frozen=True)
class Fit:
    alpha_s: float
    beta_s_per_byte: float
    points: int
    max_rel_err: float  # worst |predicted / measured - 1| over the fitted points

    @property
    def bandwidth_gbit_s(self) -> float | None:
        return 8.0 / self.beta_s_per_byte / 1e9 if self.beta_s_per_byte > 0 else None

    def predict_s(self, size_bytes: float) -> float:
        return self.alpha_s + self.beta_s_per_byte * size_bytes

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["bandwidth_gbit_s"] = self.bandwidth_gbit_s
        return d


def _relative_ls(xs: np.ndarray, ts: np.ndarray) -> tuple[float, float]:
    """alpha, beta >= 0 minimising the sum of ``((alpha + beta * x) / t - 1) ** 2``."""
    if len(np.unique(xs)) < 2:  # one size: through the origin
        cols = np.column_stack([xs / ts])
    else:
        cols = np.column_stack([1.0 / ts, xs / ts])
    scale = np.linalg.norm(cols, axis=0)  # sizes span 1e3..3e8: equalise the columns
    res = lsq_linear(cols / scale, np.ones(len(ts)), bounds=(0.0, np.inf), method="bvls")
    params = res.x / scale
    return (0.0, float(params[0])) if len(params) == 1 else (float(params[0]), float(params[1]))


def fit_alpha_beta(sizes_bytes: Sequence[float], times_s: Sequence[float]) -> Fit:
    """Relative-error least squares of ``time = alpha + beta * size`` (both >= 0)."""
    pts = [(float(x), float(t)) for x, t in zip(sizes_bytes, times_s, strict=True)
           if t is not None and t > 0 and x > 0]
    if not pts:
        raise ValueError("no positive (size, time) points to fit")
    alpha, beta = _relative_ls(np.array([p[0] for p in pts]), np.array([p[1] for p in pts]))
    worst = max(abs((alpha + beta * x) / t - 1.0) for x, t in pts)
    return Fit(alpha_s=alpha, beta_s_per_byte=beta, points=len(pts), max_rel_err=worst)


def fit_rows(rows: Iterable[dict[str, Any]]) -> dict[str, Fit]:
    """One fit per operation from benchmark rows ``{"op", "size_bytes", "time_s", ...}``."""
    by_op: dict[str, tuple[list[float], list[float]]] = {}
    for r in rows:
        if r.get("time_s"):
            xs, ts = by_op.setdefault(r["op"], ([], []))
            xs.append(r["size_bytes"])
            ts.append(r["time_s"])
    return {op: fit_alpha_beta(xs, ts) for op, (xs, ts) in by_op.items()}
