"""Batch-size and loader-setting analysis of sweep runs, usable outside the report.

``batch_table(records)`` gives one row per batch size (grouped by the sweep's other axes)
with growth rates between consecutive points, in the style of the reference studies::

    | Batch size | Devices | Peak memory | Growth | Epoch time | Growth | Samples/s | ...

``recommend_batch(records)`` applies the rule: a larger batch pays only while epoch time
falls faster than memory grows; it names the fastest batch size and the most efficient one
(samples/s per GiB of peak memory: device memory when measured, else host memory).

``loader_table`` / ``recommend_workers`` do the same for loader settings: the fewest loader
workers within ``Thresholds.workers_within`` of the best samples/s.
"""

from __future__ import annotations

from typing import Any

from scaleprobe.report import fmt
from scaleprobe.report import records as R
from scaleprobe.report.thresholds import DEFAULT, Thresholds

BATCH_HEADERS = ("Batch size", "Devices", "Peak memory", "Growth", "Epoch time", "Growth",
                 "Samples/s", "CPU util", "GPU util")
LOADER_HEADERS = ("Setting", "Workers", "Data wait", "Compute/step", "Step median",
                  "Samples/s", "CPU util", "Status")


def _runs(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    runs = [r for r in records if r.get("kind") == "run"]
    return R.latest_per_point(runs) + _skipped_points(records, runs)


def _skipped_points(records: list[dict[str, Any]], runs: list[dict[str, Any]]) -> list[dict]:
    """Points a sweep did not run because a smaller batch already ran out of memory."""
    seen = {(R.exp_id(r), R.point_key(R.point(r))) for r in runs}
    out = []
    for s in R.of_kind(records, "sweep"):
        for sk in s.get("skipped") or []:
            exp = {"id": R.exp_id(s), "kind": "sweep", "point": sk.get("point") or {}}
            rec = {"kind": "run", "status": sk.get("status") or "oom", "experiment": exp,
                   "error": sk.get("reason"), "metrics": {}, "name": "(skipped)"}
            if (exp["id"], R.point_key(R.point(rec))) not in seen:
                out.append(rec)
    return out


def _groups(runs: list[dict[str, Any]], varied: tuple[str, ...]) -> dict[str, list[dict]]:
    """Runs by experiment and by the point's axes other than ``varied``."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        others = {k: v for k, v in R.point(r).items() if k not in varied}
        label = " ".join(x for x in (R.exp_id(r) or "", fmt.describe_point(others)) if x)
        out.setdefault(label, []).append(r)
    return out


def batch_table(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per batch size, sorted by batch size within each group, with growth rates
    between consecutive points that finished (the first row's growth is None)."""
    rows: list[dict[str, Any]] = []
    for label, recs in _groups(_runs(records), R.BATCH_AXES).items():
        recs = sorted(recs, key=lambda r: (R.batch_size(r) is None, R.batch_size(r) or 0))
        ok = [r for r in recs if r.get("status") == "ok"]
        mem_kind = "device" if ok and all(R.device_peak(r) is not None for r in ok) else "host"
        prev: dict[str, Any] | None = None
        for r in recs:
            row = _batch_row(r, label, mem_kind)
            if row["status"] == "ok":
                if prev is not None:
                    row["mem_growth"] = fmt.rel_change(row["peak_mem_bytes"], prev["peak_mem_bytes"])
                    row["epoch_growth"] = _time_growth(row, prev)
                prev = row
            rows.append(row)
    return rows


def _batch_row(r: dict[str, Any], group: str, mem_kind: str) -> dict[str, Any]:
    mem = R.device_peak(r) if mem_kind == "device" else R.host_peak(r)
    return {
        "group": group, "run": R.name(r), "point": R.point(r), "batch_size": R.batch_size(r),
        "devices": R.world_size(r), "status": r.get("status"), "error": r.get("error"),
        "peak_mem_bytes": mem, "memory_kind": mem_kind, "mem_growth": None,
        "epoch_time_s": R.metric(r, "epoch_time_s"),
        "epoch_projected": R.projected(r), "epoch_growth": None,
        "samples_per_s": R.metric(r, "samples_per_s"),
        "cpu_util_pct": R.metric(r, "cpu_util_pct"), "gpu_util_pct": R.metric(r, "gpu_util_pct"),
    }


def _time_growth(row: dict[str, Any], prev: dict[str, Any]) -> float | None:
    """Epoch-time growth; from samples/s when an epoch time is missing (same dataset)."""
    g = fmt.rel_change(row["epoch_time_s"], prev["epoch_time_s"])
    if g is None and row["samples_per_s"] and prev["samples_per_s"]:
        g = prev["samples_per_s"] / row["samples_per_s"] - 1.0
    return g


def batch_cells(row: dict[str, Any]) -> list[str]:
    """The row as table cells, in BATCH_HEADERS order."""
    head = [fmt.num(row["batch_size"], "d"), fmt.num(row["devices"], "d")]
    if row["status"] == "oom":
        return head + ["out of memory"] + ["-"] * 6
    if row["status"] != "ok":
        err = f": {row['error']}" if row.get("error") else ""
        return head + [f"{row['status']}{err}"[:80]] + ["-"] * 6
    return head + [
        fmt.bytes_(row["peak_mem_bytes"]), fmt.growth(row["mem_growth"]),
        fmt.seconds(row["epoch_time_s"], row["epoch_projected"]), fmt.growth(row["epoch_growth"]),
        fmt.rate(row["samples_per_s"]), fmt.pct_value(row["cpu_util_pct"]),
        fmt.pct_value(row["gpu_util_pct"]),
    ]


def _efficiency(row: dict[str, Any]) -> float | None:
    if not row["samples_per_s"] or not row["peak_mem_bytes"]:
        return None
    return row["samples_per_s"] / (row["peak_mem_bytes"] / fmt.GIB)


def _steps(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each step up in batch size within a group: did it pay?"""
    out, prev = [], None
    for row in rows:
        if row["status"] != "ok":
            continue
        if prev is not None and prev["group"] == row["group"]:
            eg, mg = row["epoch_growth"], row["mem_growth"]
            pays = None if eg is None or mg is None else (eg < 0 and -eg > mg)
            out.append({"group": row["group"], "from": prev["batch_size"],
                        "to": row["batch_size"], "epoch_growth": eg, "mem_growth": mg,
                        "pays": pays})
        prev = row
    return out


def recommend_batch(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Fastest and most efficient batch size, and which steps up in batch size paid.

    Returns ``{"fastest", "most_efficient", "steps", "text"}``; ``fastest`` and
    ``most_efficient`` are table rows (``most_efficient`` with ``samples_per_s_per_gib``),
    or None when no batch size finished."""
    rows = batch_table(records)
    ok = [r for r in rows if r["status"] == "ok" and (r["samples_per_s"] or 0) > 0]
    steps = _steps(rows)
    if not ok:
        return {"fastest": None, "most_efficient": None, "steps": steps,
                "text": "No batch size finished, so there is nothing to recommend."}
    timed = [r for r in ok if r["epoch_time_s"] is not None]
    fastest = (min(timed, key=lambda r: r["epoch_time_s"]) if timed
               else max(ok, key=lambda r: r["samples_per_s"]))
    eff_rows = [r for r in ok if _efficiency(r) is not None]
    best_eff = max(eff_rows, key=_efficiency) if eff_rows else None
    if best_eff is not None:
        best_eff = {**best_eff, "samples_per_s_per_gib": _efficiency(best_eff)}
    return {"fastest": fastest, "most_efficient": best_eff, "steps": steps,
            "text": _batch_text(fastest, best_eff, steps, len({r["group"] for r in rows}) > 1)}


def _batch_text(fastest: dict, eff: dict | None, steps: list[dict], multi: bool) -> str:
    lines = ["A larger batch pays only while epoch time falls faster than memory grows."]

    def where(row: dict) -> str:
        return f" ({row['group']})" if multi and row["group"] else ""

    for s in steps:
        verdict = {True: "pays", False: "does not pay", None: "cannot tell"}[s["pays"]]
        lines.append(f"- {s['from']} -> {s['to']}{where(s)}: epoch time {fmt.growth(s['epoch_growth'])},"
                     f" memory {fmt.growth(s['mem_growth'])}: {verdict}.")
    lines.append(f"Fastest: batch {fastest['batch_size']}{where(fastest)}, epoch time "
                 f"{fmt.seconds(fastest['epoch_time_s'], fastest['epoch_projected'])}, "
                 f"{fmt.rate(fastest['samples_per_s'])} samples/s.")
    if eff is not None:
        lines.append(f"Most efficient: batch {eff['batch_size']}{where(eff)}, "
                     f"{eff['samples_per_s_per_gib']:.1f} samples/s per GiB of peak "
                     f"{eff['memory_kind']} memory ({fmt.rate(eff['samples_per_s'])} samples/s "
                     f"at {fmt.bytes_(eff['peak_mem_bytes'])}).")
    return "\n".join(lines)


def has_loader_axes(records: list[dict[str, Any]]) -> bool:
    return any(k in R.LOADER_AXES for r in records if r.get("kind") == "run" for k in R.point(r))


def loader_table(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per loader setting of sweeps that varied workers / prefetch / transform /
    loader, grouped by the other axes, in order of loader workers."""
    runs = [r for r in _runs(records) if any(k in R.LOADER_AXES for k in R.point(r))]
    rows: list[dict[str, Any]] = []
    for label, recs in _groups(runs, R.LOADER_AXES).items():
        recs = sorted(recs, key=lambda r: (R.loader_workers(r) or 0, R.point_key(R.point(r))))
        for r in recs:
            setting = {k: v for k, v in R.point(r).items() if k in R.LOADER_AXES}
            rows.append({
                "group": label, "run": R.name(r), "point": R.point(r),
                "setting": fmt.describe_point(setting), "workers": R.loader_workers(r),
                "prefetch": R.cfg(r, "data.prefetch"), "transform": R.cfg(r, "data.transform"),
                "loader": R.cfg(r, "data.loader"), "status": r.get("status"),
                "data_wait_fraction": R.metric(r, "data_wait_fraction"),
                "data_s": R.phase_s(r, "data"), "compute_s": R.compute_s(r),
                "step_median_s": R.step_median_s(r),
                "samples_per_s": R.metric(r, "samples_per_s"),
                "cpu_util_pct": R.metric(r, "cpu_util_pct"),
            })
    return rows


def loader_cells(row: dict[str, Any]) -> list[str]:
    return [row["setting"], fmt.num(row["workers"], "d"), fmt.pct(row["data_wait_fraction"]),
            fmt.ms(row["compute_s"]), fmt.ms(row["step_median_s"]),
            fmt.rate(row["samples_per_s"]), fmt.pct_value(row["cpu_util_pct"]),
            "ok" if row["status"] == "ok" else str(row["status"])]


def recommend_workers(records: list[dict[str, Any]], th: Thresholds = DEFAULT) -> dict[str, Any]:
    """The fewest loader workers within ``th.workers_within`` of the best samples/s (in the
    group of the best setting). Returns ``{"workers", "prefetch", "setting", "samples_per_s",
    "best_samples_per_s", "best_setting", "group", "text"}``; workers None when nothing ran.

    The transform is the workload, not a knob: when the sweep varied it, each transform gets
    its own recommendation (``by_transform``), and ``text`` holds one sentence per transform;
    the top-level fields are those of the transform of the overall best setting."""
    ok = [r for r in loader_table(records)
          if r["status"] == "ok" and (r["samples_per_s"] or 0) > 0 and r["workers"] is not None]
    if not ok:
        return {"workers": None, "text": "No loader setting finished, nothing to recommend."}
    transforms = sorted({str(r["transform"]) for r in ok})
    if len(transforms) < 2:
        return _recommend(ok, th)
    per = {t: _recommend([r for r in ok if str(r["transform"]) == t], th, f"transform {t}: ")
           for t in transforms}
    top = per[str(max(ok, key=lambda r: r["samples_per_s"])["transform"])]
    return {**top, "by_transform": per, "text": " ".join(per[t]["text"] for t in transforms)}


def _recommend(ok: list[dict[str, Any]], th: Thresholds, lead: str = "") -> dict[str, Any]:
    best = max(ok, key=lambda r: r["samples_per_s"])
    floor = (1.0 - th.workers_within) * best["samples_per_s"]
    near = [r for r in ok if r["group"] == best["group"] and r["samples_per_s"] >= floor]
    pick = min(near, key=lambda r: (r["workers"], -r["samples_per_s"]))
    gap = pick["samples_per_s"] / best["samples_per_s"] - 1.0
    text = (f"{lead}Use {pick['workers']} loader worker(s) ({pick['setting']}): "
            f"{fmt.rate(pick['samples_per_s'])} samples/s, {fmt.signed_pct(gap)} vs the best "
            f"{fmt.rate(best['samples_per_s'])} samples/s ({best['setting']}); the fewest "
            f"workers within {th.workers_within:.0%} of the best leave the cores to compute.")
    return {"workers": pick["workers"], "prefetch": pick["prefetch"], "setting": pick["setting"],
            "samples_per_s": pick["samples_per_s"], "best_samples_per_s": best["samples_per_s"],
            "best_setting": best["setting"], "group": best["group"], "text": text}
