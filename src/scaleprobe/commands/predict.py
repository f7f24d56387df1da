"""``scaleprobe predict``: the step on N processes and another network, from one measured
run (the step model), or communication time and efficiency from the closed-form cost model
(formulas in docs/COMMUNICATION.md).

    scaleprobe predict --from RUN --nproc 2,4,8 --link 1gbit --link measured:COMM_DIR
    scaleprobe predict --from RUN --nproc 1 --nnodes 2,4,8 --link 10gbit --strategy ddp,ps
    scaleprobe predict --check RUNS            # each multi-rank run beside its prediction
    scaleprobe predict --from RUN --memory --batch-size 16,64,256 --nproc 1,2,8 \
        --strategy ddp,fsdp --device-memory 80GiB   # peak memory per rank: does it fit?
    scaleprobe predict --model resnet50 --nproc 8 --link 10gbit --compute-time 0.25
    scaleprobe predict --params 25e6 --nproc 4 --nnodes 2 --link 1gbit --compute-time 0.1

``--from`` takes a one-rank run (a result.json, a run folder, or a folder whose latest
one-rank run is taken) and lays out the step's timeline per strategy: DDP's buckets become
ready during backward at the times the run measured and are all-reduced one after another on
the link; a parameter server's link carries every push, then every pull; local SGD averages
every K steps; FSDP gathers and scatters per unit. Compute is drawn from the run's own timed
steps (same threads per rank), so predictions carry an interval (see predict/stepmodel.py).
``--link`` (repeatable) takes 1gbit, 10gbit, 25gbit, 100gbit, nvlink, loopback, any rate
(100mbit, 2.5gbit), NAME=GBIT,US, measured:DIR (results of ``scaleprobe comm`` on that link),
and per-rank items (``1gbit,rank2=100mbit``). Default: loopback on one host, 10gbit across
hosts; from a run on a GPU, several devices on one host need ``--link`` (loopback is CPU
processes over gloo: ``whatif.check_gpu_link``). Nominal figures are labelled as such; a
measured link's fit error widens the interval.

Without ``--from``, the closed-form model: ``--compute-time`` (or none) and the parameter
count of ``--model`` / ``--params``; ``--overlap`` is the fraction of communication hidden.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from scaleprobe.commands import predict_memory, predict_steps
from scaleprobe.commands.options import repeats as count_arg
from scaleprobe.config.knobs import show
from scaleprobe.core.errors import ConfigError
from scaleprobe.features.links import resolve_link, with_alpha
from scaleprobe.predict.costmodel import FP32_BYTES, STRATEGIES, predict_for_run
from scaleprobe.predict.whatif import check_ranks, parse_counts

NAME = "predict"
HELP = "predict communication time and scaling efficiency per strategy and link"

MAX_PARAMS = 1e15  # parameters: far beyond any model, and the byte counts stay exact
MAX_ALPHA_US = 1e6  # one second per hop: slower than any network a training step crosses
MAX_COMPUTE_S = 7 * 86400.0  # a week per step
DEFAULTS = {"nnodes": "1", "average_every": 4, "target": 0.9, "overlap": 0.0}
# what each mode does not read: given, it is refused with what to do instead
CLOSED_FORM_ONLY = (
    ("alpha_us", "--alpha-us", "write the latency into the link: --link NAME=GBIT,US"),
    ("overlap", "--overlap", "the run's own timeline says what overlaps"),
    ("model", "--model", "the run names its model"),
    ("params", "--params", "the run's gradients are counted"),
    ("num_classes", "--num-classes", "the run's model is read as it ran"),
)
CHECK_READS_NOT = (("nproc", "--nproc"), ("nnodes", "--nnodes"), ("link", "--link"),
                   ("strategy", "--strategy"), ("alpha_us", "--alpha-us"),
                   ("compute_time", "--compute-time"), ("average_every", "--average-every"),
                   ("target", "--target"), ("overlap", "--overlap"), ("model", "--model"),
                   ("params", "--params"), ("num_classes", "--num-classes"))


def _number(lo: float, hi: float, lo_open: bool = False, what: str = "a number"):
    """argparse ``type=``: a finite number in [lo, hi] ((lo, hi] with ``lo_open``)."""
    def convert(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            v = math.nan
        if not math.isfinite(v) or v > hi or v < lo or (lo_open and v == lo):
            span = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"
            raise argparse.ArgumentTypeError(f"expected {what} in {span}, got {show(text)}")
        return v
    return convert


def efficiency_arg(text: str) -> float:
    """argparse ``type=`` for ``--target``: an efficiency in (0, 1] or a percent (90%)."""
    t = text.strip()
    try:
        v = float(t[:-1]) / 100.0 if t.endswith("%") else float(t)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and 0 < v <= 1):
        raise argparse.ArgumentTypeError(f"expected an efficiency in (0, 1] or a percent such "
                                         f"as 90%, got {show(text)}")
    return v


def add_arguments(p: argparse.ArgumentParser) -> None:
    size = p.add_mutually_exclusive_group()
    size.add_argument("--model", help="model name (parameters counted without building weights)")
    size.add_argument("--params", type=_number(0, MAX_PARAMS, lo_open=True),
                      help="parameter count, e.g. 25e6")
    p.add_argument("--num-classes", type=count_arg, default=None,
                   help="classifier head size for --model (default: the model's own)")
    p.add_argument("--nproc", "--nproc-per-node", "--nproc_per_node", default=None,
                   help="processes per host; with --from a list, e.g. 2,4,8")
    p.add_argument("--nnodes", default=None, help="hosts (default 1); with --from a list")
    p.add_argument("--link", action="append", default=None,
                   help="1gbit|10gbit|100gbit|nvlink|loopback|<rate>|NAME=GBIT,US|"
                        "measured:DIR|...,rankN=LINK; repeatable with --from")
    p.add_argument("--strategy", default=None,
                   help="--from: strategies to predict, of ddp,ps,localsgd,fsdp "
                        "(default ddp,ps,localsgd)")
    p.add_argument("--check", metavar="RUNS", default=None,
                   help="set every measured multi-rank run in RUNS beside its prediction "
                        "from the matching one-rank run")
    p.add_argument("--alpha-us", type=_number(0, MAX_ALPHA_US), default=None,
                   help="override the link's per-hop latency in microseconds (the closed-form "
                        "model; with --from write it into the link: --link NAME=GBIT,US)")
    step = p.add_mutually_exclusive_group()
    step.add_argument("--compute-time", type=_number(0, MAX_COMPUTE_S, lo_open=True),
                      help="compute seconds per step (one device)")
    step.add_argument("--from", dest="from_result", metavar="RUN",
                      help="a one-rank run (result.json or folder): its step's timeline")
    p.add_argument("--average-every", type=int, default=None,
                   help="local SGD: average every K steps (default 4)")
    p.add_argument("--target", type=efficiency_arg, default=None,
                   help="target efficiency, 0.9 or 90%% (default 0.9)")
    p.add_argument("--overlap", type=_number(0, 1), default=None,
                   help="fraction of communication hidden under compute, 0..1 (default 0; "
                        "needs --compute-time)")
    p.add_argument("--memory", action="store_true",
                   help="with --from: the peak memory per rank (parts, fits, largest batch); "
                        "with --check: only the memory beside each measured run")
    p.add_argument("--batch-size", default=None,
                   help="--memory: batch sizes per rank, e.g. 16,64,256 (default: the run's)")
    p.add_argument("--device-memory", default=None,
                   help="--memory: memory of one device, e.g. 80GiB (default: the run's GPU; "
                        "on the CPU the host's memory shared by the ranks)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def resolve_inputs(args: argparse.Namespace) -> dict[str, Any]:
    """Parameter count, compute time per step and where each came from."""
    compute_s, compute_note = args.compute_time, "given" if args.compute_time else None
    params, model = args.params, args.model
    if params is None and model is None:
        raise ConfigError("give the model size: --model NAME or --params N (or --from a run)")
    if params is None:
        from scaleprobe.models.build import count_params  # heavy: torch: builds the model

        params = count_params(model, args.num_classes)
    if params <= 0:
        raise ConfigError(f"parameter count must be positive, got {params:g}")
    return {"model": model, "params": int(params), "compute_step_s": compute_s,
            "compute_note": compute_note}


def _validate(args: argparse.Namespace) -> None:
    """Every flag in range and read by the mode asked for (--check, --from or the closed
    form); a flag the mode would ignore is refused, not dropped."""
    if args.check and args.from_result:
        raise ConfigError("--check and --from ask two questions: give one")
    predict_memory.validate(args)
    if args.memory and args.from_result:
        for dest, flag, why in CLOSED_FORM_ONLY:
            if getattr(args, dest) is not None:
                raise ConfigError(f"{flag} does nothing with --from: {why}")
        return
    if args.check:
        given = [flag for dest, flag in CHECK_READS_NOT if getattr(args, dest) is not None]
        if given:
            raise ConfigError(f"{given[0]} does nothing with --check: each measured run is set "
                              "beside the prediction for its own processes, link and strategy")
        return
    for dest, flag, why in CLOSED_FORM_ONLY if args.from_result else ():
        if getattr(args, dest) is not None:
            raise ConfigError(f"{flag} does nothing with --from: {why}")
    if not args.from_result:
        if args.strategy:
            raise ConfigError("--strategy needs --from RUN (the closed-form model shows every "
                              "strategy)")
        for dest, flag in (("target", "--target"), ("overlap", "--overlap")):
            if getattr(args, dest) is not None and args.compute_time is None:
                raise ConfigError(f"{flag} needs --compute-time (or --from RUN): without "
                                  "compute per step there is no efficiency")
    for k, v in DEFAULTS.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.average_every < 1:
        raise ConfigError("--average-every must be at least 1")
    if any(not str(x).strip() for x in args.link or []):
        raise ConfigError("--link is empty: give 1gbit, 10gbit, loopback, a rate like 200mbit, "
                          "NAME=GBIT,US or measured:DIR (left out: loopback on one host)")
    if args.from_result:
        return
    if args.nproc is None:
        raise ConfigError("give --nproc N (processes per host)")
    nproc, nnodes = parse_counts(args.nproc, "--nproc"), parse_counts(args.nnodes, "--nnodes")
    if len(nproc) > 1 or len(nnodes) > 1 or len(args.link or []) > 1:
        raise ConfigError("lists of --nproc, --nnodes or --link need --from RUN (the step "
                          "model); the closed-form model takes one of each")
    args.nproc, args.nnodes = nproc[0], nnodes[0]
    args.link = (args.link or [None])[0]
    check_ranks(args.link, args.nproc * args.nnodes)


def predictions(args: argparse.Namespace, inputs: dict[str, Any]) -> list[dict[str, Any]]:
    link = resolve_link(args.link, args.nnodes)
    if args.alpha_us is not None:
        link = with_alpha(link, args.alpha_us * 1e-6)
    grad_bytes = FP32_BYTES * inputs["params"]
    return [predict_for_run(s, args.nproc, args.nnodes, grad_bytes, inputs["compute_step_s"],
                            link, args.average_every, args.target, args.overlap)
            for s in STRATEGIES]


def print_predictions(inputs: dict[str, Any], preds: list[dict[str, Any]]) -> None:
    # heavy: rich: printing only; kept out of the CLI's start-up
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from scaleprobe.commands.terminal import bytes_, duration, pct  # heavy: rich

    p0 = preds[0]
    console = Console()
    what = inputs["model"] or "model"
    console.print(f"{what}: {inputs['params']:,} parameters, {bytes_(p0['grad_bytes'])} of fp32 "
                  f"gradients; {p0['world_size']} processes on {p0['nnodes']} host(s)",
                  markup=False)  # names and paths print as written
    console.print(f"link: {p0['link']} = {p0['bandwidth_gbit_s']:.3g} Gbit/s, "
                  f"{p0['alpha_s'] * 1e6:.0f} us per hop ({p0['link_source']})", markup=False)
    c = inputs["compute_step_s"]
    console.print("compute per step: " + (f"{duration(c)} ({inputs['compute_note']})" if c else
                                          "not given (--compute-time or --from): no efficiency"),
                  markup=False)
    t = Table(title=f"communication per step (no overlap with compute unless --overlap); "
                    f"needed link = slowest for {p0['target_efficiency']:.0%} efficiency")
    for col in ("strategy", "comm per step", "efficiency", "needed link"):
        t.add_column(col, justify="left" if col == "strategy" else "right")
    for p in preds:
        name = p["strategy"] + (f" (K={p['average_every']})" if p["average_every"] else "")
        t.add_row(escape(name), duration(p["comm_s"]), pct(p["efficiency"]), escape(_needed(p)))
    console.print(t)
    for p in preds:
        console.print(f"  {p['strategy']:9s} t = {p['formula']}", highlight=False, markup=False)


def _needed(p: dict[str, Any]) -> str:
    if p["compute_step_s"] is None:
        return "n/a"
    if p["needed_gbit_s"] is None:
        return "unreachable (latency-bound)"
    gbit = p["needed_gbit_s"]
    return f">= {gbit:.2f} Gbit/s" if gbit >= 0.1 else f">= {gbit * 1000:.1f} Mbit/s"


def run(args: argparse.Namespace) -> int:
    _validate(args)
    if args.memory and args.from_result:
        return predict_memory.run_memory(args, predict_steps.load_runs(args.from_result))
    if args.check or args.from_result:
        if args.check:
            return predict_steps.run_check(args)
        if args.nproc is None:
            raise ConfigError("give --nproc N (or a list, e.g. 2,4,8) to predict for")
        return predict_steps.run_from(args)
    inputs = resolve_inputs(args)
    preds = predictions(args, inputs)
    if args.json:
        print(json.dumps({"inputs": inputs, "predictions": preds}, indent=2))
    else:
        print_predictions(inputs, preds)
    return 0
