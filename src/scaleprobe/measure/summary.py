"""From per-rank raw records to the result's metrics: step statistics, breakdown, epoch
time, memory, straggler line. Pure Python, no torch."""

from __future__ import annotations

from typing import Any

from scaleprobe.measure.stats import median, summarize

PHASES = ("data", "h2d", "forward", "backward", "optimizer", "comm")


def breakdown(phase_times: dict[str, list[float]], exposed_comm_s: float | None) -> dict[str, Any]:
    """Mean seconds per phase: the means add up to the mean step time exactly.

    With overlapped communication (DDP) the gradient all-reduce runs inside the backward
    pass; its exposed part, measured by calibration, is moved from backward to comm."""
    out: dict[str, Any] = {}
    n = max((len(v) for v in phase_times.values()), default=0)
    if n == 0:
        return dict.fromkeys(PHASES)
    for p in PHASES:
        vals = phase_times.get(p) or []
        out[p] = sum(vals) / n if vals else 0.0
    if exposed_comm_s is not None:
        moved = min(exposed_comm_s, out["backward"])
        out["backward"] -= moved
        out["comm"] += moved
    return out


def straggler(ranks: list[dict[str, Any]]) -> dict[str, Any] | None:
    meds = [(r["rank"], r["step_time_s"]["median"]) for r in ranks if r.get("step_time_s")]
    if len(meds) < 2:
        return None
    mid = median([m for _, m in meds])
    slow_rank, slow = max(meds, key=lambda x: x[1])
    return {"slowest_rank": slow_rank, "slowest_vs_median": slow / mid if mid else None,
            "steps_done": {str(r["rank"]): r["steps_done"] for r in ranks},
            "line": f"slowest rank {slow_rank}: {slow * 1000:.1f} ms/step vs median "
                    f"{mid * 1000:.1f} ms ({slow / mid:.2f}x); steps done per rank: "
                    + ", ".join(f"{r['rank']}:{r['steps_done']}" for r in ranks)}


def rank_summary(raw: dict[str, Any]) -> dict[str, Any]:
    st = summarize(raw["step_times_s"])
    exposed = (raw.get("comm") or {}).get("exposed_s")
    bd = breakdown(raw["phase_times_s"], exposed)
    sps = raw["samples_per_step"] / st["median"] if st and st["median"] > 0 else None
    return {"rank": raw["rank"], "host": raw["host"], "device": raw.get("device"),
            "step_time_s": st, "breakdown_s": bd, "steps_done": raw["steps_done"],
            "steps_timed": raw["steps_timed"], "samples_per_s": sps,
            "strategy_metrics": raw.get("strategy_metrics") or {}}


def epoch_time(raw0: dict[str, Any], step_median_s: float | None,
               steps_per_epoch: int) -> tuple[float | None, bool | None]:
    """Measured when whole epochs ran (median of epochs after the first, which carries the
    warm-up, when there are several), else projected from the steady-state step time."""
    walls = raw0.get("epoch_wall_s") or []
    if walls and raw0.get("epochs_complete"):
        return (median(walls[1:]) if len(walls) > 1 else walls[0]), False
    if step_median_s is None:
        return None, None
    return step_median_s * steps_per_epoch, True
