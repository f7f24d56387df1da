"""Transfers that share one link: each moves its bytes at the rate the link has left for it,
never faster than its own path allows (the slower cable at its other end). No torch.

    transfer j   ready at ``ready_s``, ``nbytes`` to move, its path's own rate ``cap_byte_s``
                 (None: only the shared link limits it), ``alpha_s`` paid before its first byte
    the link     ``capacity_byte_s`` shared by the transfers in flight, max-min fair: each
                 gets an equal share, a transfer capped below its share keeps its cap and
                 the rest is split among the others (water-filling)

This is how a parameter server's link carries the workers' pushes: every push crosses it,
at once where they overlap, each also held to its worker's own cable. ``finish_times``
returns when each transfer's last byte arrived; one transfer alone takes
``alpha + nbytes / min(cap, capacity)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

_EPS = 1e-12


@dataclass(frozen=True)
class Transfer:
    ready_s: float
    nbytes: float
    cap_byte_s: float | None = None
    alpha_s: float = 0.0


def fair_rates(caps: list[float | None], capacity: float) -> list[float]:
    """Max-min fair shares of ``capacity`` among flows with their own caps (None: no cap)."""
    rates = [0.0] * len(caps)
    left, open_ = capacity, list(range(len(caps)))
    while open_:
        share = left / len(open_)
        capped = {i: cap for i in open_ if (cap := caps[i]) is not None and cap <= share}
        if not capped:
            for i in open_:
                rates[i] = share
            return rates
        for i, cap in capped.items():
            rates[i] = cap
            left -= cap
        open_ = [i for i in open_ if i not in capped]
    return rates


def finish_times(transfers: list[Transfer], capacity_byte_s: float) -> list[float]:
    """When each transfer's last byte arrives over the shared link (event-driven: rates are
    recomputed whenever a transfer starts or ends)."""
    if capacity_byte_s <= 0:
        raise ValueError("link capacity must be positive")
    start = [t.ready_s + t.alpha_s for t in transfers]
    left = [float(t.nbytes) for t in transfers]
    done: list[float | None] = [None] * len(transfers)
    for i, t in enumerate(transfers):
        if t.nbytes <= 0:
            done[i] = start[i]
    now = min(start, default=0.0)
    while any(d is None for d in done):
        active = [i for i, d in enumerate(done) if d is None and start[i] <= now + _EPS]
        waiting = [start[i] for i, d in enumerate(done) if d is None and start[i] > now + _EPS]
        if not active:
            now = min(waiting)
            continue
        rates = fair_rates([transfers[i].cap_byte_s for i in active], capacity_byte_s)
        to_end = min(left[i] / r if r > 0 else math.inf for i, r in zip(active, rates,
                                                                          strict=True))
        step = min(to_end, (min(waiting) - now) if waiting else math.inf)
        for i, r in zip(active, rates, strict=True):
            left[i] -= r * step
            if left[i] <= max(_EPS, 1e-9 * transfers[i].nbytes):
                left[i], done[i] = 0.0, now + step
        now += step
    return [float(d) for d in done]  # type: ignore[arg-type]
