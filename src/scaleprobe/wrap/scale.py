"""``scaleprobe scale --nproc 1,2 -- SCRIPT.py [ARGS]``: the user's own script at each process
count, under ``wrap``, as a scale experiment: the same records, table and verdicts as a scale
of the built-in loop.

Repeats are interleaved (1, 2, 1, 2, ...) so slow drift of the machine falls on every count
alike; a point measured before (same experiment id, count and repeat, status ok) is not run
again, so a rerun with more ``--repeats`` runs only the new ones.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from scaleprobe import config as C
from scaleprobe import results as res
from scaleprobe.errors import ConfigError

# run options that apply to a script (the rest: the script builds its own model and data)
SCRIPT_KEYS = ("dist.nnodes", "dist.node_rank", "dist.rdzv_endpoint", "dist.master_port",
               "dist.timeout_s", "train.warmup_steps", "train.steps",
               "measure.monitor_interval_s", "measure.progress", "out", "name")


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


def _done(results: Path, sid: str) -> set[tuple[int, int]]:
    """(count, repeat) of the points of ``sid`` measured before (status ok)."""
    out = set()
    for r in res.runs(res.read_jsonl(results, warn=False)):
        exp = r.get("experiment") or {}
        if exp.get("id") == sid and r.get("status") == "ok":
            n = (exp.get("point") or {}).get("nproc")
            if isinstance(n, int):
                out.add((n, int(exp.get("repeat") or 0)))
    return out


def scale_script(target: list[str], counts: list[int], over: dict[str, Any], repeats: int,
                 sid: str | None = None) -> tuple[list[dict[str, Any]], Path, str]:
    """Run (or resume) the script at each count, ``repeats`` times interleaved; returns the
    scale table's rows (``report.scale``), the output folder and the experiment id."""
    from scaleprobe.experiments.scale import scale_rows
    from scaleprobe.wrap.driver import base_config, check_target, execute_wrap

    name = check_target(target)
    over = check_overrides(over)
    out = Path(over.get("out") or C.build({}).out)
    sid = sid or f"scale-script-{name}"
    done = _done(out / res.RESULTS_FILE, sid)
    todo = [(rep, n) for rep in range(repeats) for n in counts if (n, rep) not in done]
    for i, (rep, n) in enumerate(todo, 1):
        cfg = base_config({**over, "dist.nproc": n, "out": str(out)}, name)
        print(f"scale {sid}: {n} process{'es' if n != 1 else ''}, repeat {rep + 1} of "
              f"{repeats} ({i}/{len(todo)})", file=sys.stderr, flush=True)
        rec, _code = execute_wrap(cfg, target, name, experiment={
            "id": sid, "kind": "scale", "point": {"nproc": n}, "repeat": rep})
        if rec.get("status") != "ok":
            print(f"scale {sid}: {n} processes, repeat {rep + 1}: {rec.get('status')}"
                  + (f" ({rec.get('error')})" if rec.get("error") else ""), file=sys.stderr)
    return scale_rows(out, sid), out, sid
