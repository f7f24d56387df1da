"""The commands a verdict prints, each one a user can paste and run as the runs ran: the
experiment again with more repeats (``rerun``: its own spec file, a scale's own process
counts and options, the demo's own command), ``scaleprobe run`` with a pick's settings over
a run's configuration (``run_command``), a parity run with the N-process side's options
(``parity_command``).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scaleprobe.config import runconfig as C
from scaleprobe.config.keys import resolve_key
from scaleprobe.config.sections import KNOBS, ScriptConfig
from scaleprobe.core import metrics as M
from scaleprobe.core.experiment_records import ColocateRecord, ParityRecord, SweepRecord
from scaleprobe.core.record import Record
from scaleprobe.core.result_model import RunResult, num

# the demo's sweeps: rerun through `scaleprobe demo`, which has no spec file to name
DEMO_SWEEPS = ("demo-batch-size", "demo-loader-transform")


def command(*argv: Any) -> str:
    """A command a user can paste: ``scaleprobe ARGS``, shell-quoted."""
    return "`" + shlex.join(["scaleprobe", *map(str, argv)]) + "`"


def rerun(kind: str, eid: str, folder: str, repeats: int | None,
           spec: str | None = None, runs: Sequence[RunResult] = ()) -> str:
    """The command that measures an experiment again with more repeats (finished runs are
    reused, only the new repeats run), as it runs: the spec file the experiment recorded
    (``spec``), or for a scale its own options read off its runs (``runs``)."""
    n = repeats or M.MAX_REPEATS_SUGGESTED
    at = ["--out", folder] if folder else []
    if kind == "sweep" and eid in DEMO_SWEEPS:
        return command("demo", "--out", Path(folder or "scaleprobe-out/demo").parent,
                        "--repeats", n)
    if kind == "scale" and runs:
        return scale_command(eid, runs, at, n)
    if spec:
        return command(kind, shown(spec), *at, "--repeats", n)
    return (f"`scaleprobe {kind}` with the experiment's own spec and --repeats {n} (its record "
            "does not name the spec file)")


def scale_command(eid: str, runs: Sequence[RunResult], at: list[str], n: int) -> str:
    """``scaleprobe scale`` over the experiment's process counts (and nodes) with the options
    its runs share; a script's scale names the script after ``--``."""
    counts = sorted({int(c) for r in runs if (c := num(r.point.get("nproc"))) is not None})
    nodes = sorted({int(c) for r in runs if (c := num(r.point.get("nnodes"))) is not None})
    # the experiment's first repeat: under --target each repeat trains with its own seed
    # (seed + repeat), and the command must start from the experiment's own
    every = [x for r in runs for x in (r.repeats or [r])]
    first = min(every, key=lambda r: r.repeat or 0)
    grid = ["--nproc", ",".join(map(str, counts))] + (
        ["--nnodes", ",".join(map(str, nodes))] if nodes else [])
    script = first.cfg("script.path")
    if script:
        keep = set(C.SCRIPT_KEYS) - {"out", "name", "dist.nnodes"}
        opts = C.command_options(first.config_dict(), set(KNOBS) - keep)
        tail = ["--", *ScriptConfig(script, first.cfg("script.args")).target()]
        return command("scale", *grid, "--id", eid, *at, "--repeats", n, *opts, *tail)
    opts = C.command_options(first.config_dict(), {"dist.nproc", "dist.nnodes"})
    return command("scale", *grid, "--id", eid, *at, "--repeats", n, *opts)


def shown(path: str) -> str:
    """A recorded spec path as a command would take it: relative to the current folder when
    it lies under it (``command`` quotes it where it must)."""
    p = Path(path)
    try:
        p = p.relative_to(Path.cwd())
    except ValueError:
        pass
    return str(p)


def spec_of(recs: list[Record]) -> str | None:
    """The spec file an experiment's own record names (None: not recorded)."""
    return next((r.spec_path for r in recs
                 if isinstance(r, (SweepRecord, ColocateRecord)) and r.spec_path), None)


def folder_of(recs: list[Record]) -> str:
    return next((r.source for r in recs if r.source), "")


def run_command(rec: RunResult, flags: dict[str, Any]) -> str:
    """``scaleprobe run`` with everything the run's configuration set (task, data folder,
    processes...), and ``flags`` over it ({"batch_size": 32}): a command that runs as
    printed (bug caught: a "use it" command for a detection point without --task detection,
    --data-dir or --nproc)."""
    over = {resolve_key(k): v for k, v in flags.items()}
    sets = [f"{k}={'null' if v is None else v}" for k, v in over.items()]
    opts = C.command_options(rec.config_dict(), set(over))
    return command("run", *opts, *[x for kv in sets for x in ("--set", kv)])


def parity_command(rec: ParityRecord, runs: dict[str, RunResult], repeats: int) -> str:
    """``scaleprobe run --parity`` with the N-process side's options and the record's
    tolerance; without its runs, the options are the user's to add."""
    multi = next((runs[i] for i in reversed(rec.runs or []) if i in runs), None)
    tol = ["--parity-tolerance", rec.tolerance] if rec.tolerance else []
    if multi is None:
        return (command("run", "--parity", "--repeats", repeats, *tol)
                + " with the options of the runs compared")
    opts = C.command_options(multi.config_dict(), {"dist.parity", "dist.calibrate_comm", "train.eval",
                                            "train.seed", "dist.parity_tolerance"})
    seed = multi.cfg("train.seed")
    first = int(seed) - (multi.repeat or 0) if isinstance(seed, int) else None
    return command("run", *opts, *(["--set", f"train.seed={first}"] if first else []),
                    "--parity", "--repeats", repeats, *tol)
