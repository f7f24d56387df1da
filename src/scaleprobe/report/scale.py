"""Scaling analysis of ``scale`` experiments: speedup and efficiency against the 1-process
run, and what the gap was lost to. Usable outside the report (the scale command prints it).

Speedup is measured, never extrapolated: ``samples/s at N / samples/s at 1``; efficiency is
``speedup / N``. The gap is attributed from the step-time breakdowns of the two runs, as
shares of the N-process step:

    communication  exposed communication at N (comm phase)
    data wait      data wait at N minus the data wait expected from the 1-process run
    slower compute h2d + forward + backward + optimizer at N minus the expected compute

"Expected" scales the 1-process figure by the per-device batch ratio, so strong scaling (a
fixed global batch split over more devices) is attributed correctly too.
"""

from __future__ import annotations

from typing import Any

from scaleprobe.report import fmt
from scaleprobe.report import records as R
from scaleprobe.report.thresholds import DEFAULT, Thresholds

SCALE_HEADERS = ("Processes", "Samples/s", "Speedup", "Efficiency", "Step median",
                 "Comm", "Data wait", "Lost to")
COMPUTE = ("h2d", "forward", "backward", "optimizer")


def nproc(rec: dict[str, Any]) -> int | None:
    n = R.point(rec).get("nproc")
    if isinstance(n, (int, float)):
        return int(n)
    return R.world_size(rec)


def _phase_sum(rec: dict[str, Any], phases: tuple[str, ...]) -> float | None:
    vals = [R.phase_s(rec, p) for p in phases]
    if all(v is None for v in vals):
        return None
    return sum(v for v in vals if v is not None)


def lost_to(rec: dict[str, Any], base: dict[str, Any] | None,
            th: Thresholds = DEFAULT) -> dict[str, float]:
    """Shares of the N-process step lost to communication, extra data wait, slower compute."""
    total = R.breakdown_total_s(rec)
    if not total:
        return {}
    out: dict[str, float] = {}
    comm = R.phase_s(rec, "comm")
    if comm:
        out["communication"] = comm / total
    if base is not None and R.breakdown_total_s(base):
        ratio = _batch_ratio(rec, base)
        for label, phases in (("data wait", ("data",)), ("slower compute", COMPUTE)):
            now, then = _phase_sum(rec, phases), _phase_sum(base, phases)
            if now is not None and then is not None and now > then * ratio:
                out[label] = (now - then * ratio) / total
    elif R.phase_s(rec, "data"):
        out["data wait"] = R.phase_s(rec, "data") / total
    return {k: v for k, v in out.items() if v >= th.minor_fraction}


def _batch_ratio(rec: dict[str, Any], base: dict[str, Any]) -> float:
    a, b = R.batch_size(rec), R.batch_size(base)
    return a / b if a and b else 1.0


def scale_table(records: list[dict[str, Any]], th: Thresholds = DEFAULT) -> list[dict[str, Any]]:
    """One row per process count of each scale experiment, with speedup and efficiency vs
    that experiment's 1-process run (None when it has none) and a ``line`` such as
    ``2 processes: 1.62x (81%); lost to: communication 12%, data wait 5%``."""
    rows: list[dict[str, Any]] = []
    for eid, recs in R.by_experiment(records, "scale").items():
        recs = sorted(R.latest_per_point(recs), key=lambda r: nproc(r) or 0)
        base = next((r for r in recs if nproc(r) == 1 and r.get("status") == "ok"), None)
        base_sps = R.metric(base, "samples_per_s") if base else None
        for r in recs:
            n, sps = nproc(r), R.metric(r, "samples_per_s")
            speedup = sps / base_sps if sps and base_sps and r.get("status") == "ok" else None
            eff = speedup / n if speedup is not None and n else None
            lost = lost_to(r, base, th) if n and n > 1 and r.get("status") == "ok" else {}
            row = {"experiment": eid, "run": R.name(r), "nproc": n, "status": r.get("status"),
                   "error": r.get("error"), "samples_per_s": sps, "speedup": speedup,
                   "efficiency": eff, "step_median_s": R.step_median_s(r),
                   "comm_fraction": R.metric(r, "comm_fraction"),
                   "data_wait_fraction": R.metric(r, "data_wait_fraction"), "lost": lost}
            row["line"] = scale_line(row)
            rows.append(row)
    return rows


def scale_line(row: dict[str, Any]) -> str:
    n = row["nproc"]
    head = f"{n} process{'es' if n != 1 else ''}"
    if row["status"] != "ok":
        return f"{head}: {R.status_text(row)}"
    if row["speedup"] is None:
        return f"{head}: {fmt.rate(row['samples_per_s'])} samples/s (no 1-process run to compare)"
    line = f"{head}: {row['speedup']:.2f}x ({fmt.pct(row['efficiency'])})"
    if row["lost"]:
        line += "; lost to: " + _lost_text(row["lost"])
    return line


def _lost_text(lost: dict[str, float]) -> str:
    return ", ".join(f"{k} {fmt.pct(v)}" for k, v in sorted(lost.items(), key=lambda kv: -kv[1]))


def scale_cells(row: dict[str, Any]) -> list[str]:
    head = [fmt.num(row["nproc"], "d")]
    if row["status"] != "ok":
        return head + [R.status_text(row)[:80]] + ["-"] * 6
    return head + [fmt.rate(row["samples_per_s"]), fmt.ratio(row["speedup"]),
                   fmt.pct(row["efficiency"]), fmt.ms(row["step_median_s"]),
                   fmt.pct(row["comm_fraction"]), fmt.pct(row["data_wait_fraction"]),
                   _lost_text(row["lost"]) or "-"]
