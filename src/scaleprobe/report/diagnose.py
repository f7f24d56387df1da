"""Diagnosis: what limits a run, the numbers that show it, and what to change.

``diagnose_run(rec)`` looks at one run record; ``diagnose_experiment(records)`` at many
together (sweeps, scaling, loader settings, co-location, parity). Each returns a list of
``Finding``. Thresholds live in ``scaleprobe.report.thresholds.Thresholds``; the verdicts
and their rules are listed in docs/REPORTS.md.

Verdicts of one run:

    input-bound          data wait above the threshold, or real-data samples/s well below a
                         synthetic-data run that differs in the dataset alone (like for like)
    input-bound at epoch starts  most of the data wait fell on the steps that took an
                         epoch's first batch, and those waits are a notable share of the
                         timed window: the loader prefetches nothing across an epoch
                         boundary; alone when the other steps do not wait, else beside
                         input-bound
    communication-bound  exposed communication above the threshold, most of it transfer
                         (the standalone collective for the gradient bytes)
    synchronisation overhead  exposed communication above the threshold, most of it not
                         transfer: hooks, bucketing, waiting for the slowest rank
    straggler            the slowest rank's median step well above the ranks' median
    CPU saturated        the run's measured CPU use (its whole process tree, loader workers
                         included) above the threshold share of all cores; threads +
                         workers against cores is context in the evidence, never the reason
    compute-bound        none of the above and compute (h2d + forward + backward + optimizer)
                         dominates; or MFU at or above ``mfu_compute_bound``
    not compute-bound    MFU below ``mfu_compute_bound``: "8% of peak; the step waits on X",
                         X the input, the communication, or the host (compute phases that
                         use little of the peak); replaces the compute-share verdict
    memory headroom      device peak against the GPU's memory (tight, or room to grow)
    measured under load  processes outside the run's tree used the machine meanwhile
    out of memory / failed / shard audit failed
"""

from __future__ import annotations

from typing import Any

from scaleprobe import results as res
from scaleprobe.invariants import check_run
from scaleprobe.report import advice, fmt
from scaleprobe.report import pairing as P
from scaleprobe.report import records as R
from scaleprobe.report.finding import SEVERITIES, Finding, merge_same
from scaleprobe.report.findings_exp import experiment_findings
from scaleprobe.report.load import run_load
from scaleprobe.report.thresholds import DEFAULT, Thresholds

__all__ = ["Finding", "Thresholds", "diagnose_all", "diagnose_experiment", "diagnose_run",
           "format_findings", "merge_same"]


def diagnose_run(rec: dict[str, Any], others: list[dict[str, Any]] | None = None,
                 th: Thresholds = DEFAULT) -> list[Finding]:
    """Findings for one run record. ``others``: records from the same results, used to find
    a synthetic-data run that differs from this one in its dataset alone."""
    subject = R.name(rec)
    status = rec.get("status")
    if status in ("oom", "failed"):
        verdict = "out of memory" if status == "oom" else "failed"
        rec_text = advice.oom(rec) if status == "oom" else _failed_hint(rec)
        return [Finding(verdict, rec.get("error") or R.status_text(rec), rec_text, "error",
                        subject)]
    out = [f for f in (*_input_bound(rec, others or [], th), _comm_bound(rec, th),
                       _straggler(rec, th), _cpu(rec, th)) if f is not None]
    shares = None if any(f.severity == "warning" for f in out) else _compute_bound(rec, th)
    peak_use = _peak_use(rec, th)  # MFU, where counted, decides "compute-bound"
    if peak_use is not None and peak_use.verdict == "compute-bound" and shares is not None:
        peak_use = Finding(peak_use.verdict, f"{peak_use.evidence}; {shares.evidence}",
                           peak_use.recommendation, peak_use.severity)
    if peak_use is not None or shares is not None:
        out.append(peak_use or shares)  # type: ignore[arg-type]
    for f in (_memory(rec, th), _audit(rec), _load(rec, th)):
        if f is not None:
            out.append(f)
    out.extend(_invariants(rec))
    if status == "target_not_reached":
        out.append(Finding("target not reached", rec.get("error") or "target not reached",
                           "raise --max-epochs, tune --lr / --lr-scaling, or set a lower "
                           "--target; the curve is in target_curve.csv", "warning"))
    if status == "interrupted":
        measured = R.metric(rec, "step_time_s.median") is not None
        out.append(Finding("interrupted", "the run was stopped before it finished",
                           "figures cover the steps timed before the stop" if measured else
                           "nothing was measured: run it again (a sweep reruns interrupted "
                           "points)", "info"))
    return [Finding(f.verdict, f.evidence, f.recommendation, f.severity, subject) for f in out]


def _load(rec: dict[str, Any], th: Thresholds) -> Finding | None:
    flag, reason = run_load(rec, th)
    if not flag:
        return None
    return Finding("measured under load", reason,
                   "its figures may be slower than the machine allows: re-run it when the "
                   "machine is quiet, and compare it only with runs measured alike", "warning")


def _failed_hint(rec: dict[str, Any]) -> str:
    where = res.get(rec, "paths.dir")
    return f"see the logs in {where}" if where else "see the run's logs"


def _shares(rec: dict[str, Any]) -> str:
    total = R.breakdown_total_s(rec)
    if not total:
        return ""
    bd = R.metric_dict(rec, "breakdown_s")
    parts = [f"{k} {fmt.pct(v / total)}" for k, v in bd.items() if v]
    return "step: " + ", ".join(parts)


def _input_bound(rec: dict[str, Any], others: list[dict[str, Any]],
                 th: Thresholds) -> list[Finding]:
    """"input-bound" and / or "input-bound at epoch starts": the latter alone when the steps
    between epoch starts do not wait, both when they do (more workers help those)."""
    evidence = []
    f = R.metric(rec, "data_wait_fraction")
    if f is not None and f > th.data_wait_fraction:
        evidence.append(f"data wait {fmt.pct(f)} of each step ({fmt.ms(R.phase_s(rec, 'data'))}"
                        f" of {fmt.ms(R.breakdown_total_s(rec))}; threshold "
                        f"{fmt.pct(th.data_wait_fraction)})")
    synth = synthetic_twin(rec, others)
    sps = R.metric(rec, "samples_per_s")
    if synth is not None and sps:
        ratio = sps / R.metric(synth, "samples_per_s")
        if ratio < th.real_vs_synthetic:
            evidence.append(f"{R.cfg(rec, 'data.dataset')} data: {fmt.rate(sps)} samples/s vs "
                            f"{fmt.rate(R.metric(synth, 'samples_per_s'))} on synthetic data, "
                            f"every other setting the same ({fmt.pct(ratio)}, run "
                            f"{R.name(synth)})")
    starts = epoch_start_wait(rec, th)
    if starts is not None and not _steady_wait(rec, th):  # the wait is the starts' alone
        return [Finding("input-bound at epoch starts", "; ".join([starts, *evidence]),
                        advice.epoch_starts(rec), "warning")]
    out = ([Finding("input-bound", "; ".join(evidence), advice.input_bound(rec), "warning")]
           if evidence else [])
    if starts is not None:
        out.append(Finding("input-bound at epoch starts", starts, advice.epoch_starts(rec),
                           "warning"))
    return out


def epoch_start_wait(rec: dict[str, Any], th: Thresholds = DEFAULT) -> str | None:
    """The evidence that the data wait comes at epoch starts, or None: two or more timed
    epoch starts, at least ``epoch_start_share`` of the data wait on them, and their waits
    above ``data_wait_fraction`` of the timed window."""
    n = R.metric(rec, "epoch_starts_timed")
    share = R.metric(rec, "epoch_start_data_share")
    wait = R.metric(rec, "epoch_start_data_s")
    window = R.metric(rec, "epoch_start_window_share")
    spe, timed = R.metric(rec, "steps_per_epoch"), R.metric(rec, "steps_timed")
    if not n or n < 2 or share is None or share < th.epoch_start_share or not wait:
        return None
    if window is None:  # a record from before the window share: from its median wait
        span = R.metric(rec, "window_s")
        window = min(1.0, n * wait / span) if span else None
    if window is None or window <= th.data_wait_fraction:
        return None
    per = f"; {int(spe)} step{'s' if spe != 1 else ''} per epoch" if spe else ""
    # the median step leaves the starts out only while they are fewer than half the steps
    hidden = (", which samples/s (from the median step) leaves out"
              if timed and 2 * n < timed else "")
    return (f"{fmt.pct(share)} of the data wait fell on the {int(n)} timed steps that took an "
            f"epoch's first batch, {fmt.ms(wait)} each (median){per}: {fmt.pct(window)} of "
            f"the timed window{hidden}")


def _steady_wait(rec: dict[str, Any], th: Thresholds) -> bool:
    """The steps between epoch starts wait too: their median data wait above
    ``data_wait_fraction`` of the median step."""
    other, step = R.metric(rec, "epoch_start_other_data_s"), R.step_median_s(rec)
    return other is not None and bool(step) and other > th.data_wait_fraction * step


def synthetic_twin(rec: dict[str, Any], others: list[dict[str, Any]]) -> dict[str, Any] | None:
    """An ok synthetic-data run that differs from ``rec`` in the dataset (and what comes with
    it: data folder, sample and class counts) and in nothing else: same model, image size,
    transform, loader, batch, optimizer, world size..."""
    if R.is_synthetic(rec):
        return None
    for o in others:
        if (o is not rec and o.get("kind") == "run" and o.get("status") == "ok"
                and R.is_synthetic(o) and R.metric(o, "samples_per_s")
                and P.like_for_like(rec, o, P.DATASET_KEYS)):
            return o
    return None


def _comm_bound(rec: dict[str, Any], th: Thresholds) -> Finding | None:
    """Exposed communication above the threshold, said as transfer + sync overhead. Never
    at world size 1: one process has nothing to communicate (a 1-process DDP's own cost is
    wrapper overhead, recorded apart)."""
    world = R.world_size(rec)
    if world is not None and world < 2:
        return None
    f = R.metric(rec, "comm_fraction")
    if f is None or f <= th.comm_fraction:
        return None
    per = R.dict_of(res.get(rec, "comm.exposed_per_step"))
    if per.get("resolved") is False:  # measured in the step, its interval reaches 0: no verdict
        return None
    ev = (f"exposed communication {fmt.pct(f)} of each step ({fmt.ms(R.phase_s(rec, 'comm'))} "
          f"of {fmt.ms(R.breakdown_total_s(rec))}; threshold {fmt.pct(th.comm_fraction)})")
    transfer, overhead = R.number(rec, "comm.transfer_s"), R.number(rec, "comm.sync_overhead_s")
    if transfer is not None and overhead is not None:
        op = res.get(rec, "comm.transfer_standalone.op") or "collective"
        size = fmt.bytes_(R.number(rec, "comm.transfer_standalone.bytes"))
        ev += (f" = transfer {advice.short_ms(transfer)} (a standalone {op} of {size} in the "
               f"same process group) + sync overhead {advice.short_ms(overhead)} "
               f"({advice.sync_words(rec)[1]})")
    else:
        ev += "; not split into transfer and sync overhead (not measured in this result)"
    if per.get("interval_s"):
        lo, hi = per["interval_s"]
        ev += (f"; measured in the step: median {fmt.ms(per.get('median_s'))} [{fmt.ms(lo)}, "
               f"{fmt.ms(hi)}] over {per.get('steps')} steps")
    sync, no_sync = R.number(rec, "comm.sync_step_s"), R.number(rec, "comm.no_sync_step_s")
    if sync and no_sync:
        ev += (f"; measured in place: {fmt.ms(sync)} per step with gradient sync vs "
               f"{fmt.ms(no_sync)} without")
    verdict = ("synchronisation overhead" if advice.comm_dominant(rec) == "sync_overhead"
               else "communication-bound")
    return Finding(verdict, ev, advice.comm_bound(rec), "warning")


def _straggler(rec: dict[str, Any], th: Thresholds) -> Finding | None:
    st = R.dict_of(rec.get("straggler"))
    ratio = R.num(st.get("slowest_vs_median"))
    if ratio is None or ratio <= th.straggler_ratio:
        return None
    ev = (f"rank {st.get('slowest_rank')} runs at {ratio:.2f}x the median rank's step time "
          f"(threshold {th.straggler_ratio:.2f}x)")
    done = st.get("steps_done")
    if isinstance(done, dict) and done:
        ev += "; steps done per rank: " + ", ".join(f"{k}:{v}" for k, v in done.items())
    return Finding("straggler", ev, advice.straggler(rec, st.get("slowest_rank")), "warning")


def _cpu(rec: dict[str, Any], th: Thresholds) -> Finding | None:
    """Decided by measured CPU use only: the run tree's share of all cores over the timed
    window. Counting threads against cores said "CPU saturated" of a run that used 16% of
    the cores (a default run: 2 compute threads + 2 loader workers on 2 cores, mostly idle)."""
    util = R.metric(rec, "cpu_util_pct")
    if util is None or util <= th.cpu_util_pct:
        return None
    cores = advice.cores(rec)
    demand, demand_text = advice.cpu_demand(rec)
    oversub = bool(cores and demand and demand > cores)
    on_gpu = R.device_peak(rec) is not None or bool(res.get(rec, "env.gpus"))
    parts = [f"the run's processes used {util:.0f}% of all {cores or '?'} cores (measured; "
             f"threshold {th.cpu_util_pct:.0f}%)"]
    if demand_text and cores:
        parts.append(f"context: {demand_text} on {cores} cores")
    severity = "warning" if (oversub or on_gpu) else "info"
    return Finding("CPU saturated", "; ".join(parts),
                   advice.cpu_saturated(rec, oversub, on_gpu), severity)


def _compute_bound(rec: dict[str, Any], th: Thresholds) -> Finding | None:
    compute, total = R.compute_s(rec), R.breakdown_total_s(rec)
    if compute is None or not total or compute / total < th.compute_fraction:
        return None
    ev = (f"compute {fmt.pct(compute / total)} of each step ({fmt.ms(compute)} of "
          f"{fmt.ms(total)}); {_shares(rec)}")
    return Finding("compute-bound", ev, advice.compute_bound(rec), "info")


def _peak_use(rec: dict[str, Any], th: Thresholds) -> Finding | None:
    """MFU against the device's peak: "8% of peak: not compute-bound; the step waits on X",
    X the largest part of the step that is not the device's arithmetic."""
    mfu = R.metric(rec, "mfu")
    if mfu is None:
        return None
    peak = res.get(dict_of(rec.get("metrics")), "peak") or {}
    measured = "measured " if peak.get("measured") else ""
    head = (f"{fmt.mfu(mfu)} of the {measured}peak "
            f"({fmt.tflops(R.metric(rec, 'achieved_flops_per_s'))} of "
            f"{fmt.tflops((peak.get('flops_per_s') or 0) * (peak.get('devices') or 1))} TFLOP/s "
            f"{peak.get('dtype') or ''}; MFU)")
    if mfu >= th.mfu_compute_bound:
        return Finding("compute-bound", f"{head}: the device's arithmetic bounds the step "
                       f"(threshold {fmt.pct(th.mfu_compute_bound)})", advice.compute_bound(rec),
                       "info")
    return Finding("not compute-bound", f"{head}; the step waits on {_waits_on(rec)}",
                   advice.below_peak(rec), "info")


def _waits_on(rec: dict[str, Any]) -> str:
    total = R.breakdown_total_s(rec)
    bd = R.metric_dict(rec, "breakdown_s")
    if not total:
        return "something the step breakdown does not show"
    data, comm = (bd.get("data") or 0.0), (bd.get("comm") or 0.0)
    compute = R.compute_s(rec) or 0.0
    if max(data, comm) >= compute:
        what = "input (data wait" if data >= comm else "communication (exposed"
        return f"{what} {fmt.pct(max(data, comm) / total)} of the step)"
    return (f"the host and memory: compute phases take {fmt.pct(compute / total)} of the step "
            "but use little of the peak (small operators, kernel launches, memory-bound layers)")


def dict_of(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _memory(rec: dict[str, Any], th: Thresholds) -> Finding | None:
    total = R.gpu_total_bytes(rec)
    readings = [R.metric(rec, f"peak_mem_bytes.{k}")
                for k in ("device_allocated", "device_reserved", "device_nvml")]  # all numbers
    readings = [v for v in readings if v is not None]
    if not total or not readings:
        return None
    peak = max(readings)
    frac = peak / total
    ev = f"device peak {fmt.bytes_(peak)} of {fmt.bytes_(total)} ({fmt.pct(frac)})"
    batch = R.batch_size(rec)
    if frac > th.memory_tight_fraction:
        return Finding("memory headroom", ev + " - little headroom",
                       "a larger batch will run out of memory; to grow it use --amp bf16 or "
                       "activation checkpointing", "warning")
    if frac < th.memory_room_fraction:
        more = f"try batch {2 * batch} (now {batch}); " if batch else ""
        return Finding("memory headroom", ev + " - room for a larger batch",
                       f"{more}memory grows less than linearly with batch (weights and optimizer "
                       "state stay fixed); `scaleprobe sweep` with batch_size = \"auto\" finds "
                       "the largest that fits", "info")
    return None


def _audit(rec: dict[str, Any]) -> Finding | None:
    a = rec.get("audit")
    if not isinstance(a, dict) or a.get("ok") is not False:
        return None
    return Finding("shard audit failed", str(a.get("detail") or "replicas saw overlapping data"),
                   "give each rank its own shard (DistributedSampler, --set "
                   "dist.sampler=distributed) and call set_epoch(epoch) every epoch", "error")


INVARIANT_ADVICE = {
    "shares": "a measuring error: report it with the run's result.json",
    "no comm at 1": "one process has nothing to communicate; compare with --strategy single",
    "window": "steps vary widely (stalls every few steps?): look at steps.csv; trust the window "
              "figure for epoch planning",
    "unique data": "fix the sharding first: throughput over repeated samples is not progress",
}


def _invariants(rec: dict[str, Any]) -> list[Finding]:
    """What the record breaks of the invariants, checked again here (old files too)."""
    return [Finding(f"invariant broken: {v['name']}", v["detail"],
                    INVARIANT_ADVICE.get(v["name"], "see docs/VERDICTS.md"), "warning")
            for v in check_run(rec)]


def diagnose_experiment(records: list[dict[str, Any]], th: Thresholds = DEFAULT) -> list[Finding]:
    """Findings across runs: batch and loader recommendations, loader workers competing
    with compute, scaling losses, co-location and accuracy parity."""
    return experiment_findings(records, th)


def diagnose_all(records: list[dict[str, Any]], th: Thresholds = DEFAULT) -> list[Finding]:
    """Experiment findings first, then every run's."""
    runs = R.of_kind(records, "run")
    out = diagnose_experiment(records, th)
    for r in runs:
        out.extend(diagnose_run(r, runs, th))
    return out


def format_findings(findings: list[Finding]) -> str:
    """Findings as plain text for the terminal, most severe first."""
    if not findings:
        return "No findings: nothing stands out in these results."
    order = {s: i for i, s in enumerate(SEVERITIES)}
    lines = []
    for f in sorted(findings, key=lambda f: order.get(f.severity, len(order))):
        about = f" ({f.subject})" if f.subject else ""
        lines.append(f"[{f.severity}] {f.verdict}{about}")
        lines.append(f"    evidence: {f.evidence}")
        lines.append(f"    next:     {f.recommendation}")
    return "\n".join(lines)
