"""Time to target across an experiment's points (``scale`` or a sweep run with ``--target``).

Each point runs ``repeats`` times with its own seed per repeat (seed, seed+1, ...; target.py
``repeat_config``), so repeat i of every point shares a seed and the points are paired by
seed. Per point: the median time to target over the runs that reached it, the spread (fastest
- slowest) and how many of the runs reached it. Between points:

    time-to-target speedup   time at the baseline (1 process, else the smallest count
                             measured) / time at N, paired by seed (``metrics.ratio_interval``
                             on time_to_target_s); "inconclusive" unless its interval
                             excludes 1. A run that did not reach the target has no time and
                             drops out of the pairs (the table says k of n reached).
    statistical efficiency   time-to-target speedup / throughput speedup = (samples to target
                             at the baseline) / (samples to target at N): the share of the
                             throughput gain that survives as time to target. Below 1 the
                             larger global batch needed more samples to reach the same quality.

The time-to-target speedup is a claim (core/claim.py, ``ttt_claim``) whose sources are every
repeat of both points, the paired speedup's beside it: a run measured under load puts "under
load" in its cell and the load caveat on its line.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scaleprobe.core import claim as CL
from scaleprobe.core import fmt
from scaleprobe.core import metrics as M
from scaleprobe.core.record import Record
from scaleprobe.core.result_model import RunResult
from scaleprobe.core.run_parts import TimeToTarget
from scaleprobe.features.target import target_text as direction_text
from scaleprobe.measure.stats import median
from scaleprobe.report.reading import repeats as P
from scaleprobe.report.tables.rows import ScaleRow, TargetColumns, TargetFields, TargetRow

# the time-to-target speedup is paired by seed, not the ratio of the Time to target cells:
# named so (as the scale table's Paired speedup)
TARGET_HEADERS = ("Time to target", "Reached", "Samples to target", "Paired TTT speedup")


def time_to_target_s(r: RunResult) -> float | None:
    return r.target.time_to_target_s if r.target is not None else None


def samples_to_target(r: RunResult) -> float | None:
    return r.target.samples_to_target if r.target is not None else None


def time_to_target_lo_s(r: RunResult) -> float | None:
    """The time of the evaluation before the one that reached the target (0: none)."""
    return r.target.time_to_target_lo_s if r.target is not None else None


def samples_to_target_lo(r: RunResult) -> float | None:
    """The samples at the evaluation before the one that reached the target
    (``metrics.samples_of``, as the samples to target are)."""
    t = r.target
    n = M.samples_of(t.steps_to_target_lo, r.batch.global_) if t is not None else None
    return None if n is None else float(n)


# each figure's lower end: the target was crossed after the evaluation before the one that
# reached it, so a run's figure lies between the two
LOWER_END: dict[Callable[[RunResult], float | None], Callable[[RunResult], float | None]] = {
    time_to_target_s: time_to_target_lo_s, samples_to_target: samples_to_target_lo}
BRACKETED = "; widened to the runs' evaluation brackets (the target crossed between two)"


def target_ratio(a: RunResult, b: RunResult,
                 figure: Callable[[RunResult], float | None]) -> M.Interval | None:
    """figure(B) / figure(A) over the points' runs paired by seed (``metrics.ratio_interval``),
    widened to what the evaluations leave open: each run's figure is that of the evaluation
    that reached the target, which was crossed after the evaluation before it, so B / A lies
    in [B's lower end / A, B / A's lower end] for each pair. A lower end of 0 (the first
    evaluation reached it) leaves that side unbounded: inconclusive. Records without the
    lower ends are taken as they are."""
    av, bv, _, _ = P.paired(a, b, figure)
    iv = M.ratio_interval(av, bv)
    lower = LOWER_END.get(figure)
    if iv is None or lower is None:
        return iv
    a_lo, b_lo, _, _ = P.paired(a, b, lower)
    both = [i for i, (x, y) in enumerate(zip(av, bv, strict=True))
            if x is not None and y is not None and x > 0 and y > 0]
    if any(a_lo[i] is None or b_lo[i] is None for i in both):
        return iv
    widened = False
    lo, hi = iv.lo, iv.hi
    if any((b_lo[i] or 0.0) < (bv[i] or 0.0) for i in both):
        down = M.ratio_interval([av[i] for i in both], [b_lo[i] for i in both])
        bottom = down.lo if down is not None and all((b_lo[i] or 0) > 0 for i in both) else 0.0
        lo, widened = min(lo, bottom), True
    if any((a_lo[i] or 0.0) < (av[i] or 0.0) for i in both):
        up = M.ratio_interval([a_lo[i] for i in both], [bv[i] for i in both])
        top = up.hi if up is not None and all((a_lo[i] or 0) > 0 for i in both) else math.inf
        hi, widened = max(hi, top), True
    if not widened:
        return iv
    return M.Interval(iv.estimate, lo, hi, iv.n, iv.method + BRACKETED, iv.log_sd,
                      iv.within_log_h, iv.welch)


def has_target(r: RunResult) -> bool:
    return bool(r.cfg("train.target")) or r.target is not None


def target_text(r: RunResult) -> str:
    """``accuracy >= 0.95`` or ``loss <= 2.1``: the run's target with its direction."""
    t = r.target
    if t is not None and t.metric is not None and t.target is not None:
        return direction_text(t.metric, t.target)
    metric, sep, value = str(r.cfg("train.target") or "").partition("=")
    try:
        return direction_text(metric.strip(), float(value)) if sep else "the target"
    except ValueError:
        return f"{metric.strip()} = {value.strip()}"


def _median(vals: list[float]) -> float | None:
    return median(vals) if vals else None


def point_figures(r: RunResult) -> TargetColumns:
    """A point's time to target over its repeats (seeds)."""
    reps = P.repeats_of(r)
    times = [t for t in (time_to_target_s(x) for x in reps) if t is not None]
    samples = [s for s in (samples_to_target(x) for x in reps) if s is not None]
    return {"ttt_runs": len(reps), "ttt_reached": len(times), "ttt_median_s": _median(times),
            "ttt_min_s": min(times) if times else None,
            "ttt_max_s": max(times) if times else None,
            "samples_to_target_median": _median(samples)}


def ttt_interval(base: RunResult, r: RunResult) -> M.Interval | None:
    """time at 1 / time at N over the runs paired by seed (repeat index) that both reached
    the target. No within-run spread exists for a time to target: one pair gives None."""
    return target_ratio(r, base, time_to_target_s)


def target_fields(r: RunResult, base: RunResult | None, ok: bool) -> TargetFields | None:
    """The time-to-target columns of one scale row (None without --target)."""
    if not has_target(r):
        return None
    fig = point_figures(r)
    out = TargetFields(ttt_runs=fig["ttt_runs"], ttt_reached=fig["ttt_reached"],
                       ttt_median_s=fig["ttt_median_s"], ttt_min_s=fig["ttt_min_s"],
                       ttt_max_s=fig["ttt_max_s"],
                       samples_to_target_median=fig["samples_to_target_median"],
                       target_text=target_text(r), ttt_speedup_interval=None)
    iv = None
    if ok and base is not None and r is not base and r.point != base.point:
        iv = ttt_interval(base, r)
        b = point_figures(base)
        out["ttt_speedup"] = iv.estimate if iv is not None else M.time_speedup(
            out["ttt_median_s"], b["ttt_median_s"])
        out["samples_ratio"] = (out["samples_to_target_median"] / b["samples_to_target_median"]
                                if out["samples_to_target_median"]
                                and b["samples_to_target_median"] else None)
    out["ttt_speedup_interval"] = iv
    return out


def target_cells(row: Mapping[str, Any]) -> list[str]:
    """The time-to-target cells of a batch or a scale row (``rows.TargetRow``)."""
    if "ttt_runs" not in row:
        return ["-"] * len(TARGET_HEADERS)
    med = row["ttt_median_s"]
    t = "not reached" if med is None else fmt.duration(med)
    if med is not None and row["ttt_reached"] > 1:
        t += f" ({fmt.duration(row['ttt_min_s'])}-{fmt.duration(row['ttt_max_s'])})"
    claim = ttt_claim(row)
    if claim is None:
        sp = "-"
    elif row.get("implausible"):
        sp = f"{row['ttt_speedup']:.2f}x (implausible runs)" + (
            ", under load" if claim.under_load else "")
    else:  # the claim's cell: "not resolved", "inconclusive (1 repeat)", "under load"
        sp = claim.cell()
    samples = row.get("samples_to_target_median")
    return [t, f"{row['ttt_reached']}/{row['ttt_runs']}",
            "-" if samples is None else f"{samples:,.0f}", sp]


def ttt_sources(row: Mapping[str, Any]) -> tuple[CL.Source, ...]:
    """The runs behind a row's time-to-target speedup: every repeat of both points, each
    with its load (``core.machine_load.sources`` over the row's point and its baseline), the
    same runs as the paired speedup's claim beside it (``scale.speedup_claim``), so the two
    speedups of one row stand on one set of runs and carry the same caveat."""
    c = row.get("claim")
    return c.sources if isinstance(c, CL.Claim) else ()


def ttt_claim(row: Mapping[str, Any]) -> CL.Claim | None:
    """The row's time-to-target speedup (time at the baseline / time at N, paired by seed) as
    a claim with its sources (``ttt_sources``); None where there is none. A speedup without an
    interval stands on one pair of runs that reached the target."""
    value = row.get("ttt_speedup")
    if value is None:
        return None
    iv = row.get("ttt_speedup_interval")
    b = row.get("base_nproc") or 1
    return CL.Claim("time-to-target speedup", value, iv,
                    above=f"sooner than {_processes(b)}", below=f"later than {_processes(b)}",
                    repeats=(1, 1) if iv is None else (), sources=ttt_sources(row),
                    pairing="paired by seed (repeat index)", kind="time-to-target speedup")


def _processes(n: int) -> str:
    return f"{n} process{'es' if n != 1 else ''}"


def target_line(row: ScaleRow) -> str | None:
    """``2 processes: accuracy >= 0.8 reached 1.31x sooner [1.05, 1.63] ...`` or inconclusive,
    with the throughput speedup beside it and what the difference means."""
    if "ttt_runs" not in row or row.get("is_base", row["nproc"] == 1) \
            or row.get("ttt_speedup") is None:
        return None
    n, iv = row["nproc"], row.get("ttt_speedup_interval")
    head = f"{n} processes, time to {row['target_text']}"
    than = _processes(row.get("base_nproc") or 1)  # the baseline: 1 process, or the smallest
    # the load of the runs behind it, as on the paired speedup's line (the same runs)
    caveat = CL.load_caveat(ttt_sources(row))
    if row.get("implausible"):
        # the same runs gave an impossible throughput speedup: their clocks are not trusted
        return (f"{head}: {row['ttt_speedup']:.2f}x, left out of every verdict (the "
                "throughput speedup of the same runs is implausible)"
                + (f"; {caveat}" if caveat else ""))
    claim = ttt_claim(row)  # its words: "sooner than 1 process" / "later than ..."
    if iv is not None and claim is not None and claim.decided:
        text = f"{head}: reached {claim.verdict} by {iv.text()}"
    else:
        text = f"{head}: {CL.undecided(iv, 1.0, 'time-to-target speedup')}"
    if row.get("speedup") is not None:
        text += f"; throughput speedup {row['speedup']:.2f}x"
    eff = statistical_efficiency(row)
    if eff is not None:
        text += (f"; statistical efficiency {eff:.2f} (it needed {row['samples_ratio']:.2f}x "
                 f"the samples of {than} to reach the target)")
    return text + (f"; {caveat}" if caveat else "")


def statistical_efficiency(row: ScaleRow) -> float | None:
    """Samples to target at the baseline (1 process, else the smallest count measured) / at
    N: the share of the throughput speedup that the larger global batch keeps as time to
    target (1.0: none lost)."""
    ratio = row.get("samples_ratio")
    return 1.0 / ratio if ratio else None


def lr_statement(records: list[Record]) -> str:
    """The learning-rate scaling and warm-up the runs used: a time-to-target comparison means
    nothing without them (Goyal et al. 2017)."""
    recs = [r for r in records if isinstance(r, RunResult) and has_target(r)]
    if not recs:
        return ""
    r = recs[0]
    lr, scaling = r.cfg_number("train.lr"), r.cfg("train.lr_scaling")
    if lr is None:
        return ""  # not recorded: nothing to state
    steps = r.metrics.lr_warmup_steps or r.cfg("train.warmup_steps")
    epochs = r.cfg_number("train.warmup_epochs")
    warm = (f"{epochs:g} epoch{'s' if epochs != 1 else ''} ({steps} steps)"
            if epochs is not None else f"{steps} steps")
    eff = sorted({(x.world_size or 1, x.metrics.lr_effective) for x in recs
                  if x.metrics.lr_effective is not None})
    at = ", ".join(f"{lr_x:g} at {n} process{'es' if n != 1 else ''}" for n, lr_x in eff)
    if scaling == "linear":
        return (f"learning rate: --lr {lr:g} for one device's batch, --lr-scaling linear "
                f"(Goyal et al. 2017: {at}), reached after a linear warm-up of {warm}")
    return (f"learning rate: --lr {lr:g} at every process count (--lr-scaling none: a larger "
            "global batch takes the same step size, which usually costs it samples; "
            "--lr-scaling linear scales it with the batch after a warm-up)")


def explain(rows: list[ScaleRow], records: list[Record]) -> list[str]:
    """Lines for the scale output and the report: the per-count verdicts, then why the two
    speedups differ."""
    lines = [x for x in (target_line(r) for r in rows) if x]
    if not lines:
        return []
    lines.append("time to target counts training wall clock from the first step, evaluation "
                 "excluded (MLPerf Training's rule); throughput speedup counts samples/s only. "
                 "They differ by the statistical efficiency: a larger global batch may need "
                 "more samples (epochs) to reach the same quality (McCandlish et al. 2018)")
    lr = lr_statement(records)
    if lr:
        lines.append(lr)
    return lines


def table_parts(headers: tuple[str, ...] | list[str], rows: Sequence[TargetRow],
                cells: Any) -> tuple[list[str], list[list[str]]]:
    """A table's headers and cells, with the time-to-target columns added when any row
    has them: the two speedups then stand side by side."""
    extra = any("ttt_runs" in r for r in rows)
    hs = list(headers) + (list(TARGET_HEADERS) if extra else [])
    return hs, [cells(r) + (target_cells(r) if extra else []) for r in rows]



def curve_series(runs: Sequence[RunResult], label: Callable[[RunResult], str]
                 ) -> list[tuple[str, TimeToTarget]]:
    """(label, target block) of each point's shown run (its median repeat)."""
    return [(label(r), r.target) for r in runs if r.target is not None]
