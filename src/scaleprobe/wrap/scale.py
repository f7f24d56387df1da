"""``scaleprobe scale --nproc 1,2 -- SCRIPT.py [ARGS]``: the user's own script at each process
count, under ``wrap``, as a scale experiment: the same spec, records, table, verdicts, resume
and executors (``--executor slurm``) as a scale of the built-in loop, because it is one: a
sweep over ``nproc`` whose base names the script (``script.path``, ``script.args``).

Repeats are interleaved (1, 2, 1, 2, ...) so slow drift of the machine falls on every count
alike; a point measured before (same command line and count, status ok) is not run again, so
a rerun with more ``--repeats`` runs only the new ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from scaleprobe import config as C
from scaleprobe.errors import ConfigError
from scaleprobe.wrap.driver import SCRIPT_KEYS


def check_overrides(over: dict[str, Any]) -> dict[str, Any]:
    """The given run options, refusing those a script decides itself (one line, exit 2)."""
    from scaleprobe.commands.options import RUN_FLAGS

    flags = {key: flag for flag, key, _o in RUN_FLAGS}
    for key in over:
        if key not in SCRIPT_KEYS and key != "dist.nproc" and key != "dist.strategy":
            raise ConfigError(f"{flags.get(key, key)} does not apply to a script (it builds "
                              "its own model, data and training); scale -- SCRIPT.py takes "
                              "--nproc, --repeats, --warmup-steps, --steps, --out, --id")
    return {k: v for k, v in over.items() if k in SCRIPT_KEYS}


def script_spec(target: list[str], counts: list[int], over: dict[str, Any],
                repeats: int | None, sid: str | None = None, nodes: list[int] | None = None
                ) -> tuple[dict[str, Any], str | None, bool]:
    """The scale experiment of a script as a sweep spec over ``nproc`` (kind "scale"), with
    the output folder and whether to show progress."""
    from scaleprobe.wrap.driver import check_target

    name = check_target(target)
    base = check_overrides(over)
    out = base.pop("out", None)
    progress = base.pop("measure.progress", True) is not False
    base.update(C.ScriptConfig.from_target(target))
    sweep: dict[str, Any] = {"id": sid or f"scale-script-{name}", "kind": "scale"}
    if repeats is not None:
        sweep["repeats"] = repeats
    grid: dict[str, Any] = {"nproc": counts, **({"nnodes": nodes} if nodes else {})}
    return {"sweep": sweep, "base": base, "grid": grid}, out, progress


def scale_script(target: list[str], counts: list[int], over: dict[str, Any],
                 repeats: int | None, sid: str | None = None, executor: Any = None,
                 console: Console | None = None, nodes: list[int] | None = None
                 ) -> tuple[list[dict[str, Any]], Path, str]:
    """Run (or resume) the script at each count; returns the scale table's rows
    (``report.scale``), the output folder and the experiment id."""
    from scaleprobe.experiments.scale import run_scale
    from scaleprobe.experiments.sweep import sweep_out_dir

    spec, out, progress = script_spec(target, counts, over, repeats, sid, nodes)
    rows = run_scale(spec, out, progress=progress, console=console or Console(stderr=True),
                     repeats=repeats, executor=executor)
    return rows, sweep_out_dir(spec, out), spec["sweep"]["id"]
