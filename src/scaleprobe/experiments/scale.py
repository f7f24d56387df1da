"""A scale experiment: the same run at each process count (a sweep over ``nproc`` of kind
"scale"), then one re-measurement of any point whose speedup came out implausible.

A speedup above N x 1.1 (N / B x 1.1 against a B-process baseline) is a measuring error,
most often a baseline caught by a burst of load. Such a point and the baseline each get one
more repeat (interleaved, as always) and the table is built again from every repeat; a point
still implausible after that stays marked and out of every verdict.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console


def scale_rows(folder: Path, sid: str) -> list[dict[str, Any]]:
    from scaleprobe.report import records as R
    from scaleprobe.report.scale import scale_table

    return [r for r in scale_table(R.of_kind(R.load_records(folder / "results.jsonl"), "run"))
            if r["experiment"] == sid]


def run_scale(spec: dict[str, Any], out: str | None, progress: bool = True,
              console: Console | None = None, repeats: int | None = None,
              executor: Any = None) -> list[dict[str, Any]]:
    """Run (or resume) the scale experiment; return its table rows (``report.scale``);
    ``executor``: where its points run (experiments/executor.py; None: here)."""
    from scaleprobe.experiments.spec import load_spec
    from scaleprobe.experiments.sweep import run_sweep, sweep_out_dir

    run_sweep(spec, out, progress=progress, console=console, repeats=repeats,
              executor=executor)
    folder, sid = sweep_out_dir(spec, out), spec["sweep"]["id"]
    rows = scale_rows(folder, sid)
    odd = [r for r in rows if r.get("implausible")]
    if odd:
        n = load_spec(spec, None, repeats).repeats
        con = console or Console(stderr=True)
        con.print(f"implausible speedup at {', '.join(str(r['nproc']) for r in odd)} "
                  "processes: measuring those points and the baseline once more",
                  soft_wrap=True)
        (base,) = [(r["record"].get("experiment") or {}).get("point") or {}
                   for r in rows if r["is_base"] and r["experiment"] == odd[0]["experiment"]]
        points = [(r["record"].get("experiment") or {}).get("point") or {} for r in odd]
        grid: dict[str, Any] = {"nproc": sorted({p.get("nproc", 1) for p in [base, *points]})}
        if "nnodes" in spec["grid"]:  # the product may add a point; one more repeat of it
            grid["nnodes"] = sorted({p.get("nnodes", 1) for p in [base, *points]})
        again = {**spec, "grid": grid}
        run_sweep(again, out, progress=progress, console=console, repeats=n + 1,
                  executor=executor)
        rows = scale_rows(folder, sid)
    return rows
