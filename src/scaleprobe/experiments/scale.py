"""A scale experiment: the same run at each process count (a sweep over ``nproc`` of kind
"scale"), then one re-measurement of any point whose speedup came out implausible.

A speedup above N x 1.1 (N / B x 1.1 against a B-process baseline) is a measuring error,
most often a baseline caught by a burst of load. Such a point and the baseline each get one
more repeat (interleaved, as always) and the table is built again from every repeat; a point
still implausible after that stays marked and out of every verdict.

A scale of the user's own script (``scale --nproc 1,2 -- SCRIPT.py [ARGS]``) is one too: a
sweep over ``nproc`` whose base names the script (``script.path``, ``script.args``), each
point run under ``wrap``, with the same spec, records, table, verdicts, resume and executors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from scaleprobe.config import runconfig as C
from scaleprobe.config.sections import ScriptConfig
from scaleprobe.core.errors import ConfigError
from scaleprobe.experiments import sweep
from scaleprobe.experiments.procs import one_server
from scaleprobe.experiments.spec import load_spec
from scaleprobe.experiments.sweep import Tables, sweep_out_dir
from scaleprobe.run.script import check_target


@dataclass(frozen=True)
class ScaleViews:
    """What a scale experiment reads through the report, handed in by the commands (an
    experiment renders nothing itself): ``rows`` gives the scale table of experiment ``sid``
    from its folder (``report.tables.scale.experiment_rows``), whose implausible points are measured
    again; ``tables`` writes the sweep's own tables (``report.render.sweep_tables.write_tables``;
    None: none)."""

    rows: Callable[[Path, str], list[Any]]
    tables: Tables | None = None


def run_scale(spec: dict[str, Any], out: str | None, views: ScaleViews, progress: bool = True,
              console: Console | None = None, repeats: int | None = None,
              executor: Any = None) -> list[Any]:
    """Run (or resume) the scale experiment; return its table rows (``views.rows``);
    ``executor``: where its points run (experiments/executor.py; None: here)."""
    with one_server():  # a second measurement of odd points reuses the first's server
        sweep.run_sweep(spec, out, progress=progress, console=console, repeats=repeats,
                        executor=executor, tables=views.tables)
        folder, sid = sweep_out_dir(spec, out), spec["sweep"]["id"]
        rows = views.rows(folder, sid)
        odd = [r for r in rows if r.get("implausible")]
        if odd:
            n = load_spec(spec, None, repeats).repeats
            con = console or Console(stderr=True)
            con.print(f"implausible speedup at {', '.join(str(r['nproc']) for r in odd)} "
                      "processes: measuring those points and the baseline once more",
                      soft_wrap=True)
            (base,) = [r["record"].point
                       for r in rows if r["is_base"] and r["experiment"] == odd[0]["experiment"]]
            points = [r["record"].point for r in odd]
            grid: dict[str, Any] = {"nproc": sorted({p.get("nproc", 1) for p in [base, *points]})}
            if "nnodes" in spec["grid"]:  # the product may add a point; one more repeat of it
                grid["nnodes"] = sorted({p.get("nnodes", 1) for p in [base, *points]})
            again = {**spec, "grid": grid}
            sweep.run_sweep(again, out, progress=progress, console=console, repeats=n + 1,
                            executor=executor, tables=views.tables)
            rows = views.rows(folder, sid)
    return rows


def check_overrides(over: dict[str, Any], flags: dict[str, str]) -> dict[str, Any]:
    """The given run options, refusing those a script decides itself (one line, exit 2);
    ``flags``: each key's flag, to name it as the user typed it."""
    for key in over:
        if key not in C.SCRIPT_KEYS and key != "dist.nproc" and key != "dist.strategy":
            raise ConfigError(f"{flags.get(key, key)} does not apply to a script (it builds "
                              "its own model, data and training); scale -- SCRIPT.py takes "
                              "--nproc, --repeats, --warmup-steps, --steps, --out, --id")
    return {k: v for k, v in over.items() if k in C.SCRIPT_KEYS}


def script_spec(target: list[str], counts: list[int], over: dict[str, Any],
                repeats: int | None, sid: str | None = None, nodes: list[int] | None = None,
                flags: dict[str, str] | None = None
                ) -> tuple[dict[str, Any], str | None, bool]:
    """The scale experiment of a script as a sweep spec over ``nproc`` (kind "scale"), with
    the output folder and whether to show progress."""
    name = check_target(target)
    base = check_overrides(over, flags or {})
    out = base.pop("out", None)
    progress = base.pop("measure.progress", True) is not False
    base.update(ScriptConfig.from_target(target))
    sweep: dict[str, Any] = {"id": sid or f"scale-script-{name}", "kind": "scale"}
    if repeats is not None:
        sweep["repeats"] = repeats
    grid: dict[str, Any] = {"nproc": counts, **({"nnodes": nodes} if nodes else {})}
    return {"sweep": sweep, "base": base, "grid": grid}, out, progress
