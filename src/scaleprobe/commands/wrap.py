"""``scaleprobe wrap [OPTIONS] -- SCRIPT.py [ARGS]``: measure your own training script,
unchanged, as ``scaleprobe run`` measures its built-in loop.

    scaleprobe wrap -- train.py --lr 0.1                    one process
    scaleprobe wrap --nproc 2 -- train_ddp.py               2 ranks, started as torchrun would
    scaleprobe wrap --nproc 2 -- -m mypkg.train --epochs 1  a module instead of a file
    scaleprobe wrap --warmup-steps 10 --steps 50 -- train.py  stop after 50 timed steps

The ranks see RANK, LOCAL_RANK, WORLD_SIZE and MASTER_ADDR/PORT as under torchrun. The
script's stdout and stderr are its own; scaleprobe's summary goes to stderr, and the run
folder, result.json and results.jsonl line under --out are those of `run`. The exit code is
scaleprobe's, as for `run` (0 ok, 1 failed, 3 out of memory, 5 shard audit failed, 130
interrupted): a script's own non-zero code is a failed run, kept in the record
(``script.exit_code``) and printed. A step is one optimizer step; what is measured and what
cannot be seen: docs/WRAP.md.
"""

from __future__ import annotations

import argparse
import sys

from scaleprobe.commands.options import RUN_FLAGS, _dest, converter, flag_help
from scaleprobe.config.sections import KNOBS
from scaleprobe.run.failure import exit_code
from scaleprobe.run.script import base_config, check_target, run_script

NAME = "wrap"
HELP = "measure your own training script, unchanged (-- SCRIPT.py [ARGS])"

# the run flags that apply to a script: processes, rendezvous, warm-up, stopping, output
FLAGS = ("--nproc", "--nnodes", "--node-rank", "--rdzv-endpoint", "--master-port", "--timeout",
         "--force", "--gloo-io",
         "--warmup-steps", "--steps", "--monitor-interval", "--summary-every", "--profile-every",
         "--out", "--name")
STEPS_HELP = "stop the script cleanly after N timed steps (default: let it run to its end)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("wrap options")
    for flag, key, other in RUN_FLAGS:
        if flag not in FLAGS:
            continue
        if bool in KNOBS[key].kinds:  # a switch (--force/--no-force), as for run
            g.add_argument(flag, *other, dest=_dest(flag), action=argparse.BooleanOptionalAction,
                           default=argparse.SUPPRESS, help=flag_help(key))
            continue
        metavar = flag.lstrip("-").upper().replace("-", "_")
        g.add_argument(flag, *other, dest=_dest(flag), type=converter(key), metavar=metavar,
                       default=argparse.SUPPRESS,
                       help=STEPS_HELP if flag == "--steps" else flag_help(key))
    p.add_argument("target", nargs=argparse.REMAINDER, metavar="-- SCRIPT.py [ARGS]",
                   help="the script and its own arguments (or -m package.module [ARGS])")


def run(args: argparse.Namespace) -> int:
    from scaleprobe.commands.run_summary import console, print_run  # heavy: rich

    target = list(args.target)
    if target[:1] == ["--"]:
        target = target[1:]
    check_target(target)
    overrides = {key: getattr(args, _dest(flag)) for flag, key, _o in RUN_FLAGS
                 if flag in FLAGS and hasattr(args, _dest(flag))}
    cfg = base_config(overrides, target)
    sys.stdout.flush()
    result, code = run_script(cfg)
    print_run(result, console(stderr=True))  # stdout is the script's own
    note = result.script.sampler_note if result.script else None
    if note and result.audit is not None and not result.audit.ok:
        print(f"shard audit: {note}", file=sys.stderr)
    ours = exit_code(result.status)
    if code != ours:
        print(f"exit code: {ours} ({result.status}); the script's own was {code} "
              "(script.exit_code in the record)", file=sys.stderr)
    return ours

