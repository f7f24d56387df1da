"""``scaleprobe predict``: communication time, scaling efficiency and the link each strategy
needs, from the cost model (formulas in docs/COMMUNICATION.md).

    scaleprobe predict --model resnet50 --nproc 8 --link 10gbit --compute-time 0.25
    scaleprobe predict --params 25e6 --nproc 4 --nnodes 2 --link 1gbit --compute-time 0.1
    scaleprobe predict --from scaleprobe-out/<run>/result.json --nproc 4 --link 25gbit
    scaleprobe predict --model resnet18 --nproc 2 --link scaleprobe-out/results.jsonl \\
        --compute-time 0.4 --average-every 8

``--link`` takes 1gbit, 10gbit, 25gbit, 100gbit, loopback, any rate (200mbit, 2.5gbit) or
results written by ``scaleprobe comm`` (its all_reduce fit). Default: loopback (measured on
this project's 2-core reference machine) on one host, 10gbit across hosts.
``--from`` takes compute time per step from a run's result (forward + backward + optimizer,
whose breakdown already holds exposed communication apart, or else the median step minus its
communication) and the parameter count when the result records it; the run's standalone
collective is shown against the prediction only when both are for the same link, world size
and strategy (a run on loopback is never compared with a 1gbit prediction).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from scaleprobe.errors import ConfigError
from scaleprobe.results import RunResult

NAME = "predict"
HELP = "predict communication time and scaling efficiency per strategy and link"


def add_arguments(p: argparse.ArgumentParser) -> None:
    size = p.add_mutually_exclusive_group()
    size.add_argument("--model", help="model name (parameters counted without building weights)")
    size.add_argument("--params", type=float, help="parameter count, e.g. 25e6")
    p.add_argument("--num-classes", type=int, default=None,
                   help="classifier head size for --model (default: the model's own)")
    p.add_argument("--nproc", "--nproc-per-node", "--nproc_per_node", type=int, required=True,
                   help="processes per host")
    p.add_argument("--nnodes", type=int, default=1, help="hosts (default 1)")
    p.add_argument("--link", default=None,
                   help="1gbit|10gbit|25gbit|100gbit|loopback|<rate>|PATH to comm results")
    p.add_argument("--alpha-us", type=float, default=None,
                   help="override the link's per-hop latency in microseconds")
    step = p.add_mutually_exclusive_group()
    step.add_argument("--compute-time", type=float, help="compute seconds per step (one device)")
    step.add_argument("--from", dest="from_result", metavar="RESULT",
                      help="result.json of a scaleprobe run: compute time (and params)")
    p.add_argument("--average-every", type=int, default=4, help="local SGD: average every K steps")
    p.add_argument("--target", type=float, default=0.9, help="target efficiency (default 0.9)")
    p.add_argument("--overlap", type=float, default=0.0,
                   help="fraction of communication hidden under compute (default 0)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def compute_from_result(rec: RunResult) -> tuple[float | None, str]:
    """Compute seconds per step from a run's result (``metrics.compute_s``: copy to the
    device + forward + backward + optimizer; the breakdown already holds exposed
    communication apart), and how it was obtained."""
    bd = rec.metrics.breakdown_s
    c = bd.compute_s()
    if c is not None and c > 0:
        return float(c), "copy to device + forward + backward + optimizer"
    step = rec.step_median_s
    if step is None:
        return None, "no step time in the result"
    exposed = rec.comm.exposed_s if rec.comm is not None else None
    comm = exposed if exposed is not None else (bd.comm or 0.0)
    return float(step) - float(comm), "median step minus exposed communication"


def measured_comm(rec: RunResult) -> dict[str, Any] | None:
    """What a run measured of its communication, and where: the link it crossed, its world
    size and strategy, the standalone collective per step and the exposed time."""
    from scaleprobe.comm.exposed import measured_link

    c = rec.comm
    if c is None:
        return None
    dist_cfg = rec.config.get("dist") or {}
    link = (c.measured_link or measured_link(dist_cfg)).get("name")
    return {"link": link, "world_size": rec.batch.world_size,
            "strategy": dist_cfg.get("strategy"), "exposed_s": c.exposed_s,
            "transfer_s": c.transfer_s, "sync_overhead_s": c.sync_overhead_s,
            "standalone_s": (c.transfer_standalone or {}).get("per_step_s")}


def load_result(path: str) -> RunResult:
    p = Path(path)
    try:
        with p.open() as fh:
            rec = json.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"result file not found: {p}") from None
    except (json.JSONDecodeError, UnicodeDecodeError, IsADirectoryError) as e:
        raise ConfigError(f"cannot read {p} as a result.json: {e}") from None
    if not isinstance(rec, dict) or rec.get("kind") != "run":
        raise ConfigError(f"{p} is not the result of a scaleprobe run")
    return RunResult.from_dict(rec)


def resolve_inputs(args: argparse.Namespace) -> dict[str, Any]:
    """Parameter count, compute time per step and where each came from."""
    from scaleprobe.comm.model import count_params

    compute_s, compute_note = args.compute_time, "given" if args.compute_time else None
    params, model = args.params, args.model
    run_comm = None
    if args.from_result:
        rec = load_result(args.from_result)
        run_comm = measured_comm(rec)
        compute_s, compute_note = compute_from_result(rec)
        compute_note = f"{compute_note} ({args.from_result})"
        if params is None and model is None:
            params = rec.metrics.param_count
            model = None if params is not None else rec.cfg("model.name")
    if params is None and model is None:
        raise ConfigError("give the model size: --model NAME or --params N (or --from a result)")
    if params is None:
        params = count_params(model, args.num_classes)
    if params <= 0:
        raise ConfigError(f"parameter count must be positive, got {params:g}")
    if compute_s is not None and compute_s <= 0:
        raise ConfigError(f"compute time per step must be positive, got {compute_s:g}")
    return {"model": model, "params": int(params), "compute_step_s": compute_s,
            "compute_note": compute_note, "run_comm": run_comm}


def _validate(args: argparse.Namespace) -> None:
    if args.nproc < 1 or args.nnodes < 1:
        raise ConfigError("--nproc and --nnodes must be at least 1")
    if args.average_every < 1:
        raise ConfigError("--average-every must be at least 1")


def predictions(args: argparse.Namespace, inputs: dict[str, Any]) -> list[dict[str, Any]]:
    from scaleprobe.comm.links import resolve_link, with_alpha
    from scaleprobe.comm.model import FP32_BYTES, STRATEGIES, predict_for_run

    link = resolve_link(args.link, args.nnodes)
    if args.alpha_us is not None:
        link = with_alpha(link, args.alpha_us * 1e-6)
    grad_bytes = FP32_BYTES * inputs["params"]
    return [predict_for_run(s, args.nproc, args.nnodes, grad_bytes, inputs["compute_step_s"],
                            link, args.average_every, args.target, args.overlap)
            for s in STRATEGIES]


def print_predictions(inputs: dict[str, Any], preds: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from scaleprobe.commands.fmt import bytes_, ms, pct

    p0 = preds[0]
    console = Console()
    what = inputs["model"] or "model"
    console.print(f"{what}: {inputs['params']:,} parameters, {bytes_(p0['grad_bytes'])} of fp32 "
                  f"gradients; {p0['world_size']} processes on {p0['nnodes']} host(s)",
                  markup=False)  # names and paths print as written
    console.print(f"link: {p0['link']} = {p0['bandwidth_gbit_s']:.3g} Gbit/s, "
                  f"{p0['alpha_s'] * 1e6:.0f} us per hop ({p0['link_source']})", markup=False)
    c = inputs["compute_step_s"]
    console.print("compute per step: " + (f"{ms(c)} ({inputs['compute_note']})" if c else
                                          "not given (--compute-time or --from): no efficiency"),
                  markup=False)
    t = Table(title=f"communication per step (no overlap with compute unless --overlap); "
                    f"needed link = slowest for {p0['target_efficiency']:.0%} efficiency")
    for col in ("strategy", "comm per step", "efficiency", "needed link"):
        t.add_column(col, justify="left" if col == "strategy" else "right")
    for p in preds:
        name = p["strategy"] + (f" (K={p['average_every']})" if p["average_every"] else "")
        t.add_row(escape(name), ms(p["comm_s"]), pct(p["efficiency"]), escape(_needed(p)))
    console.print(t)
    for p in preds:
        console.print(f"  {p['strategy']:9s} t = {p['formula']}", highlight=False, markup=False)
    line = measured_line(inputs.get("run_comm"), preds)
    if line:
        console.print(line, highlight=False, markup=False)


def measured_line(run: dict[str, Any] | None, preds: list[dict[str, Any]]) -> str | None:
    """The run's own measurement next to the prediction for the same link, world size and
    strategy; otherwise a line saying why the two are not compared."""
    from scaleprobe.commands.fmt import ms
    from scaleprobe.traits import known

    if not run:
        return None
    p0 = preds[0]
    tr = known(run.get("strategy"))
    pred = next((p for p in preds if tr and p["strategy"] == tr.comm_pattern), None)
    where = f"{run.get('link') or 'an unnamed link'} with {run.get('world_size')} processes"
    if pred is None:
        return f"the run ({run.get('strategy')}) has no communication pattern to compare"
    if run.get("link") != p0["link"] or run.get("world_size") != p0["world_size"]:
        return (f"not compared with the run: it was measured on {where}; these predictions "
                f"are for {p0['link']} with {p0['world_size']} processes")
    std = run.get("standalone_s")
    if not pred["comm_s"]:
        return "one process: no communication to compare"
    if std is None:
        return f"the run measured no standalone collective to compare ({where})"
    text = (f"measured in the run ({where}): standalone collective {ms(std)} per step = "
            f"{std / pred['comm_s']:.2f}x the {pred['strategy']} prediction")
    if run.get("exposed_s") is not None and run.get("sync_overhead_s") is not None:
        text += (f"; exposed {ms(run['exposed_s'])} = transfer {ms(run['transfer_s'])} + sync "
                 f"overhead {ms(run['sync_overhead_s'])} (not the network)")
    return text


def _needed(p: dict[str, Any]) -> str:
    if p["compute_step_s"] is None:
        return "n/a"
    if p["needed_gbit_s"] is None:
        return "unreachable (latency-bound)"
    gbit = p["needed_gbit_s"]
    return f">= {gbit:.2f} Gbit/s" if gbit >= 0.1 else f">= {gbit * 1000:.1f} Mbit/s"


def run(args: argparse.Namespace) -> int:
    _validate(args)
    inputs = resolve_inputs(args)
    preds = predictions(args, inputs)
    if args.json:
        print(json.dumps({"inputs": inputs, "predictions": preds}, indent=2))
    else:
        print_predictions(inputs, preds)
    return 0
