"""Fit ``time_s = alpha_s + beta_s_per_byte * size_bytes`` to benchmark points, per operation.

``alpha_s`` is the fixed cost of one operation (latency, software overhead) and
``beta_s_per_byte`` the cost of each byte; ``bandwidth_gbit_s = 8 / beta / 1e9`` is the
operation's effective (algorithm) bandwidth for large messages.

Message sizes in a benchmark span many orders of magnitude (1 KiB .. 256 MiB), so an
ordinary least-squares fit would be decided by the largest messages alone and could give a
negative latency. The fit minimises the *relative* error instead (weights ``1 / time^2``),
keeps both parameters non-negative, and works with any number of points:

    1 point    all of the time is taken as bandwidth cost (alpha = 0)
    2+ points  weighted least squares, clamped to alpha >= 0 and beta >= 0
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any


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


def _weighted_ls(xs: Sequence[float], ts: Sequence[float], ws: Sequence[float]) -> tuple[float, float]:
    sw = sum(ws)
    sx = sum(w * x for w, x in zip(ws, xs, strict=True))
    st = sum(w * t for w, t in zip(ws, ts, strict=True))
    sxx = sum(w * x * x for w, x in zip(ws, xs, strict=True))
    sxt = sum(w * x * t for w, x, t in zip(ws, xs, ts, strict=True))
    det = sw * sxx - sx * sx
    if det <= 0 or not math.isfinite(det):  # all sizes equal: no slope can be told apart
        return 0.0, (st / sx if sx > 0 else 0.0)
    beta = (sw * sxt - sx * st) / det
    alpha = (st - beta * sx) / sw
    if alpha < 0:  # best fit through the origin
        return 0.0, sxt / sxx
    if beta < 0:  # time does not grow with size: latency only
        return st / sw, 0.0
    return alpha, beta


def fit_alpha_beta(sizes_bytes: Sequence[float], times_s: Sequence[float]) -> Fit:
    """Relative-error least squares of ``time = alpha + beta * size`` (both >= 0)."""
    pts = [(float(x), float(t)) for x, t in zip(sizes_bytes, times_s, strict=True)
           if t is not None and t > 0 and x > 0]
    if not pts:
        raise ValueError("no positive (size, time) points to fit")
    xs, ts = [p[0] for p in pts], [p[1] for p in pts]
    if len(pts) == 1:
        alpha, beta = 0.0, ts[0] / xs[0]
    else:
        alpha, beta = _weighted_ls(xs, ts, [1.0 / (t * t) for t in ts])
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
