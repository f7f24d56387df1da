"""``scaleprobe scale --nproc 1,2[,4...] [run options]``: the same training at each process
count, each measured in its own run (never extrapolated from one rank), then speedup and
scaling efficiency against the 1-process run (or the smallest count measured, when there is
none: ``--nproc 2 --nnodes 1,2``) and what the gap was lost to:

    scaleprobe scale --nproc 1,2                                  # digits_cnn, ddp, gloo on CPU
    scaleprobe scale --nproc 1,2,4 --model resnet18 --dataset synthetic --image-size 64
    scaleprobe scale --nproc 1,2 --global-batch 256               # strong scaling: split 256
    scaleprobe scale --nproc 1,2 --strategy localsgd --average-every 8
    scaleprobe scale exp.toml --nproc 1,2 --out out/scale         # again: resumes

Every count runs the same strategy (ddp unless ``--strategy`` says otherwise; ``ps`` needs 2 or
more); the 1-process run is the baseline. ``--batch-size`` is per device (weak scaling: the
global batch grows with N), ``--global-batch`` is split (strong scaling). Each point is a
process of its own and lands in OUT/results.jsonl at once; the table goes to OUT/scale.md
(with a line per count, each ending with the load caveat where a run behind it was measured
under load, and the points measured under load), the speedups with their evidence (interval,
repeats, source runs and their load, the rule that decided each) to OUT/scale.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from scaleprobe.commands import sweep as sweep_command
from scaleprobe.commands.interrupted import say_interrupted
from scaleprobe.commands.options import RUN_FLAGS, add_run_options, overrides_from_args
from scaleprobe.commands.sweep import add_executor_options, add_repeats_option
from scaleprobe.config.keys import load_flat
from scaleprobe.config.sections import ModelConfig
from scaleprobe.core.errors import ConfigError
from scaleprobe.core.fmt import md_table
from scaleprobe.core.traits import traits_of
from scaleprobe.experiments.executor import FIRST_NODE, from_args
from scaleprobe.report.render.sweep_tables import write_tables
from scaleprobe.report.tables.rows import ScaleRow
from scaleprobe.report.tables.scale import (
    SCALE_HEADERS,
    experiment_rows,
    scale_cells,
    under_load_note,
)
from scaleprobe.report.tables.time_to_target import explain, table_parts

NAME = "scale"
HELP = "the same run on 1, 2, ... processes: speedup, efficiency, what the gap was lost to"


DEFAULT_COUNTS = (1, 2)
DEFAULTS = {"dist.strategy": "ddp"}  # scale's own defaults, under the config's


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_run_options(p, defaults={k: str(v) for k, v in DEFAULTS.items()})
    for a in p._actions:  # --nproc and --nnodes take lists here
        if a.dest == "opt_nproc":
            a.help = ("process counts per node, comma-separated (default: "
                      f"{','.join(map(str, DEFAULT_COUNTS))})")
            a.metavar, a.type = "N,N,...", None
        if a.dest == "opt_nnodes":
            a.help = ("node counts, comma-separated (default: 1); more than 1 needs "
                      "--executor slurm: each point one job over that many nodes")
            a.metavar, a.type = "N,N,...", None
    p.add_argument("--id", help="experiment id in results (default: scale-<model>-<strategy>)")
    add_repeats_option(p)
    add_executor_options(p)
    p.add_argument("target", nargs="*", metavar="-- SCRIPT.py [ARGS]",
                   help="your own training script instead of the built-in loop, run under "
                        "`wrap` at each count (docs/WRAP.md)")


def parse_counts(text: str | None, flag: str = "--nproc",
                 default: tuple[int, ...] = DEFAULT_COUNTS) -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]``: positive, distinct, sorted."""
    if text is None:
        return list(default)
    what = "process" if flag == "--nproc" else "node"
    try:
        counts = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"{flag} takes {what} counts like 1,2,4, got '{text}'") from None
    if not counts or any(n < 1 for n in counts):
        raise ConfigError(f"{flag} takes positive {what} counts like 1,2,4, got '{text}'")
    if len(set(counts)) != len(counts):
        raise ConfigError(f"{flag} repeats a count: '{text}'")
    return sorted(counts)


def node_axis(over: dict[str, Any], executor: str) -> dict[str, Any]:
    """``--nnodes 1,2``: the grid's node axis (none for one node), and the rendezvous of the
    multi-node points, which only the scheduler can place (``--executor slurm``)."""
    nodes = parse_counts(over.pop("dist.nnodes", None), "--nnodes", (1,))
    if nodes == [1]:
        return {}
    if executor != "slurm":
        raise ConfigError(f"--nnodes {','.join(map(str, nodes))} runs points over several "
                          "hosts: add --executor slurm (each point one job over that many "
                          "nodes), or start `scaleprobe run --nnodes N --node-rank R` on each "
                          "host yourself")
    if over.get("dist.rdzv_endpoint"):
        raise ConfigError("--rdzv-endpoint is chosen per job under --executor slurm (the job's "
                          "first node); leave it out")

    over["dist.rdzv_endpoint"] = FIRST_NODE
    return {"nnodes": nodes}


def build_spec(args: argparse.Namespace) -> tuple[dict[str, Any], str | None, bool]:
    """The scale experiment as a sweep spec over ``nproc`` (kind "scale")."""
    over = overrides_from_args(args)
    counts = parse_counts(over.pop("dist.nproc", None))
    nodes = node_axis(over, getattr(args, "executor", None) or "local")
    base: dict[str, Any] = dict(DEFAULTS)
    if getattr(args, "config", None):
        base.update(load_flat(args.config))
        base.pop("dist.nproc", None)
    base.update(over)
    out = base.pop("out", None)
    progress = base.pop("measure.progress", True) is not False
    strategy = str(base["dist.strategy"])
    tr = traits_of(strategy)
    if tr.in_process:
        raise ConfigError(f"scale runs one process per device; --strategy {strategy} runs one "
                          "process: use ddp, ps or localsgd")
    if counts[0] < tr.min_world:
        raise ConfigError(f"--strategy {strategy} needs a server and a worker: give --nproc "
                          f"{tr.min_world},{tr.min_world + 1},...")
    model = str(base.get("model.name", ModelConfig().name)).replace("/", "_").replace(":", "_")
    # with --target its points are other configurations: kept apart from a plain scale's
    sid = args.id or f"scale-{Path(model).name}-{strategy}" + ("-ttt" if base.get("train.target")
                                                               else "")
    spec = {"sweep": {"id": sid, "kind": "scale"}, "base": base,
            "grid": {"nproc": counts, **nodes}}
    return spec, out, progress


def scale_markdown(rows: list[ScaleRow]) -> tuple[str, list[str]]:
    """The speedup table (Markdown) and one line per process count, then the points measured
    under load (``Measured under load (K of N points): ...``, as sweep.md and the report
    list them)."""
    headers, cells = table_parts(SCALE_HEADERS, rows, scale_cells)
    lines = [r["line"] for r in rows] + explain(rows, [r["record"] for r in rows])
    loaded = under_load_note(rows)
    return md_table(headers, cells), lines + ([loaded] if loaded else [])


def run(args: argparse.Namespace) -> int:
    from rich.console import Console  # heavy: rich: printing only; kept out of the CLI's start-up

    # heavy: rich: printing only; kept out of the CLI's start-up
    from scaleprobe.experiments.scale import run_scale
    from scaleprobe.experiments.sweep import sweep_out_dir

    executor = from_args(args)
    target = script_target(args)
    if target:
        return _run_script(args, target, executor)
    spec, out, progress = build_spec(args)
    sweep_command.terminate_as_interrupt()
    try:
        rows = run_scale(spec, out, _views(), progress=progress, console=Console(stderr=True),
                         repeats=args.repeats, executor=executor)
    except KeyboardInterrupt:  # every point stopped; the runs that finished are kept

        return say_interrupted(sweep_out_dir(spec, out), ids=(spec["sweep"]["id"],))
    return _write_table(sweep_out_dir(spec, out), spec["sweep"]["id"], rows)


def script_target(args: argparse.Namespace) -> list[str]:
    """``scale [OPTIONS] -- SCRIPT.py [ARGS]`` (or ``-- -m package.module [ARGS]``): what
    follows ``--`` reaches the optional config-file positional first, so a ``.py`` file or
    ``-m`` there starts the script; anything after a config file is an error."""
    first = getattr(args, "config", None)
    rest = list(getattr(args, "target", None) or [])
    if first and (first.endswith(".py") or first == "-m"):
        args.config = None
        return [first, *rest]
    if rest:
        raise ConfigError(f"unexpected arguments after {first}: {' '.join(rest[:3])} (a "
                          "script goes after --: scale --nproc 1,2 -- SCRIPT.py [ARGS])")
    return []


def _views() -> Any:
    """What the scale experiment reads through the report: its table's rows (to measure an
    implausible point again) and the sweep's own tables."""
    from scaleprobe.experiments.scale import ScaleViews  # heavy: rich

    return ScaleViews(rows=experiment_rows, tables=write_tables)


def _run_script(args: argparse.Namespace, target: list[str], executor: Any) -> int:
    """``scale -- SCRIPT.py``: the script at each count, as a sweep over ``nproc``."""
    from rich.console import Console  # heavy: rich: printing only

    # heavy: rich: the experiments' modules stay out of the CLI's start-up
    from scaleprobe.experiments.scale import run_scale, script_spec
    from scaleprobe.experiments.sweep import sweep_out_dir

    over = overrides_from_args(args)
    counts = parse_counts(over.pop("dist.nproc", None))
    nodes = node_axis(over, executor.kind)
    sweep_command.terminate_as_interrupt()
    spec, out, progress = script_spec(target, counts, over, args.repeats, args.id,
                                      nodes.get("nnodes"),
                                      {key: flag for flag, key, _o in RUN_FLAGS})
    rows = run_scale(spec, out, _views(), progress=progress, console=Console(stderr=True),
                     repeats=args.repeats, executor=executor)
    return _write_table(sweep_out_dir(spec, out), spec["sweep"]["id"], rows)


def _write_table(folder: Path, sid: str, rows: list[ScaleRow]) -> int:
    """scale.md in the output folder and on stdout; exit 1 when no count beyond the baseline
    gave a speedup."""
    table, lines = scale_markdown(rows)
    text = f"## Scaling: {sid}\n\n{table}\n\n" + "\n".join(f"- {x}" for x in lines) + "\n"
    (folder / "scale.md").write_text(text)
    # the speedups as claims with their evidence (core/claim.py): the same words as scale.md
    claims = [{"nproc": r["nproc"], "nodes": r.get("nodes", 1), **r["claim"].to_dict()}
              for r in rows if r.get("claim") is not None]
    (folder / "scale.json").write_text(json.dumps({"experiment": sid, "claims": claims},
                                                  indent=2, default=str) + "\n")
    print(text)
    print(f"written: {folder / 'scale.md'}, {folder / 'scale.json'}, "
          f"{folder / 'results.jsonl'}")
    return 0 if any(r["speedup"] is not None for r in rows if not r["is_base"]) else 1
