"""``scaleprobe worker``: the training entry for a launcher you start yourself, e.g.
``torchrun --nproc-per-node 2 -m scaleprobe worker exp.toml --strategy ddp``. Rank 0 writes
the result, as ``scaleprobe run`` does."""

from __future__ import annotations

import argparse
import os

from scaleprobe.commands.options import add_run_options, config_from_args
from scaleprobe.measure.env import leave_process
from scaleprobe.run.failure import exit_code

NAME = "worker"
HELP = "training entry under your own launcher (torchrun ... -m scaleprobe worker ...)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_run_options(p)


def run(args: argparse.Namespace) -> int:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    extra: dict[str, object] = {"dist.nproc": local, "dist.nnodes": max(1, world // max(1, local))}
    if world > 1:
        addr, port = os.environ.get("MASTER_ADDR", "127.0.0.1"), os.environ.get("MASTER_PORT", "0")
        extra["dist.rdzv_endpoint"] = f"{addr}:{port}"
        extra["dist.strategy"] = "ddp"  # unless the file or a flag names another
    cfg = config_from_args(args, extra)
    # heavy: torch: after the worker's checks, which need none
    from scaleprobe.run.builtin import run_under_launcher  # imports torch: after the checks

    result = run_under_launcher(cfg)
    code = 0
    if result is not None:
        from scaleprobe.commands.run_summary import print_run  # heavy: rich

        print_run(result)
        code = exit_code(result.status)
    if world > 1:  # past this point the interpreter's teardown can abort the rank
        leave_process(code)
    return code
