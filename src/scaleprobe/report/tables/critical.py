"""The critical batch size of a batch sweep: predicted from the gradient noise scale each run
measured (``gns``), and measured from the sweep's steps and samples to a target.

McCandlish et al. 2018: S = S_min (1 + B_crit / B), and B_crit is close to the gradient noise
scale. The fit of ``S = S_min + E_min / B`` (weighted least squares of each run's steps to
target on 1 / B, weights 1 / S^2, closed form), its bootstrap interval over each batch size's
runs and what S_min <= 0 or E_min <= 0 means are docs/CRITICAL_BATCH.md's.

Verdicts (where a batch lies against the critical batch, whether measured and predicted agree
within a factor of 2, where the memory/time rule disagrees) need ``MIN_REPEATS_TO_DECIDE``
runs at every batch size they stand on: one seed's steps to a target or noise scale cannot
show the seed-to-seed spread. With fewer, the figures are shown and the verdict is
inconclusive. Torch-free.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scaleprobe.core import claim as CL
from scaleprobe.core import metrics as M
from scaleprobe.core.result_model import RunResult
from scaleprobe.features.gns import REGIME_TEXT, regime
from scaleprobe.report.reading import repeats as P
from scaleprobe.report.tables.rows import BatchRow, RulePicks

RESAMPLES = 2000
NOISE_HEADERS = ("B_noise", "Batch vs B_noise")
FACTOR = 2.0  # "agree": measured and predicted within this factor of each other


@dataclass(frozen=True)
class CriticalFit:
    s_min: float
    e_min: float
    b_crit: float | None  # None: no floor in steps (S_min <= 0) or none in samples
    lo: float | None  # 95% interval; None: unbounded on that side, or no repeats to resample
    hi: float | None
    runs: int
    batches: list[int]
    beyond: str | None = None  # "above" / "below" the batches measured, or None: within
    min_runs: int = 1  # the fewest runs at one batch size (MIN_REPEATS_TO_DECIDE)

    def steps(self, b: float) -> float:
        return self.s_min + self.e_min / b

    def samples(self, b: float) -> float:
        return self.steps(b) * b


def _wls(points: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """(S_min, E_min) of S = S_min + E_min / B, weights 1/S^2; None when singular."""
    sw = sx = sy = sxx = sxy = 0.0
    for b, s in points:
        w, x = 1.0 / (s * s), 1.0 / b
        sw += w
        sx += w * x
        sy += w * s
        sxx += w * x * x
        sxy += w * x * s
    det = sw * sxx - sx * sx
    if det <= 0 or not math.isfinite(det):
        return None
    e_min = (sw * sxy - sx * sy) / det
    s_min = (sy - e_min * sx) / sw
    return s_min, e_min


def _crit(fit: tuple[float, float] | None) -> float:
    """E_min / S_min; inf with no floor in steps, 0 with none in samples."""
    if fit is None:
        return math.nan
    s_min, e_min = fit
    if s_min <= 0:
        return math.inf
    return max(0.0, e_min / s_min)


def fit_critical(points: Sequence[tuple[float, float] | tuple[float, float, float | None]],
                 resamples: int = RESAMPLES, seed: int = 0) -> CriticalFit | None:
    """The fit over (batch, steps to target[, the evaluation before it]) of every run that
    reached the target; None with fewer than 3 batch sizes. The target was crossed between
    a run's evaluation before the hit and the hit (from 1 step up where the first
    evaluation reached it): the estimate takes each run's steps midway between the two
    (the hit itself where the one before is not known), and the bootstrap interval draws
    runs within each batch size and each drawn run's steps anywhere between them
    (uniformly), so a coarse schedule widens it. Fitted to the hits alone, exact steps read
    by evaluations every 40 steps gave B_crit 73 for a true 100; midway, 113 [91, 183]."""
    pts: list[tuple[float, float, float]] = []
    for p in points:
        b, st = p[0], p[1]
        lo = p[2] if len(p) > 2 else None
        if b and st and b > 0 and st > 0:
            pts.append((float(b), float(st), float(st) if lo is None else
                        min(float(st), max(1.0, float(lo)))))
    by_batch: dict[float, list[tuple[float, float]]] = {}
    for b, st, lo in pts:
        by_batch.setdefault(b, []).append((lo, st))
    if len(by_batch) < 3:
        return None
    got = _wls([(b, (lo + st) / 2) for b, st, lo in pts])
    if got is None:
        return None
    b_crit = _crit(got)
    lo = hi = None
    bracketed = any(a < z for v in by_batch.values() for a, z in v)
    if any(len(v) > 1 for v in by_batch.values()) or bracketed:
        rng = random.Random(seed)

        def draw(v: list[tuple[float, float]]) -> float:
            a, z = rng.choice(v)
            return z if a >= z else rng.uniform(a, z)

        draws = sorted(_crit(_wls([(b, draw(v)) for b, v in by_batch.items() for _ in v]))
                       for _ in range(resamples))
        draws = [d for d in draws if not math.isnan(d)]
        if draws:
            lo = draws[int(0.025 * len(draws))]
            hi = draws[min(len(draws) - 1, int(0.975 * len(draws)))]
            lo = lo if lo > 0 else None
            hi = hi if math.isfinite(hi) else None
    batches = sorted(int(b) for b in by_batch)
    beyond = ("above" if b_crit > batches[-1] else "below" if b_crit < batches[0] else None)
    return CriticalFit(got[0], got[1], b_crit if 0 < b_crit < math.inf else None, lo, hi,
                       len(pts), batches, beyond, min(len(v) for v in by_batch.values()))


# ---- the sweep's records ------------------------------------------------------------------

def b_noise(r: RunResult) -> float | None:
    """The run's B_simple (samples), or None when it was not measured."""
    return r.gns.b_simple if r.gns is not None else None


def b_noise_path(r: RunResult) -> float | None:
    return r.gns.b_noise_path if r.gns is not None else None


def b_noise_end(r: RunResult) -> float | None:
    """B_noise over the run's last block of steps (its series' last point): near the target
    for a --target run."""
    if r.gns is None or not r.gns.series:
        return None
    return r.gns.series[-1].b_simple


def has_gns(rows: list[BatchRow]) -> bool:
    return any(P.values(r["record"], b_noise_end) for r in rows
               if r.get("record") is not None)


def distinct(runs: Sequence[RunResult]) -> list[RunResult]:
    """One run per batch size and seed, the earliest repeat: repeats of a seed train the
    same steps, so their B_noise is one measurement, not several (bug caught: "median over 4
    runs" that were 2 seeds' duplicates)."""
    seen: dict[tuple[Any, Any], RunResult] = {}
    for r in sorted(runs, key=lambda x: x.repeat or 0):
        seen.setdefault((batch_global(r), r.cfg("train.seed")), r)
    return list(seen.values())


def measured_median(vals: Sequence[float]) -> float:
    """The median of measured values that is itself one of them: for an even count the
    lower middle (bug caught: 88, the mean of two values no run measured)."""
    return sorted(vals)[(len(vals) - 1) // 2]


def median_words(n: int) -> str:
    """How ``measured_median`` of ``n`` values is named: the median of an odd count, the
    lower middle of an even one (of two values: the lower, not a median a reader would
    take for their middle)."""
    return f"median over {n}" if n % 2 else f"lower middle of {n}"


def _end_values(rec: RunResult | None) -> list[float]:
    """B_noise at the end of each distinct run of a point."""
    if rec is None:
        return []
    return [v for v in (b_noise_end(x) for x in distinct(P.repeats_of(rec))) if v is not None]


def noise_cell(row: BatchRow) -> str:
    """``150 (52-360)``: the median over the point's distinct runs (one per seed) of B_noise
    at each run's end (``b_noise_end``, the figure the critical batch is compared with), a
    measured value, and their range."""
    vals = _end_values(row.get("record"))
    if not vals:
        return "-"
    med = measured_median(vals)
    return f"{med:,.0f} ({min(vals):,.0f}-{max(vals):,.0f})" if len(vals) > 1 else f"{med:,.0f}"


def batch_global(r: RunResult) -> int | None:
    """Samples per optimizer step: the batch B_noise and the fit speak of."""
    return r.batch.global_ or r.batch_size


def undecided(n: int) -> str:
    """The verdict's place when ``n`` (< ``MIN_REPEATS_TO_DECIDE``) seeds stand behind it."""
    return f"{CL.INCONCLUSIVE} ({n} seed{'s' if n != 1 else ''})"


def seeds(runs: list[RunResult]) -> int:
    """Independent runs among ``runs``: distinct seeds. Repeats of a point share its seed and
    train the same steps, so their B_noise and steps to target are one measurement, not
    several (the timing repeats are for the clock, not for the optimisation's noise)."""
    return len({r.cfg("train.seed") for r in runs})


def regime_cell(row: BatchRow) -> str:
    """Where the batch lies against the point's B_noise (``gns.regime``) over the range of
    its repeats; inconclusive with fewer than ``MIN_REPEATS_TO_DECIDE`` of them."""
    rec = row.get("record")
    vals = _end_values(rec)
    b = batch_global(rec) if rec is not None else None
    if not vals or not b:
        return "-"
    n = len(vals)  # distinct runs: one per seed
    if n < M.MIN_REPEATS_TO_DECIDE:
        return undecided(n)
    return regime(b, measured_median(vals), min(vals), max(vals))


# ---- one group of a batch sweep: prediction, measurement, verdicts ------------------------

def runs_of(rows: list[BatchRow]) -> list[RunResult]:
    return [x for r in rows if r.get("record") is not None for x in P.repeats_of(r["record"])]


def steps_to_target(r: RunResult) -> int | None:
    return r.target.steps_to_target if r.target is not None else None


def steps_to_target_lo(r: RunResult) -> int | None:
    """The step of the evaluation before the one that reached the target (0: none)."""
    return r.target.steps_to_target_lo if r.target is not None else None


def group_fit(rows: list[BatchRow]) -> CriticalFit | None:
    """The fit over every run of the group that reached its target."""
    seen: dict[tuple[Any, Any], tuple[int | None, int | None, int | None]] = {}
    for r in runs_of(rows):  # one point per batch and seed: repeats of a seed are one run
        seen.setdefault((batch_global(r), r.cfg("train.seed")),
                        (batch_global(r), steps_to_target(r), steps_to_target_lo(r)))
    return fit_critical([(b, s, lo) for b, s, lo in seen.values() if b and s])


@dataclass(frozen=True)
class Predicted:
    b_noise: float  # median over the runs of B_noise at each run's end (near the target)
    lo: float  # the runs' range
    hi: float
    runs: int
    b_path: float | None  # median over the runs of B_noise along each run's path
    b_simple: float | None  # median over the runs of B_simple over each whole window
    min_runs: int = 1  # the fewest runs with B_noise at one batch size of the group


def predicted(rows: list[BatchRow]) -> Predicted | None:
    """The group's B_noise from its runs' own measurements: at each run's end (near its
    target; gns.py), median and range, with the path and window figures beside it."""
    runs = distinct(runs_of(rows))
    end = [v for v in (b_noise_end(r) for r in runs) if v is not None]
    if not end:
        return None
    path = [v for v in (b_noise_path(r) for r in runs) if v is not None]
    simple = [v for v in (b_noise(r) for r in runs) if v is not None]
    counts = [len(_end_values(r["record"])) for r in rows if r.get("record")]
    return Predicted(measured_median(end), min(end), max(end), len(end),
                     measured_median(path) if path else None,
                     measured_median(simple) if simple else None,
                     min(c for c in counts if c))


def _iv(lo: float | None, hi: float | None) -> str:
    left = "<1" if lo is None else f"{lo:,.0f}"
    right = "unbounded" if hi is None else f"{hi:,.0f}"
    return f"[{left}, {right}]"


def _ratio_text(measured: float, pred: float, decided: bool = True,
                span: tuple[float, float] | None = None) -> str:
    """The ratio, and whether it lies within ``FACTOR`` when ``decided``: within where its
    whole range ``span`` (the measured fit's interval over the predicted runs' range) does,
    not within where the whole range lies outside, else not decided, with the range."""
    ratio = measured / pred
    if not decided:
        return f"{ratio:.2f}"
    lo, hi = span or (ratio, ratio)
    if 1 / FACTOR <= lo and hi <= FACTOR:
        word = "within"
    elif hi < 1 / FACTOR or lo > FACTOR:
        word = "not within"
    else:
        right = "unbounded" if math.isinf(hi) else f"{hi:.2f}"
        return (f"{ratio:.2f} [{lo:.2f}, {right}], whether within a factor of {FACTOR:g} not "
                "decided by the intervals")
    return f"{ratio:.2f}, {word} a factor of {FACTOR:g}"


def _bounds(lo: float | None, hi: float | None) -> tuple[float, float]:
    """An interval's ends, an open end as 0 or infinity."""
    return (lo if lo is not None else 0.0), (hi if hi is not None else math.inf)


def _ratio_line(fit: CriticalFit, pred: Predicted) -> str:
    """``; measured / predicted = ...`` against the end and the path figures; whether they
    agree is decided only with ``MIN_REPEATS_TO_DECIDE`` runs at every batch size behind
    either figure, and on the measured fit's interval against the predicted runs' range."""
    assert fit.b_crit is not None
    runs = min(fit.min_runs, pred.min_runs)
    decided = runs >= M.MIN_REPEATS_TO_DECIDE
    flo, fhi = _bounds(fit.lo, fit.hi)
    text = "; measured / predicted = " + _ratio_text(
        fit.b_crit, pred.b_noise, decided, (flo / pred.hi, fhi / pred.lo))
    if pred.b_path:
        text += (" (along the path: " + _ratio_text(
            fit.b_crit, pred.b_path, decided, (flo / pred.b_path, fhi / pred.b_path)) + ")")
    if not decided:
        text += (f", {undecided(runs)} at a batch size: whether they agree within a factor "
                 f"of {FACTOR:g} is not decided")
    return text


def fit_text(fit: CriticalFit) -> str:
    head = (f"{len(fit.batches)} batch sizes ({', '.join(map(str, fit.batches))}), {fit.runs} "
            f"runs that reached the target")
    if fit.b_crit is None:
        where = ("no floor in steps: they fell as fast as 1/batch, so the critical batch lies "
                 "above the largest measured" if fit.s_min <= 0 else
                 "the steps did not fall with the batch: the critical batch lies below the "
                 "smallest measured")
        return f"fit over {head}: {where}"
    beyond = (f"; beyond the batches measured ({fit.beyond} them): an extrapolation"
              if fit.beyond else "")
    ci = _iv(fit.lo, fit.hi) if (fit.lo, fit.hi) != (None, None) else "(no repeats: no interval)"
    return (f"E_min / S_min = {fit.b_crit:,.0f} samples {ci} (S_min {fit.s_min:,.1f} steps, "
            f"E_min {fit.e_min:,.0f} samples; fit over {head}{beyond})")


def verdict_lines(rows: list[BatchRow], rec: RulePicks | None = None,
                  where: str = "") -> list[str]:
    """The batch rule's critical-batch lines for one group: the prediction, the measurement
    and their ratio, what the model says of each batch size, and where the memory/time
    rule's picks (``rec``: ``recommend_batch``) disagree with it."""
    pred, fit = predicted(rows), group_fit(rows)
    if pred is None and fit is None:
        return []
    lines = []
    if pred is not None:
        beside = [f"{what} {v:,.0f}" for what, v in (("along each run's path", pred.b_path),
                                                      ("B_simple over the whole window",
                                                       pred.b_simple)) if v is not None]
        lines.append(f"- Critical batch{where}, predicted by the gradient noise scale: B_noise "
                     f"{pred.b_noise:,.0f} samples at each run's end ({median_words(pred.runs)} "
                     f"distinct runs, one per batch size and seed, range {pred.lo:,.0f}-{pred.hi:,.0f}; "
                     + "; ".join(beside + ["docs/CRITICAL_BATCH.md"]) + ").")
    if fit is not None:
        line = f"- Critical batch{where}, measured from the steps to the target: {fit_text(fit)}"
        if pred is not None and fit.b_crit is not None:
            line += _ratio_line(fit, pred)
        lines.append(line + ".")
    if fit is not None and fit.b_crit is not None:
        crit, which, runs = fit.b_crit, "measured", fit.min_runs
        span = _bounds(fit.lo, fit.hi)
    elif pred is not None:
        crit, which, runs = pred.b_noise, "predicted", pred.min_runs
        span = (pred.lo, pred.hi)
    else:
        return lines
    if runs < M.MIN_REPEATS_TO_DECIDE:
        return lines + [f"- Where each batch size lies against the {which} critical batch "
                        f"{crit:,.0f}: {undecided(runs)} at a batch size; "
                        f"{M.MIN_REPEATS_TO_DECIDE} or more seeds (a grid over seed) decide "
                        "it."]
    return lines + _model_lines(rows, crit, span, which, rec)


def _model_lines(rows: list[BatchRow], crit: float, span: tuple[float, float], which: str,
                 rec: RulePicks | None) -> list[str]:
    """Where each batch size lies against the critical batch, judged against its whole
    ``span`` (the fit's interval, or the predicted runs' range): below only where twice the
    batch is under its low end, above only where the batch is twice its high end or more."""
    lo, hi = span
    by: dict[str, list[int]] = {"below": [], "near": [], "above": []}
    for r in rows:
        b = batch_global(r["record"]) if r.get("record") is not None else None
        if b and r["status"] in ("ok", "target_not_reached"):
            by[regime(b, crit, lo, hi)].append(b)
    parts = [f"{k} it ({', '.join(map(str, v))}): {REGIME_TEXT[k]}" for k, v in by.items() if v]
    against = f"{crit:,.0f} {_iv(lo or None, None if math.isinf(hi) else hi)}"
    out = [f"- By the model with the {which} critical batch {against}: " + "; ".join(parts)
           + " (S = S_min (1 + B_crit/B), E = E_min (1 + B/B_crit); below, near or above it "
           "over the whole interval)."]
    for key, label in (("fastest", "fastest per epoch"), ("most_efficient", "most efficient")):
        pick = (rec or {}).get(key)
        b = batch_global(pick["record"]) if pick and pick.get("record") else None
        if not b or pick is None or pick.get("group") != rows[0]["group"]:
            continue
        if b >= 2 * hi:
            out.append(f"- The memory/time rule's {label} batch {b} lies above the critical "
                       f"batch: by the model it needs {1 + b / crit:.1f}x the fewest samples "
                       f"for {1 + crit / b:.2f}x the fewest steps, so its samples/s do not "
                       "turn into time to a target in proportion.")
        elif b * 2 <= lo:
            out.append(f"- The memory/time rule's {label} batch {b} lies below the critical "
                       f"batch: it costs no extra samples ({1 + b / crit:.2f}x the fewest) - "
                       "the two rules agree.")
    return out


def group_lines(rows: list[BatchRow], rec: RulePicks | None = None) -> list[str]:
    """``verdict_lines`` for every group of a batch table."""
    groups = list(dict.fromkeys(r["group"] for r in rows))
    out = []
    for g in groups:
        where = f" ({g})" if g and len(groups) > 1 else ""
        out += verdict_lines([r for r in rows if r["group"] == g], rec, where)
    return out
