"""``scaleprobe plan``: before the device hours are spent, which configurations (strategy,
batch per device, devices) fit in memory, how fast each trains and what it costs, from
one-rank runs; the fastest that fits and the cheapest, each against its runner-up.

    scaleprobe plan --from RUN --device-memory 80GiB --nproc 1,2,4,8
    scaleprobe plan --from RUNS --device-memory 80GiB --nproc 1,2,4,8 --batch-size 32,64,128 \\
        --strategy ddp,fsdp --link 10gbit --target loss=3.0
    scaleprobe plan --from RUNS --nproc 1,2 --verify     # run the pick and the runner-up here

``--from`` takes a run, a run folder or a folder of runs: the latest one-rank run that
recorded its memory facts sets the model; the one-rank runs of its setting give the step (a
batch they measured: their steps, pooled; another batch: the nearest measured one scaled);
a run that measured the gradient noise scale and reached ``--target`` gives the steps to it.
The figures are ``predict/plan.py``'s (the step model of ``predict --from`` and the memory model
of ``predict --memory``); docs/PLAN.md says how each is made and how far it held.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from typing import Any

from scaleprobe.commands import plan_show, plan_verify
from scaleprobe.commands import predict_memory as PM
from scaleprobe.commands import predict_steps as PS
from scaleprobe.commands.options import repeats as count_arg
from scaleprobe.config.sections import parse_size
from scaleprobe.core import claim as CL
from scaleprobe.core.errors import ConfigError
from scaleprobe.core.result_model import RunResult
from scaleprobe.core.traits import traits_of
from scaleprobe.features.links import parse_spec, resolve_link
from scaleprobe.predict import plan as P
from scaleprobe.predict import plan_inputs as PI
from scaleprobe.predict import whatif as W
from scaleprobe.report.reading.machine_load import source
from scaleprobe.report.render.whatif import ceiling_caveat

NAME = "plan"
HELP = "which strategy, batch and device count fit in memory, how fast, at what cost"
DEFAULT_NPROC = "1,2,4,8"
DEFAULT_STRATEGIES = "ddp,fsdp"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from", dest="from_result", metavar="RUN", required=True,
                   help="a one-rank run with memory facts (result.json, run folder or a "
                        "folder of runs: one-rank runs at other batch sizes give their steps)")
    p.add_argument("--device-memory", default=None,
                   help="memory of one device, e.g. 80GiB (default: the run's GPU; on the "
                        "CPU the host's memory shared by the ranks)")
    p.add_argument("--nproc", "--nproc-per-node", default=DEFAULT_NPROC,
                   help=f"devices (processes) per host to plan for (default {DEFAULT_NPROC})")
    p.add_argument("--nnodes", type=count_arg, default=1, help="hosts (default 1)")
    p.add_argument("--batch-size", default=None,
                   help="batch sizes per device, e.g. 32,64,128 (default: the runs' own)")
    p.add_argument("--strategy", default=DEFAULT_STRATEGIES,
                   help=f"of {','.join(P.STRATEGIES)} (default {DEFAULT_STRATEGIES})")
    p.add_argument("--link", default=None,
                   help="the link between the devices: 10gbit, nvlink, a rate, NAME=GBIT,US, "
                        "measured:DIR (default: loopback on one host, 10gbit across hosts)")
    p.add_argument("--target", default=None, metavar="METRIC=VALUE",
                   help="steps and time to this target (needs a run with --gns that reached "
                        "it; default: such a run's own target)")
    p.add_argument("--verify", action="store_true",
                   help="run the fastest pick and its runner-up here for a few steps and set "
                        "each beside its prediction")
    p.add_argument("--verify-steps", type=count_arg, default=None,
                   help=f"timed steps per verified configuration (default: {plan_verify.VERIFY_STEPS}, or "
                        "more where the predicted step is short: enough for 2 s, at most 500)")
    p.add_argument("--out", default="scaleprobe-out",
                   help="--verify: results folder of its runs (default scaleprobe-out)")
    p.add_argument("--json", action="store_true", help="every row, machine-readable")


def _question(args: argparse.Namespace, like: RunResult, runs: list[RunResult],
              bases: dict[str, dict[int, P.Basis]]) -> P.Question:
    """The flags, each checked (one line, exit 2), as the plan's question."""
    strategies = [x.strip().lower() for x in str(args.strategy).split(",") if x.strip()]
    bad = [x for x in strategies if x not in P.STRATEGIES]
    if bad or not strategies:
        raise ConfigError(f"--strategy: no plan for '{bad[0] if bad else args.strategy}' "
                          f"(choices: {', '.join(P.STRATEGIES)})")
    nprocs = W.parse_counts(args.nproc, "--nproc")
    given = parse_size(args.device_memory) if args.device_memory is not None else None
    device = {n: PM.device_memory(like, given, n)[0] for n in nprocs}
    if any(v is None for v in device.values()):
        raise ConfigError(f"{like.label} recorded no device or host memory: give "
                          "--device-memory, e.g. 80GiB")
    measured = sorted({b for per in bases.values() for b in per})
    batches = (W.parse_counts(args.batch_size, "--batch-size") if args.batch_size is not None
               else measured)
    if args.link is not None:
        if not str(args.link).strip():
            raise ConfigError("--link is empty: give 10gbit, nvlink, a rate like 200mbit, "
                              "NAME=GBIT,US or measured:DIR")
        spec = parse_spec(args.link)
        resolve_link(spec.base, args.nnodes)
        W.check_ranks(args.link, max(nprocs) * args.nnodes)
    on_cuda = W.as_run(like)["prefetch"]
    W.check_gpu_link(on_cuda, [args.link], [args.nnodes], nprocs)
    return P.Question(strategies, nprocs, sorted(set(batches)),
                      {n: int(v or 0) for n, v in device.items()}, args.nnodes, args.link,
                      prefetch=on_cuda, target=PI.target_from(runs, args.target),
                      train_samples=like.metrics.train_samples)


def _like(runs: list[RunResult], path: str) -> RunResult:
    """The one-rank run whose memory facts and setting the plan is made for (its latest;
    a run whose step was two half-batches only when there is no other)."""
    ones = [r for r in runs if (r.world_size or 1) == 1]
    plain = [r for r in ones if not PI.two_halves(r)]
    try:
        return PM.source_run(plain or ones, path)
    except ConfigError:
        raise ConfigError(f"no one-rank run in {path} recorded its memory facts: plan takes a "
                          "run of one process (scaleprobe run --strategy single|ddp|fsdp)"
                          ) from None


def make_plan(args: argparse.Namespace) -> dict[str, Any]:
    runs = PS.load_runs(args.from_result)
    like = _like(runs, args.from_result)
    inputs = PM.inputs_of(like)
    strategies = [x.strip().lower() for x in str(args.strategy).split(",") if x.strip()]
    bases = {s: PI.bases_for(runs, like, s) for s in strategies if s in P.STRATEGIES}
    q = _question(args, like, runs, bases)
    if any(not b for b in bases.values()):
        halves = any(PI.two_halves(r) for r in runs if (r.world_size or 1) == 1)
        raise ConfigError(f"no measured one-rank run of {like.label}'s setting in "
                          f"{args.from_result} to draw the step from"
                          + (": a --gns run on one process steps in two half-batches; run "
                             "the same once without --gns" if halves else ""))
    units = PS.fsdp_units(like) if "fsdp" in q.strategies else ()
    buffers = W.as_run(like)["buffers"]
    q = replace(q, units=units, buffers=buffers)
    rows: list[P.Row] = []
    for s in q.strategies:
        nprocs = [n for n in q.nprocs if n * q.nnodes > 1 or s == q.strategies[0]]
        if nprocs:
            one = replace(q, strategies=[s], nprocs=nprocs)
            rows += P.plan(inputs, bases[s], one, progress=_progress(s))
    against_one_device(rows, inputs, bases[q.strategies[0]], q)
    srcs = {s: tuple(source(r) for r in runs if r.run_id in
                     {x for b in bases[s].values() for x in b.run_ids}) for s in bases}
    to_target = q.target is not None

    def sources(r: P.Row) -> tuple[CL.Source, ...]:
        return srcs[r.strategy]

    picks = [P.pick(rows, k, sources, to_target) for k in (CL.FASTEST, CL.CHEAPEST)]
    # as predict --memory says it: fits up to one batch, inconclusive up to another
    largest = [{"strategy": s, "nproc": n, "devices": n * q.nnodes,
                **PM.largest_fit(inputs, s, n * q.nnodes, q.device_bytes[n], "device"),
                "data_samples_per_device": P.share(q, s, n * q.nnodes)}
               for s in q.strategies for n in q.nprocs
               if n * q.nnodes >= traits_of(s).min_world
               and (n * q.nnodes > 1 or s == q.strategies[0])]
    return {"like": like, "inputs": inputs, "question": q, "rows": rows, "picks": picks,
            "device_named": args.device_memory is not None,
            "largest": largest, "bases": bases}


def against_one_device(rows: list[P.Row], inputs: Any, bases: dict[int, P.Basis],
               q: P.Question) -> None:
    """Every predicted row's efficiency against the plan's one-device row at its batch (one
    predicted the same way where the rows have none: --nproc without 1, or a batch one
    device cannot hold)."""
    ones = {r.batch: r for r in rows if r.devices == 1 and r.prediction is not None}
    for b in sorted({r.batch for r in rows if r.prediction is not None} - set(ones)):
        ones[b] = P.one_device(inputs, bases, q, b)
    P.set_efficiency(rows, ones)


def _progress(strategy: str) -> Any:
    if not sys.stderr.isatty():
        return None

    def say(i: int, n: int) -> None:
        end = "\n" if i + 1 == n else ""
        print(f"\rpredicting the step: {strategy} {i + 1}/{n}", end=end, file=sys.stderr,
              flush=True)
    return say


def run(args: argparse.Namespace) -> int:
    got = make_plan(args)
    if args.json:
        verified = plan_verify.verify(args, got) if args.verify else None
        print(json.dumps(plan_show.to_json(got, verified), indent=2, default=str))
        return 0
    plan_show.print_plan(got, ceiling_caveat(got["like"]))  # before --verify's minutes
    sys.stdout.flush()
    if args.verify:
        plan_show.print_verified(plan_verify.verify(args, got))
    return 0
