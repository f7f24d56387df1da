"""``scaleprobe predict --from RUN --memory``: the peak memory per rank for each strategy,
world size and batch per rank, from one measured run's ``metrics.memory_facts``, and whether
it fits on the device (``predict --check RUNS`` sets each measured run's peak beside it:
``predict_memory_check.py``). The figures come from ``predict/memmodel.py`` (formulas and
limits: docs/MEMORY.md); this module reads the records and prints.

    scaleprobe predict --from RUN --memory --batch-size 16,64,256 --nproc 1,2,8 \\
        --strategy ddp,fsdp --device-memory 80GiB
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from scaleprobe.config.sections import parse_size
from scaleprobe.core import claim as CL
from scaleprobe.core import claim_kinds as CK
from scaleprobe.core import metrics as M
from scaleprobe.core.errors import ConfigError
from scaleprobe.core.result_model import RunResult
from scaleprobe.core.traits import traits_of
from scaleprobe.predict import memmodel as MM
from scaleprobe.predict.whatif import parse_counts

DEFAULT_STRATEGIES = "ddp,fsdp"
STATE_PARTS = ("params", "grads", "optimizer_state", "master_copies")
STEP_PARTS = ("activations_per_sample", "activations_fixed", "batch_inputs",
              "optimizer_temporaries")
# flags the memory prediction does not read: refused with why
NOT_READ = (("link", "--link", "memory per rank does not depend on the network"),
            ("nnodes", "--nnodes", "memory per rank does not depend on the hosts"),
            ("average_every", "--average-every", "local SGD has no memory model"),
            ("target", "--target", "--target is an efficiency of the time prediction"),
            ("overlap", "--overlap", "--overlap belongs to the closed-form time model"),
            ("compute_time", "--compute-time", "the run's own step is read"))


def validate(args: argparse.Namespace) -> None:
    """--memory's flags, each refused with one line when out of range or unread."""
    if not args.memory:
        for dest, flag in (("batch_size", "--batch-size"), ("device_memory", "--device-memory")):
            if getattr(args, dest) is not None:
                raise ConfigError(f"{flag} needs --memory (the memory prediction)")
        return
    if not (args.from_result or args.check):
        raise ConfigError("--memory needs --from RUN (a measured run) or --check RUNS")
    for dest, flag, why in NOT_READ:
        if getattr(args, dest) is not None:
            raise ConfigError(f"{flag} does nothing with --memory: {why}")
    if args.check:
        for dest, flag in (("batch_size", "--batch-size"), ("device_memory", "--device-memory"),
                           ("nproc", "--nproc"), ("strategy", "--strategy")):
            if getattr(args, dest) is not None:
                raise ConfigError(f"{flag} does nothing with --check: each measured run is set "
                                  "beside the prediction for its own batch, ranks and strategy")
        return
    args.memory_strategies = parse_strategies(args.strategy)
    args.memory_nproc = parse_counts(args.nproc or "1", "--nproc")
    args.memory_batches = (parse_counts(args.batch_size, "--batch-size")
                           if args.batch_size is not None else None)
    args.device_memory_bytes = (parse_size(args.device_memory)
                                if args.device_memory is not None else None)


def parse_strategies(text: str | None) -> list[str]:
    names = [x.strip().lower() for x in (text or DEFAULT_STRATEGIES).split(",") if x.strip()]
    bad = [x for x in names if x not in MM.STRATEGIES]
    if bad or not names:
        raise ConfigError(f"no memory model for strategy '{bad[0] if bad else text}' "
                          f"(choices: {', '.join(MM.STRATEGIES)})")
    return names


def source_run(runs: list[RunResult], path: str) -> RunResult:
    """The latest run in ``runs`` that recorded its memory facts at two batch sizes, one
    rank preferred."""
    got = [r for r in runs if r.status == "ok" and r.metrics.memory_facts is not None
           and len(r.metrics.memory_facts.fwd_bwd_peak_bytes or []) >= 2]
    if not got:
        raise ConfigError(f"no run in {path} recorded its memory facts (metrics.memory_facts: "
                          "runs of this version with --strategy single, ddp or fsdp)")
    return max(got, key=lambda r: ((r.world_size or 1) == 1, str(r.started_at or "")))


def inputs_of(run: RunResult) -> MM.Inputs:
    pm, facts = run.metrics.peak_mem_bytes, run.metrics.memory_facts
    assert facts is not None
    try:
        return MM.inputs_from(facts, pm.device_allocated, pm.device_reserved)
    except ValueError as e:
        raise ConfigError(f"{run.label}: {e}") from None


def device_memory(run: RunResult, given: int | None, nproc: int) -> tuple[int | None, str]:
    """Bytes one rank may hold and where that came from: --device-memory, else the run's GPU,
    else (CPU) the host's memory shared by ``nproc`` ranks."""
    if given is not None:
        return given, "--device-memory"
    gpus = run.env.get("gpus") or []
    if gpus and isinstance(gpus[0], dict) and gpus[0].get("memory_total_bytes"):
        return int(gpus[0]["memory_total_bytes"]), f"the run's GPU ({gpus[0].get('name')})"
    host = run.env.get("mem_total_bytes")
    if host:
        return int(host) // nproc, f"the run's host memory / {nproc} rank(s)"
    return None, "not recorded: give --device-memory"


def sharded_caveat(run: RunResult) -> str | None:
    """What a memory prediction from a run that shards its state (FSDP) may get wrong, or
    None. Its probe's peak holds FSDP's unsharded buffers, which the model takes out
    (``memmodel.gathered_bytes``); on one rank what is left is FSDP's own slope (resnet18 at
    32 px, 2026-11-29: 410 kB per sample against 383 kB alone, a run alone predicted 1.00 of
    the prediction from a run alone at the FSDP run's batch and 1.01 at 4x; digits_cnn
    1.00, gpt_tiny 0.97-0.99). On two ranks or more the probe also holds gradients waiting
    for their reduce-scatter, and how many varies from run to run: resnet18 on 2 ranks read
    11.2 MB more in 4 of 18 probe steps, and from the 2 runs of 6 where that hit its batch, a run
    alone at 4x its batch came out 1.47 of the prediction from a run alone."""
    facts = run.metrics.memory_facts
    strategy = (facts.strategy if facts is not None else None) or run.cfg("dist.strategy")
    if not traits_of(str(strategy or "single")).shards_state:
        return None
    world = (facts.world if facts is not None else None) or run.batch.world_size or 1
    if world == 1:
        return (f"predicted from a one-rank {strategy} run: its per-sample slope is FSDP's "
                "(resnet18: 7% over a run alone's, within 2% at 4x its batch); a run of single "
                "or ddp predicts memory like for like")
    return (f"predicted from a {world}-rank {strategy} run: its probe's peak also holds "
            "gradients waiting for their reduce-scatter, as many as the timing leaves, so its "
            "per-sample slope can be far off (resnet18: 1.47x at 4x its batch in 2 runs of "
            "6); a one-rank run of single or ddp predicts memory like for like")


def cpu_basis_caveat(run: RunResult, device_named: bool, steps: bool = False) -> str | None:
    """What a prediction for the device ``--device-memory`` names (``device_named``) leaves
    out when its run trained on the CPU, or None: the CPU's peak is its tensor bytes, with no
    allocator cache to measure a margin from, and a GPU holds more than its tensors (its
    caching allocator's reserve, the CUDA context, the libraries' workspaces). ``steps``: the
    prediction also carries the run's step times (``plan``), which are the CPU's."""
    facts = run.metrics.memory_facts
    device = (facts.device if facts is not None else None) or ""
    if not device_named or not device.startswith("cpu"):
        return None
    return ("predicted from a run on the CPU for the device --device-memory names: its peak "
            "is the CPU's tensor bytes, with no allocator margin; a GPU's caching allocator "
            "reserves more than its tensors, and the CUDA context and the libraries' "
            "workspaces take room outside the peak"
            + ("; every step, samples/s and device time here is this CPU's, not the GPU's"
               if steps else "")
            + "; a few steps of a one-rank run on that GPU predict like for like")


def run_memory(args: argparse.Namespace, runs: list[RunResult]) -> int:
    run = source_run(runs, args.from_result)
    inputs = inputs_of(run)
    batches = args.memory_batches or [int(run.batch.per_device or 1)]
    points, fits = [], []
    for s in args.memory_strategies:
        for n in args.memory_nproc:
            cap, source = device_memory(run, args.device_memory_bytes, n)
            share = data_share(run, s, n)
            for b in batches:
                points.append({**_point(MM.predict(inputs, s, n, b), cap, source, inputs.probes),
                               **over_data(b, share)})
            fits.append({**_largest(inputs, s, n, cap, source), "data_samples_per_rank": share})
    named = args.device_memory_bytes is not None
    out = {"from": {**_from(run, inputs), "caveat": sharded_caveat(run),
                    "device_caveat": cpu_basis_caveat(run, named)},
           "points": points, "largest_batch": fits}
    if args.json:
        print(json.dumps(out, indent=2, default=str))
    else:
        _print(out)
    return 0


def data_share(run: RunResult, strategy: str, nproc: int) -> int | None:
    """The training samples per rank of ``run``'s data on ``nproc`` ranks of ``strategy``
    (``core/metrics.data_share``): None where the run did not record its data's size."""
    return M.data_share(run.metrics.train_samples, traits_of(strategy).training_ranks(nproc))


def over_data(batch: int, share: int | None) -> dict[str, Any]:
    """``data_samples_per_rank`` and ``over_data``: the batch per rank is more than the run's
    data holds per rank (no full step in an epoch: the memory is predicted all the same)."""
    return {"data_samples_per_rank": share, "over_data": M.over_share(batch, share)}


def over_data_text(points: list[dict[str, Any]]) -> str | None:
    """``more samples per rank than the run's data holds for each, ... ddp 8 x 256 (179)``:
    the points over it, or None where none is."""
    over = [p for p in points if p.get("over_data")]
    if not over:
        return None
    return ("more samples per rank than the run's data holds for each, so no full step in an "
            "epoch on that data (the memory holds for a larger dataset) (strategy, nproc x "
            "batch per rank: the data's samples per rank): "
            + ", ".join(f"{p['strategy']} {p['nproc']} x {p['batch_size']} "
                        f"({p['data_samples_per_rank']:,})" for p in over))


def _point(p: MM.Point, cap: int | None, source: str, probes: int) -> dict[str, Any]:
    """One point's JSON: the peak, its interval and parts, and the fit as a claim (``fits``:
    true / false where the claim decided it, null where inconclusive or unknown)."""
    claim = (CK.memory_fit(p.peak_bytes, p.low_bytes, p.high_bytes, cap, probes)
             if cap else None)
    fits = None
    if claim is not None and claim.decided:
        fits = claim.rule == CL.RULE_BELOW
    return {"strategy": p.strategy, "nproc": p.nproc, "batch_size": p.batch,
            "predicted_peak_bytes": p.peak_bytes, "predicted_peak_low_bytes": p.low_bytes,
            "predicted_peak_high_bytes": p.high_bytes, "parts": p.parts,
            "peak_phase": p.phase, "device_memory_bytes": cap,
            "device_memory_source": source, "fits": fits,
            "fit": claim.to_dict() if claim else None,
            "fit_verdict": claim.short_verdict if claim else "no device size"}


def _largest(i: MM.Inputs, s: str, n: int, cap: int | None, source: str) -> dict[str, Any]:
    """The largest batch per rank that fits, up to which batch it is inconclusive, and the
    largest the point estimate puts under the device (``largest_fit``)."""
    return {"strategy": s, "nproc": n, "device_memory_bytes": cap,
            "device_memory_source": source, **largest_fit(i, s, n, cap, "rank")}


def largest_fit(i: MM.Inputs, s: str, n: int, cap: int | None, per: str) -> dict[str, Any]:
    """Where the batch stops fitting, by ``claim_kinds.memory_fit``'s rule (``predict --memory``
    and ``plan`` both; ``per``: ``rank`` or ``device``, in the keys):
    ``largest_batch_per_<per>``, the largest batch whose whole interval lies under the
    device (its top below the device's size: it fits); ``..._low_end``, the largest
    whose interval's low end is still at or under it (not "does not fit": the batches after
    the first up to it are inconclusive); ``..._point``, the largest whose point estimate is
    under it. Without an interval (fewer than three batch sizes probed) only the point
    estimate, and no verdict; all None without a device size."""
    key = f"largest_batch_per_{per}"
    out: dict[str, Any] = {key: None, f"{key}_low_end": None, f"{key}_point": None,
                           "interval": i.act_slope_change is not None}
    if cap:
        out[f"{key}_point"] = MM.largest_batch(i, s, n, cap)
        if out["interval"]:
            # fits: the top strictly under the device (an interval that reaches the device's
            # size holds it: inconclusive); does not fit: the low end over it
            out[key] = MM.largest_batch(i, s, n, cap - 1, bound="high")
            out[f"{key}_low_end"] = MM.largest_batch(i, s, n, cap, bound="low")
    return out


def share_under_largest(got: dict[str, Any], per: str) -> int | None:
    """The run's data's samples per rank (``data_samples_per_<per>``) where the largest batch
    that fits (or that the point estimate puts under the device, or up to which it is
    inconclusive) is more than it; else None."""
    key, share = f"largest_batch_per_{per}", got.get(f"data_samples_per_{per}")
    top = max((got.get(k) or 0) for k in (key, f"{key}_low_end", f"{key}_point"))
    return share if share is not None and top > share else None


def data_text(got: dict[str, Any], per: str) -> str:
    """``, more than the 1,438 samples per rank the run's data holds`` where the largest
    batch that fits is more than the run's data holds per rank; else nothing."""
    share = share_under_largest(got, per)
    if share is None:
        return ""
    return f", more than the {share:,} samples per {per} the run's data holds"


def largest_text(got: dict[str, Any], per: str = "rank", short: bool = False) -> str:
    """``largest batch per rank that fits: 151 (152 to 192: inconclusive)`` from
    ``largest_fit``'s fields: the words ``predict --memory`` and ``plan`` both say
    (``short``: the figures alone, ``151 (152 to 192: inconclusive)``)."""
    key = f"largest_batch_per_{per}"
    b, up, pt = got[key], got[f"{key}_low_end"], got[f"{key}_point"]
    head = "" if short else f"largest batch per {per} that {CL.FITS}: "
    if pt is None:
        return head + "n/a"
    if not got["interval"]:
        why = f"({CL.NO_INTERVAL}: fewer than three batch sizes probed)"
        return (f"{pt:,} under it by the point estimate, not judged {why}" if short
                else f"largest batch per {per} predicted under it: {pt:,} {why}")
    b, up = b or 0, max(up or 0, b or 0)
    span = ("" if up <= b else f"{up:,}: {CL.INCONCLUSIVE}" if up == b + 1
            else f"{b + 1:,} to {up:,}: {CL.INCONCLUSIVE}")
    if b:
        return head + f"{b:,}" + (f" ({span})" if span else "")
    return head + (f"none ({span})" if span else "none, not even 1 sample")


def _from(run: RunResult, i: MM.Inputs) -> dict[str, Any]:
    f = run.metrics.memory_facts
    assert f is not None
    return {"run": run.label, "run_id": run.run_id, "strategy": f.strategy, "world": f.world,
            "device": f.device, "optimizer": f.optimizer,
            "optimizer_states_per_param": f.optimizer_states_per_param,
            "param_count": f.param_count, "params_bytes": i.params_bytes,
            "largest_unit_bytes": i.largest_unit_bytes, "batch_sizes": f.batch_sizes,
            "activations_per_sample_bytes": i.act_per_sample_bytes,
            "activations_fixed_bytes": i.act_fixed_bytes,
            "activations_slope_change_bytes": i.act_slope_change,
            "interval_source": i.band_source,
            "allocator_margin": i.margin, "allocator_margin_range": [i.margin_low,
                                                                     i.margin_high],
            "margin_source": i.margin_source, "method": f.method}


def span_text(lo: int | None, hi: int | None) -> str:
    """``150-158 MiB``: an interval in the unit of its top (``n/a`` without one)."""
    from scaleprobe.commands.terminal import bytes_  # heavy: rich

    if lo is None or hi is None:
        return "n/a"
    top = bytes_(hi)
    value, _, unit = top.partition(" ")
    scale = hi / float(value) if float(value) else 1.0
    low = lo / scale
    return f"{low:.1f}-{top}" if low < 100 else f"{low:.0f}-{top}"


def _tables() -> tuple[Any, Any]:
    # heavy: rich: printing only; kept out of the CLI's start-up
    from rich import box
    from rich.table import Table

    def table(title: str, cols: tuple[str, ...]) -> Any:
        t = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        for c in cols:
            t.add_column(c, justify="left" if c in ("strategy", "fits", "phase") else "right",
                         no_wrap=True)
        return t

    return (table("predicted peak memory per rank, its interval, and whether it fits",
                  ("strategy", "N", "batch/rank", "peak", "interval", "device", "fits")),
            table("where the peak per rank goes, in the phase it peaks in (state exact, "
                  "activations measured)",
                  ("strategy", "N", "batch", "state", "gathered", "step", "margin",
                   "phase")))


def _print(out: dict[str, Any]) -> None:
    """Two tables that fit 80 columns: the peak, its interval and the fit; then its parts."""
    # heavy: rich: printing only; kept out of the CLI's start-up
    from rich.console import Console

    from scaleprobe.commands.terminal import bytes_, esc  # heavy: rich

    con, f = Console(), out["from"]
    change = f["activations_slope_change_bytes"]
    con.print(f"from {f['run']}: {f['param_count']:,} parameters ({bytes_(f['params_bytes'])}), "
              f"{f['optimizer']} with {f['optimizer_states_per_param']} state tensor(s) per "
              f"parameter; activations {bytes_(f['activations_per_sample_bytes'])} per sample, "
              f"fixed part {bytes_(f['activations_fixed_bytes'])} ("
              + ("below 0: the step peaks before every gradient exists; "
                 if f["activations_fixed_bytes"] < 0 else "")
              + f"measured at batch "
              f"{f['batch_sizes']} on {f['device']}); interval: "
              + (f"the per-sample slope changed by {change:+,.0f} B across the probes "
                 f"({f['interval_source']})" if change is not None else f['interval_source'])
              + f"; allocator margin {f['allocator_margin']:.1%} ({f['margin_source']})",
              markup=False, highlight=False)
    for key in ("caveat", "device_caveat"):
        if f.get(key):
            con.print(f"caveat: {f[key]}", markup=False, highlight=False)
    head, parts = _tables()
    for p in out["points"]:
        q, row = p["parts"], (esc(p["strategy"]), str(p["nproc"]), str(p["batch_size"]))
        head.add_row(*row, bytes_(p["predicted_peak_bytes"]),
                     span_text(p["predicted_peak_low_bytes"], p["predicted_peak_high_bytes"]),
                     bytes_(p["device_memory_bytes"]), esc(p["fit_verdict"]))
        parts.add_row(*row, bytes_(sum(q[k] for k in STATE_PARTS)),
                      bytes_(q["ddp_buckets"] + q["gathered_unit"]),
                      bytes_(sum(q[k] for k in STEP_PARTS)), bytes_(q["allocator_margin"]),
                      "fwd/bwd" if p["peak_phase"] == MM.PHASE_FB else "opt step")
    con.print(head)
    con.print(parts)
    con.print("state = params + grads + optimizer state + master copies; gathered = "
              "DDP's gradient buckets or FSDP's gathered units (parameters + gradients); step = "
              "activations + the batch, or the optimizer step's temporaries, whichever peaks "
              "(--json: every part)", markup=False, highlight=False)
    if text := over_data_text(out["points"]):
        con.print(text, markup=False, highlight=False)
    for row in out["largest_batch"]:
        con.print(_largest_line(row, out["points"]), markup=False, highlight=False)


def _largest_line(row: dict[str, Any], points: list[dict[str, Any]]) -> str:
    from scaleprobe.commands.terminal import bytes_  # heavy: rich

    cap = row["device_memory_bytes"]
    q = next(p["parts"] for p in points
             if (p["strategy"], p["nproc"]) == (row["strategy"], row["nproc"]))
    state = " + ".join(f"{k.replace('_', ' ')} {bytes_(q[k])}" for k in STATE_PARTS)
    where = (f"{bytes_(cap)} per rank ({row['device_memory_source']})" if cap
             else row["device_memory_source"])
    said = largest_text(row)
    return f"  {row['strategy']} on {row['nproc']}: {state}; {said} in {where}" + \
        data_text(row, "rank")
