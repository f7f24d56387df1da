"""``scaleprobe run``: one measured training run (one device, or N processes with ddp/ps)."""

from __future__ import annotations

import argparse

from scaleprobe.commands.options import add_run_options, config_from_args

NAME = "run"
HELP = "one measured training run"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_run_options(p)


def run(args: argparse.Namespace) -> int:
    from scaleprobe.commands.summary import print_run
    from scaleprobe.runner import execute, exit_code

    cfg = config_from_args(args)
    rec = execute(cfg)
    print_run(rec)
    if cfg.dist.parity and rec["status"] == "ok":
        from scaleprobe.experiments.parity import run_parity

        run_parity(cfg, rec)
    return exit_code(rec)
