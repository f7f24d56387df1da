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
    if cfg.dist.parity:
        return _parity(cfg)
    rec = execute(cfg)
    print_run(rec)
    return exit_code(rec)


def _parity(cfg) -> int:
    from scaleprobe.commands.fmt import num
    from scaleprobe.commands.summary import print_run
    from scaleprobe.experiments.parity import run_parity

    out = run_parity(cfg)
    for rec in out["runs"]:
        print_run(rec)
    p = out["parity"]
    verdict = {True: "parity holds", False: "PARITY BROKEN", None: "not measured"}[
        p["within_tolerance"]]
    print(f"accuracy parity (global batch {p['global_batch']}): 1 process "
          f"{num(p['accuracy_1'], '.4f')}, {p['nproc']} processes {num(p['accuracy_n'], '.4f')}, "
          f"difference {num(p['difference'], '+.4f')} (tolerance {p['tolerance']}): {verdict}")
    return 0 if p["within_tolerance"] else 1
