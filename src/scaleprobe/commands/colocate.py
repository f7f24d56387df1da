"""``scaleprobe colocate SPEC.toml``: several training jobs alone, then all at once; how much
each slows down, with its interval over repeats, and why (CPU saturated, device contention,
no interference, or inconclusive when the intervals do not decide).

    scaleprobe colocate examples/colocate_three_mobilenets.toml --out out/coloc
    scaleprobe colocate spec.toml --placement pinned --image-size 64   # flags override the spec
    scaleprobe colocate spec.toml --repeats 5     # more repeats narrow the intervals

The spec has [colocate] (placement = "shared" | "pinned", seconds or steps, repeats), a [base]
run configuration and one [[job]] table per job (see docs/EXPERIMENTS.md). Repeats run
interleaved: every job alone, then all together, then again. Run option flags override [base]
for every job. The table and verdict are printed and written to OUT/colocate.md; the summary
record and every job's run records go to OUT/results.jsonl. Exit status 0, or 1 when a job
has no figures (verdict "not measured").
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scaleprobe.commands import sweep as sweep_command
from scaleprobe.commands.interrupted import say_interrupted
from scaleprobe.commands.options import add_run_options
from scaleprobe.commands.options import repeats as repeats_arg
from scaleprobe.report.render.colocate import render_colocate

NAME = "colocate"
HELP = "run several jobs alone and together: slowdown, utilisation, verdict"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", metavar="SPEC.toml", help="colocate spec: [colocate], [base], [[job]]")
    p.add_argument("--placement", choices=("shared", "pinned"),
                   help="override the spec's placement")
    p.add_argument("--repeats", type=repeats_arg, metavar="N",
                   help="alone/together phases, interleaved (default: the spec's, else 3)")
    add_run_options(p, config_file=False)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console  # heavy: rich: printing only; kept out of the CLI's start-up

    from scaleprobe.experiments.colocate import (  # heavy: rich
        load_colocate_spec,
        run_colocate,
    )

    over, out, progress = sweep_command.split_overrides(args)
    sweep_command.terminate_as_interrupt()
    try:
        rec = run_colocate(args.spec, out, over, progress=progress,
                           console=Console(stderr=True), placement=args.placement,
                           repeats=args.repeats, render=render_colocate)
    except KeyboardInterrupt:  # every job stopped; the runs that finished are on disk
        cs = load_colocate_spec(args.spec, over)
        folder = Path(out) if out is not None else Path(cs.jobs[0][1].out)
        return say_interrupted(folder, ids=(cs.colocate_id,), resumes=False)
    print(render_colocate(rec))
    if rec.verdict != "not measured":
        return 0
    # the table says why on stdout; a script that reads the exit code reads stderr too
    why = " ".join((rec.evidence or "").split()) or "no figures alone and together"
    print(f"scaleprobe: colocate: {rec.verdict}: {why}", file=sys.stderr)
    return 1
