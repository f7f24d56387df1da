"""The end of every run: the ranks' records and the monitor's figures into the run's
``RunResult`` (``assemble.build_result``), then its files: result.json, steps.csv, the
target curve, and one line in results.jsonl."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from scaleprobe.config.sections import RunConfig
from scaleprobe.core import results as res
from scaleprobe.core.rank_record import RankRecord
from scaleprobe.core.result_model import RunResult
from scaleprobe.features.target import CURVE_FILE, write_curve_csv
from scaleprobe.measure.aggregate import PHASES
from scaleprobe.measure.monitor import Monitor
from scaleprobe.run.assemble import build_result, head_rank


def finalize(result: RunResult, cfg: RunConfig, ranks: list[RankRecord] | None,
             monitor: Monitor, run_dir: Path) -> RunResult:
    """Fill ``result`` from the ranks' records (None: no rank returned one) and the monitor,
    write its files, and return it."""
    mon: dict[str, Any] = {"gpu_reason": monitor.gpu_reason}
    t0 = t1 = None
    if ranks:
        t0, t1 = head_rank(ranks).clock_window or (None, None)
        mon.update(monitor.summary(t0, t1))
    else:
        mon.update(monitor.summary())
    build_result(result, cfg, ranks, mon, monitor.outside_load(t0, t1))
    if ranks:
        try:
            write_steps_csv(run_dir / "steps.csv", head_rank(ranks))
        except OSError as e:
            result.null_reasons["paths.steps_csv"] = f"not written: {e}"
    if result.target is not None and result.target.curve:
        try:
            write_curve_csv(run_dir / CURVE_FILE, result.target.curve)
            result.paths["target_curve_csv"] = str(run_dir / CURVE_FILE)
        except OSError as e:
            result.null_reasons["paths.target_curve_csv"] = f"not written: {e}"
    result.finished_at = res.utc_now()
    rec = result.to_dict()
    res.write_json_atomic(run_dir / "result.json", rec)
    res.append_jsonl(res.results_file(cfg.out), rec)
    return result


def write_steps_csv(path: Path, head: RankRecord) -> None:
    """One row per timed step of the rank the step figures are from: its time and phases."""
    phases = head.phase_times_s
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["step", "step_time_s", *[f"{p}_s" for p in PHASES]])
        for i, t in enumerate(head.step_times_s):
            w.writerow([i, f"{t:.6f}", *[f"{phases[p][i]:.6f}"
                                         if i < len(phases.get(p) or []) else ""
                                         for p in PHASES]])
