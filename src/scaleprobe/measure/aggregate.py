"""From per-rank raw records to the result's metrics: step statistics, breakdown, epoch
time, memory, straggler line. Pure Python, no torch."""

from __future__ import annotations

from typing import Any

from scaleprobe.core import metrics as M
from scaleprobe.core.rank_record import RankRecord
from scaleprobe.core.run_metrics import BREAKDOWN_PHASES, Breakdown, StepTime
from scaleprobe.core.run_parts import RankSummary
from scaleprobe.measure.stats import median, quantile, summarize

PHASES = BREAKDOWN_PHASES  # the result's order (the timer marks them in the step's own order)


def typical_steps(step_times: list[float]) -> list[int]:
    """Indices of the steps whose time lies between the 5th and 95th percentile: rare slow
    steps (an epoch boundary, a page fault) drop out, periodic work (local SGD averaging every
    K steps) stays in."""
    if len(step_times) < 10:
        return list(range(len(step_times)))
    lo, hi = quantile(step_times, 0.05), quantile(step_times, 0.95)
    return [i for i, t in enumerate(step_times) if lo <= t <= hi]


def _typical_basis(phase_times: dict[str, list[float]],
                   step_times: list[float] | None) -> tuple[list[int], float] | None:
    """The steps a breakdown averages over (``typical_steps``) and the factor that lays their
    mean over the median step; None when no step was timed."""
    n = max((len(v) for v in phase_times.values()), default=0)
    if n == 0:
        return None
    idx = typical_steps(step_times) if step_times and len(step_times) == n else list(range(n))
    total = sum(sum(vals[i] for i in idx) / len(idx)
                for p, vals in phase_times.items() if p in PHASES and vals)
    scale = (median(step_times) / total
             if step_times and len(step_times) == n and total > 0 else 1.0)
    return idx, scale


def per_median_step(values: list[float], phase_times: dict[str, list[float]],
                    step_times: list[float] | None) -> float | None:
    """A per-step figure on the breakdown's own basis: its mean over the typical steps, laid
    over the median step like each phase. A figure that is at least a phase in every step
    (DDP's all-reduce in flight vs its exposed wait) stays at least that phase here, which a
    median of the one against the breakdown's mean of the other does not."""
    basis = _typical_basis(phase_times, step_times)
    if basis is None or not values:
        return None
    idx, scale = basis
    if len(values) != max(len(v) for v in phase_times.values()):
        raise ValueError(f"{len(values)} values for {len(idx)} steps' phases")
    return sum(values[i] for i in idx) / len(idx) * scale


def breakdown(phase_times: dict[str, list[float]],
              step_times: list[float] | None = None) -> dict[str, Any]:
    """Seconds per phase of the median step: each phase's share is its mean over the steps
    between the 5th and 95th percentile of step time (``typical_steps``), and the shares are
    applied to the median step time, so the breakdown adds up to the headline figure. Each
    phase is what the step measured: exposed communication was timed in the step itself
    (measure/comm/hook.py, strategies/fsdp_comm.py) and moved out of backward there, never carved
    from a difference of two medians."""
    basis = _typical_basis(phase_times, step_times)
    if basis is None:
        return dict.fromkeys(PHASES)
    idx, scale = basis
    out: dict[str, Any] = {}
    for p in PHASES:
        vals = phase_times.get(p) or []
        # each phase keeps its share of the typical step; the shares are laid over the median
        # step, so the breakdown adds up to the headline step time
        out[p] = sum(vals[i] for i in idx) / len(idx) * scale if vals else 0.0
    return out


def straggler(ranks: list[RankSummary],
              arrival_lag_s: dict[str, float | None] | None = None) -> dict[str, Any] | None:
    """The slowest rank: by median step, or, for a synchronous parameter server whose
    workers move in lockstep (equal steps), the worker whose gradients reach the server last
    (``arrival_lag_s``: per worker, the median time after the round's first push)."""
    meds = [(r.rank, r.step_time_s.median) for r in ranks
            if r.step_time_s and r.step_time_s.median is not None]
    if len(meds) < 2:
        return None
    mid = median([m for _, m in meds])
    slow_rank, slow = max(meds, key=lambda x: x[1])
    done = ", ".join(f"{r.rank}:{r.steps_done}" for r in ranks)
    line = (f"slowest rank {slow_rank}: {slow * 1000:.1f} ms/step vs median {mid * 1000:.1f} "
            f"ms ({slow / mid:.2f}x); steps done per rank: {done}")
    lags = {int(k): float(v) for k, v in (arrival_lag_s or {}).items() if v is not None}
    if lags and max(lags.values()) > 0:
        slow_rank = max(lags, key=lambda w: lags[w])
        slow = dict(meds).get(slow_rank, slow)
        line = (f"slowest rank {slow_rank}: its gradients reach the server "
                f"{lags[slow_rank] * 1000:.1f} ms after the first worker's (median per round; "
                "the others wait for it); " + line.replace("slowest rank", "longest step: rank"))
    return {"slowest_rank": slow_rank, "slowest_vs_median": slow / mid if mid else None,
            "steps_done": {str(r.rank): r.steps_done for r in ranks}, "line": line}


def rank_summary(raw: RankRecord) -> RankSummary:
    st = summarize(raw.step_times_s)
    bd = breakdown(raw.phase_times_s, raw.step_times_s)
    for p in raw.phases_unseen:  # not seen is not zero
        bd[p] = None
    window = raw.window_s if raw.window_s else (sum(raw.step_times_s) or None)
    sps = M.window_samples_per_s(raw.samples_per_step, raw.steps_timed or len(raw.step_times_s),
                                 window)
    step_sps = M.step_samples_per_s(raw.samples_per_step, st["median"] if st else None)
    return RankSummary(rank=raw.rank, host=raw.host, device=raw.device,
                       step_time_s=StepTime.from_dict(st) if st else None,
                       breakdown_s=Breakdown.from_dict(bd), steps_done=raw.steps_done,
                       steps_timed=raw.steps_timed, samples_per_s=sps,
                       samples_per_s_median_step=step_sps,
                       strategy_metrics=raw.strategy_metrics or {})


def epoch_time(raw0: RankRecord, step_median_s: float | None,
               steps_per_epoch: int) -> tuple[float | None, bool | None]:
    """Measured when whole epochs ran (median of epochs after the first, which carries the
    warm-up, when there are several), else projected from the steady-state step time."""
    walls = raw0.epoch_wall_s or []
    if walls and raw0.epochs_complete:
        return (median(walls[1:]) if len(walls) > 1 else walls[0]), False
    projected = projected_epoch_s(step_median_s, steps_per_epoch)
    return (projected, True) if projected is not None else (None, None)


def projected_epoch_s(step_median_s: float | None, steps_per_epoch: int | None) -> float | None:
    """An epoch projected from the steady-state step: median step x steps per epoch."""
    if step_median_s is None or not steps_per_epoch:
        return None
    return step_median_s * steps_per_epoch
