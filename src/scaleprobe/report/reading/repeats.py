"""An experiment point's repeats: one record to show, all of them to judge by.

A point of a sweep, scale or colocate experiment runs ``repeats`` times (``experiment.repeat``
0, 1, ...). Tables show the point's *median repeat* (the ok run whose samples/s is the
median of the point's ok runs; the lower middle one for an even count), so every figure in a
row comes from one real run. Verdicts read every repeat: ``paired(a, b, figure)`` lines two
points' repeats up by repeat index, and ``interval`` turns them into a ``metrics.Interval``.

Points are identified by experiment id + point key (+ repeat index), never by display name:
two experiments whose points share a label stay apart.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

from scaleprobe.core import metrics as M

# MEASURED: ok, target not reached
from scaleprobe.core.result_model import MEASURED, RunResult, point_key
from scaleprobe.measure.stats import median

Figure = Callable[[RunResult], float | int | None]


def repeat_index(rec: RunResult) -> int:
    """The run's repeat index; 0 for records written before repeats existed."""
    return rec.repeat or 0


def point_identity(rec: RunResult) -> tuple[str, str, str]:
    """(folder, experiment id, point key); a run outside any experiment is its own point."""
    pt = rec.point
    if not pt:
        return (rec.source, rec.exp_id or "", f"run:{rec.run_id}")
    return (rec.source, rec.exp_id or "", point_key(pt))


def group_repeats(recs: list[RunResult]) -> list[RunResult]:
    """One record per experiment point, in first-seen order: the median repeat of its ok runs
    (a copy, with ``repeats``: every ok run, one per repeat index, in repeat order), else the
    latest record (a failed or out-of-memory point, ``repeats`` empty). Within one repeat
    index the latest ok run counts (a resumed experiment may have appended a point twice)."""
    order: list[tuple[str, str, str]] = []
    ok: dict[tuple[str, str, str], dict[int, RunResult]] = {}
    last: dict[tuple[str, str, str], RunResult] = {}
    for r in recs:
        ident = point_identity(r)
        if ident not in last:
            order.append(ident)
        last[ident] = r
        if r.status in MEASURED:
            ok.setdefault(ident, {})[repeat_index(r)] = r
    out = []
    for ident in order:
        reps = [ok[ident][i] for i in sorted(ok.get(ident, {}))]
        if not reps:
            out.append(_with_repeats(last[ident], []))
            continue
        ranked = sorted(reps, key=lambda r: r.metrics.samples_per_s or 0.0)
        out.append(_with_repeats(ranked[(len(ranked) - 1) // 2], reps))
    return out


def _with_repeats(rec: RunResult, reps: list[RunResult]) -> RunResult:
    shown = copy.copy(rec)
    shown.repeats = reps
    return shown


def repeats_of(rec: RunResult) -> list[RunResult]:
    """The point's ok repeats (a record not from ``group_repeats``: itself, when ok)."""
    if rec.repeats is not None:
        return rec.repeats
    return [rec] if rec.status in MEASURED else []


def values(rec: RunResult, figure: Figure) -> list[float]:
    return [v for v in (figure(r) for r in repeats_of(rec)) if v is not None]


def median_of(rec: RunResult, figure: Figure) -> float | None:
    vals = values(rec, figure)
    return median(vals) if vals else None


def rel_ci(r: RunResult) -> float | None:
    """The within-run spread of a run: its median step time's relative CI half-width."""
    st = r.metrics.step_time_s
    return st.rel_ci if st is not None else None


def paired(a: RunResult, b: RunResult, figure: Figure
           ) -> tuple[list[float | None], list[float | None], list[float | None],
                      list[float | None]]:
    """Two points' figures lined up by repeat index (repeat i of A with repeat i of B), with
    each run's within-run spread: ``(a_values, b_values, a_rel_ci, b_rel_ci)``."""
    ra = {repeat_index(r): r for r in repeats_of(a)}
    rb = {repeat_index(r): r for r in repeats_of(b)}
    common = sorted(set(ra) & set(rb))
    if not common and ra and rb:  # repeat indices that do not meet: pair by order
        pairs = list(zip(ra.values(), rb.values(), strict=False))
    else:
        pairs = [(ra[i], rb[i]) for i in common]
    return ([figure(x) for x, _ in pairs], [figure(y) for _, y in pairs],
            [rel_ci(x) for x, _ in pairs], [rel_ci(y) for _, y in pairs])


def interval(a: RunResult, b: RunResult, figure: Figure) -> M.Interval | None:
    """The interval of figure(B) / figure(A) over the two points' paired repeats."""
    av, bv, ac, bc = paired(a, b, figure)
    return M.ratio_interval(av, bv, ac, bc)


def sps_of(r: RunResult) -> float | None:
    return r.metrics.samples_per_s


def epoch_time_s(r: RunResult) -> float | None:
    return r.metrics.epoch_time_s
