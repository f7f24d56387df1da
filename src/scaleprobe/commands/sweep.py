"""``scaleprobe sweep SPEC.toml``: every point of a grid of run options, each in its own process.

    scaleprobe sweep examples/sweep_batch_mobilenet_v2.toml --out out/mnv2
    scaleprobe sweep examples/sweep_transform.toml --image-size 32     # flags override [base]
    scaleprobe sweep spec.toml --out out/mnv2                          # again: resumes

The spec has a [base] run configuration and a [grid] of axes (see docs/EXPERIMENTS.md). At the
end the tables are printed and written to OUT/sweep.md and OUT/sweep.csv; every point's run
record is in OUT/results.jsonl. Running the same sweep again skips the points already done.
"""

from __future__ import annotations

import argparse
import signal
from typing import Any

from scaleprobe.commands.interrupted import say_interrupted
from scaleprobe.commands.options import add_run_options, overrides_from_args
from scaleprobe.commands.options import repeats as repeats_arg
from scaleprobe.experiments.executor import add_executor_options as add
from scaleprobe.experiments.executor import from_args
from scaleprobe.experiments.spec import check_points, describe, load_spec
from scaleprobe.report.render.sweep_tables import write_tables

NAME = "sweep"
HELP = "run a grid of configurations (batch size to out of memory, loader settings, ...)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", metavar="SPEC.toml", help="sweep spec: [sweep], [base], [grid]")
    p.add_argument("--dry-run", action="store_true",
                   help="check the spec and list the points without running them")
    add_repeats_option(p)
    add_executor_options(p)
    add_run_options(p, config_file=False)


def add_executor_options(p: argparse.ArgumentParser) -> None:
    add(p)


def add_repeats_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repeats", type=repeats_arg, metavar="N",
                   help="runs of every point, interleaved (A B C A B C), each in its own "
                        "process; verdicts carry intervals from them (default: the spec's "
                        "[sweep] repeats, else 3)")


def terminate_as_interrupt() -> None:
    """SIGTERM stops an experiment the way Ctrl+C does: children killed, finished points kept."""
    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def split_overrides(args: argparse.Namespace) -> tuple[dict[str, Any], str | None, bool]:
    over = overrides_from_args(args)
    out = over.pop("out", None)
    progress = over.pop("measure.progress", True) is not False
    return over, out, progress


def _dry_run(spec: str, over: dict[str, Any], out: str | None, repeats: int | None) -> int:
    from scaleprobe.experiments.sweep import preflight  # heavy: rich

    sp = load_spec(spec, over, repeats)
    pts = check_points(sp, out)
    preflight([sp.config(p, out) for p in pts])
    auto = " (batch size searched from each)" if sp.auto else ""
    print(f"sweep {sp.sweep_id}: {len(pts)} point(s){auto}, {sp.repeats} repeat(s) each")
    for p in pts:
        print(f"  {describe(p.axes)}  key {sp.config(p, out).key()}")
    for line in sp.dropped:
        print(f"  left out (invalid): {line}")
    for line in sp.unused:
        print(f"  warning: {line}")
    return 0


def run(args: argparse.Namespace) -> int:
    from rich.console import Console  # heavy: rich: printing only; kept out of the CLI's start-up

    from scaleprobe.experiments.sweep import run_sweep, sweep_out_dir  # heavy: rich

    over, out, progress = split_overrides(args)
    executor = from_args(args)
    if args.dry_run:
        return _dry_run(args.spec, over, out, args.repeats)
    terminate_as_interrupt()
    try:
        records = run_sweep(args.spec, out, over, progress=progress,
                            console=Console(stderr=True), repeats=args.repeats,
                            executor=executor, tables=write_tables)
    except KeyboardInterrupt:  # every point stopped; the tables of what finished are written
        return say_interrupted(sweep_out_dir(args.spec, out, over),
                               ids=(load_spec(args.spec, over).sweep_id,))
    print((sweep_out_dir(args.spec, out, over) / "sweep.md").read_text())
    failed = sum(r.status == "failed" for r in records)
    return 1 if records and failed == len(records) else 0
