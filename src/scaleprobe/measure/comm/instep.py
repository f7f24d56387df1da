"""Communication measured in the step itself: the per-step figure, its median and the
median's 95% interval over the timed steps, and the sync-minus-no_sync calibration kept
beside it as a cross-check with its own interval (docs/COMMUNICATION.md). No torch.

A figure whose interval includes 0 is "not resolved": it is reported, never acted on. The
cross-check is never carved out of another phase: the breakdown's comm is what the step
measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scaleprobe.core import claim as CL
from scaleprobe.measure.aggregate import per_median_step
from scaleprobe.measure.stats import median, median_ci

INTERVAL_METHOD = ("median over the timed steps, 95% distribution-free interval of the "
                   "median (order statistics)")
CROSS_CHECK_METHOD = ("cross-check: sync minus no_sync on the same batch, alternating; the "
                      "median of the paired differences (first pair dropped) with its 95% "
                      "interval; never moved into the breakdown")


def per_step_figures(values: Sequence[float] | None) -> dict[str, Any]:
    """``{median_s, interval_s: [lo, hi], steps, resolved}`` of one figure per timed step;
    every value None without steps. ``resolved`` is False when the interval reaches 0."""
    vals = [float(v) for v in values or [] if v is not None]
    if not vals:
        return {"median_s": None, "interval_s": None, "steps": 0, "resolved": None}
    lo, hi = median_ci(vals)
    return {"median_s": median(vals), "interval_s": [lo, hi], "steps": len(vals),
            "resolved": lo > 0, "method": INTERVAL_METHOD}


def cross_check(cal: dict[str, Any] | None) -> dict[str, Any] | None:
    """The calibration (``calibrate.calibrate_comm``) as a cross-check: the difference of
    the alternating sync / no_sync pairs, its median and interval; None without one."""
    if not cal:
        return None
    samples = cal.get("samples") or {}
    s, n = list(samples.get("sync") or []), list(samples.get("no_sync") or [])
    diffs = [a - b for a, b in zip(s[1:], n[1:], strict=False)]
    out = {"sync_step_s": cal.get("sync_step_s"), "no_sync_step_s": cal.get("no_sync_step_s"),
           "samples": samples, "method": CROSS_CHECK_METHOD}
    if not diffs:
        return {**out, "difference_s": None, "interval_s": None, "resolved": None}
    lo, hi = median_ci(diffs)
    return {**out, "difference_s": median(diffs), "interval_s": [lo, hi],
            "resolved": lo > 0 or hi < 0, "pairs": len(diffs)}


def text(fig: dict[str, Any] | None, ms: Any) -> str:
    """``12.3 ms [11.8, 13.0] over 40 steps`` or ``... not resolved from noise``; ``ms``
    formats seconds."""
    if fig is None:
        return "n/a"
    value = fig.get("median_s", fig.get("difference_s"))
    if value is None or not fig.get("interval_s"):
        return "n/a"
    lo, hi = fig["interval_s"]
    out = f"{ms(value)} [{ms(lo)}, {ms(hi)}]"
    if fig.get("steps"):
        out += f" over {fig['steps']} steps"
    elif fig.get("pairs"):
        out += f" over {fig['pairs']} pairs"
    return out + ("" if fig.get("resolved") else f": {CL.NOT_RESOLVED} from noise")


def fill_in_step(c: Any, raw0: Any, world: int, why: dict[str, str],
                 cross_check_reason: str | None = None) -> None:
    """The in-step fields of a run's ``Comm`` record ``c`` from the shown rank's record
    ``raw0`` (its per-step comm phase, the cross-check its strategy built, the time in flight
    per step), with null reasons in ``why``. At world size 1 nothing is communicated: no
    interval, no cross-check. ``cross_check_reason``: why there is none, where the strategy
    has no calibration to cross-check with."""
    unseen = (raw0.phases_unseen or {}).get("comm")
    if world < 2:
        c.exposed_per_step = c.cross_check = None
        why["comm.exposed_per_step"] = "world size 1: no communication"
        return
    if unseen:
        c.exposed_per_step = None
        why["comm.exposed_s"] = why["comm.exposed_per_step"] = unseen
    else:
        c.exposed_per_step = per_step_figures(raw0.phase_times_s.get("comm"))
        if c.exposed_per_step["median_s"] is None:
            why["comm.exposed_per_step"] = "no step was timed"
    flights = c.in_flight_per_step
    if flights and c.in_flight_s is None:  # on the breakdown's basis: in flight >= exposed
        vals = [v or 0.0 for v in flights]
        try:
            c.in_flight_s = per_median_step(vals, raw0.phase_times_s, raw0.step_times_s)
        except ValueError:
            why["comm.in_flight_s"] = "not one time in flight per timed step"
    c.in_flight_per_step = None  # summarised: not kept per step
    if c.cross_check is None:
        why["comm.cross_check"] = cross_check_reason or (
            "not measured: calibration switched off (dist.calibrate_comm = false)")
