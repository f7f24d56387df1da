"""``scaleprobe run``: one measured training run (one device, or N processes with ddp/ps).

    scaleprobe run --model resnet18 --dataset synthetic --batch-size 64
    scaleprobe run --strategy ddp --nproc 2 --parity --epochs 3 --repeats 3

``--parity`` trains on 1 and on N processes with the same global batch and samples seen,
``--repeats`` times (seeds seed, seed+1, ...; default 3), interleaved, and states "parity
holds", "parity broken" or "inconclusive" from the interval of the accuracy difference (N - 1,
paired by seed) against ``--parity-tolerance`` (default 0.01, absolute): the user's margin,
never derived from the measured seed-to-seed spread, which widens the interval instead
(docs/VERDICTS.md, docs/EXPERIMENTS.md). Exit status 0 only when parity holds.
"""

from __future__ import annotations

import argparse
import sys

from scaleprobe.commands.options import add_run_options, config_from_args
from scaleprobe.commands.options import repeats as repeats_arg
from scaleprobe.core import claim as CL
from scaleprobe.core.errors import ConfigError
from scaleprobe.experiments import parity
from scaleprobe.experiments.parity import DEFAULT_REPEATS
from scaleprobe.run.failure import exit_code

NAME = "run"
HELP = "one measured training run"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_run_options(p)
    p.add_argument("--repeats", type=repeats_arg, metavar="N",
                   help="--parity: seeds per side, run interleaved (default 3)")


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)  # names and values checked before torch is imported
    if cfg.dist.parity:
        return _parity(cfg, args.repeats)
    if args.repeats is not None:
        raise ConfigError("--repeats applies to --parity (a single run is one measurement; "
                          "`scaleprobe sweep` and `colocate` repeat points)")
    from scaleprobe.commands.run_summary import print_run  # heavy: rich
    from scaleprobe.run.workloads import run_config  # heavy: torch: a run imports it

    result = run_config(cfg)
    print_run(result)
    return exit_code(result.status)


def _parity(cfg, repeats: int | None) -> int:
    from scaleprobe.commands.terminal import num  # heavy: rich

    p = parity.run_parity(cfg, DEFAULT_REPEATS if repeats is None else repeats,
                          say=lambda line: print(line, file=sys.stderr, flush=True))
    n = p.nproc or cfg.world_size
    print(f"accuracy parity: {n} processes vs 1, global batch {p.global_batch}, "
          f"{p.repeats} seed(s) {p.seeds}")
    for seed, a1, an in zip(p.seeds or [], p.accuracies_1 or [], p.accuracies_n or [],
                            strict=True):
        print(f"  seed {seed}: 1 process {num(a1, '.4f')}, {n} processes {num(an, '.4f')}")
    # the means stand beside the difference: over the same (paired) seeds
    paired = p.paired_seeds or []
    print(f"  mean over the {len(paired)} paired seed{'s' if len(paired) != 1 else ''} "
          f"({', '.join(map(str, paired)) or 'none'}): 1 process {num(p.accuracy_1, '.4f')}, "
          f"{n} processes {num(p.accuracy_n, '.4f')}")
    for u in p.unpaired or []:
        print(f"  seed {u.get('seed')} left out: {u.get('why')}")
    print(f"{p.verdict}: {p.verdict_text}")
    return 0 if p.verdict == CL.PARITY_HOLDS else 1
