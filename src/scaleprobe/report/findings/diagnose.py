"""Diagnosis: what limits a run, the numbers that show it, and what to change.

``diagnose_run(rec)`` looks at one run record; ``diagnose_experiment(records)`` at many
together (sweeps, scaling, loader settings, co-location, parity). Each returns a list of
``Finding``. Thresholds live in ``scaleprobe.core.thresholds.Thresholds``; the verdicts of
one run and their rules are docs/REPORTS.md's "Diagnosis" (CPU-starved: docs/VERDICTS.md).
"""

from __future__ import annotations

import re
import shutil
import textwrap

from scaleprobe.core import fmt
from scaleprobe.core.invariants import check_run, uneven_steps
from scaleprobe.core.record import Record
from scaleprobe.core.result_model import RunResult, dict_of, num
from scaleprobe.core.run_metrics import Peak
from scaleprobe.core.run_parts import Comm
from scaleprobe.core.thresholds import DEFAULT, Thresholds
from scaleprobe.report.findings import advice
from scaleprobe.report.findings import process as PR
from scaleprobe.report.findings.across_runs import experiment_findings
from scaleprobe.report.findings.finding import SEVERITIES, Finding
from scaleprobe.report.findings.grouped import device_peak
from scaleprobe.report.reading import pairing as P
from scaleprobe.report.reading import records as R
from scaleprobe.report.reading.machine_load import run_load


def _flops_of(achieved: float | None, peak: float) -> str:
    """'7.29 of 78.1 GFLOP/s': both in the unit that reads for the peak."""
    unit, (a, p) = fmt.flops_column([achieved, peak])
    return f"{a} of {p} {unit}"


def diagnose_run(rec: RunResult, others: list[RunResult] | None = None,
                 th: Thresholds = DEFAULT) -> list[Finding]:
    """Findings for one run record. ``others``: records from the same results, used to find
    a synthetic-data run that differs from this one in its dataset alone."""
    subject = rec.label
    status = rec.status
    if status in ("oom", "failed"):
        verdict = "out of memory" if status == "oom" else "failed"
        rec_text = advice.oom(rec) if status == "oom" else _failed_hint(rec)
        return [Finding(verdict, rec.error or rec.status_text, rec_text, "error",
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
    for f in (_memory(rec, th), _audit(rec), _load(rec, th), _uneven(rec), PR.refaults(rec, th),
              PR.gloo_io(rec, th)):
        if f is not None:
            out.append(f)
    out.extend(_invariants(rec))
    if status == "target_not_reached":
        out.append(Finding("target not reached", rec.error or "target not reached",
                           "raise --max-epochs, tune --lr / --lr-scaling, or set a lower "
                           "--target; the curve is in target_curve.csv", "warning"))
    if status == "interrupted":
        measured = rec.step_median_s is not None
        out.append(Finding("interrupted", "the run was stopped before it finished",
                           "figures cover the steps timed before the stop" if measured else
                           "nothing was measured: run it again (a sweep reruns interrupted "
                           "points)", "info"))
    return [Finding(f.verdict, f.evidence, f.recommendation, f.severity, subject) for f in out]


def _load(rec: RunResult, th: Thresholds) -> Finding | None:
    flag, reason = run_load(rec, th)
    if not flag:
        return None
    return Finding("measured under load", reason,
                   "its figures may be slower than the machine allows: re-run it when the "
                   "machine is quiet, and compare it only with runs measured alike", "warning")


def _failed_hint(rec: RunResult) -> str:
    where = rec.paths.get("dir")
    return f"see the logs in {where}" if where else "see the run's logs"


def _shares(rec: RunResult) -> str:
    total = rec.metrics.breakdown_s.measured_total_s()
    if not total:
        return ""
    bd = rec.metrics.breakdown_s.phases()
    parts = [f"{k} {fmt.pct(v / total)}" for k, v in bd.items() if v]
    return "step: " + ", ".join(parts)


def _input_bound(rec: RunResult, others: list[RunResult],
                 th: Thresholds) -> list[Finding]:
    """"input-bound" and / or "input-bound at epoch starts": the latter alone when the steps
    between epoch starts do not wait, both when they do (more workers help those)."""
    evidence = []
    m = rec.metrics
    f = m.data_wait_fraction
    if f is not None and f > th.data_wait_fraction:
        evidence.append(f"data wait {fmt.pct(f)} of each step ({fmt.duration(m.breakdown_s.data)}"
                        f" of {fmt.duration(m.breakdown_s.measured_total_s())}; threshold "
                        f"{fmt.pct(th.data_wait_fraction)})")
    synth = synthetic_twin(rec, others)
    sps = m.samples_per_s
    synth_sps = synth.metrics.samples_per_s if synth is not None else None
    if synth_sps and sps:
        ratio = sps / synth_sps
        if ratio < th.real_vs_synthetic:
            evidence.append(f"{rec.cfg('data.dataset')} data: {fmt.rate(sps)} samples/s vs "
                            f"{fmt.rate(synth_sps)} on synthetic data, "
                            f"every other setting the same ({fmt.pct(ratio)}, run "
                            f"{synth.label})")  # type: ignore[union-attr]
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


def epoch_start_wait(rec: RunResult, th: Thresholds = DEFAULT) -> str | None:
    """The evidence that the data wait comes at epoch starts, or None: two or more timed
    epoch starts, at least ``epoch_start_share`` of the data wait on them, and their waits
    above ``data_wait_fraction`` of the timed window."""
    m = rec.metrics
    n = m.epoch_starts_timed
    share = m.epoch_start_data_share
    wait = m.epoch_start_data_s
    window = m.epoch_start_window_share
    spe, timed = m.steps_per_epoch, m.steps_timed
    if not n or n < 2 or share is None or share < th.epoch_start_share or not wait:
        return None
    if window is None:  # a record from before the window share: from its median wait
        span = m.window_s
        window = min(1.0, n * wait / span) if span else None
    if window is None or window <= th.data_wait_fraction:
        return None
    per = f"; {int(spe)} step{'s' if spe != 1 else ''} per epoch" if spe else ""
    # the median step leaves the starts out only while they are fewer than half the steps
    hidden = (", which the median step (the breakdown's basis) leaves out"
              if timed and 2 * n < timed else "")
    return (f"{fmt.pct(share)} of the data wait fell on the {int(n)} timed steps that took an "
            f"epoch's first batch, {fmt.duration(wait)} each (median){per}: {fmt.pct(window)} of "
            f"the timed window{hidden}")


def _steady_wait(rec: RunResult, th: Thresholds) -> bool:
    """The steps between epoch starts wait too: their median data wait above
    ``data_wait_fraction`` of the median step."""
    other, step = rec.metrics.epoch_start_other_data_s, rec.step_median_s
    return other is not None and step is not None and step > 0 \
        and other > th.data_wait_fraction * step


def synthetic_twin(rec: RunResult, others: list[RunResult]) -> RunResult | None:
    """An ok synthetic-data run that differs from ``rec`` in the dataset (and what comes with
    it: data folder, sample and class counts) and in nothing else: same model, image size,
    transform, loader, batch, optimizer, world size..."""
    if rec.is_synthetic:
        return None
    for o in others:
        if (o is not rec and o.status == "ok"
                and o.is_synthetic and o.metrics.samples_per_s
                and P.like_for_like(rec, o, P.DATASET_KEYS)):
            return o
    return None


def _comm_bound(rec: RunResult, th: Thresholds) -> Finding | None:
    """Exposed communication above the threshold, said as transfer + sync overhead. Never
    at world size 1: one process has nothing to communicate (a 1-process DDP's own cost is
    wrapper overhead, recorded apart)."""
    world = rec.world_size
    if world is not None and world < 2:
        return None
    bd = rec.metrics.breakdown_s
    f = rec.metrics.comm_fraction
    if f is None or f <= th.comm_fraction:
        return None
    c = rec.comm or Comm()
    per = dict_of(c.exposed_per_step)
    if per.get("resolved") is False:  # measured in the step, its interval reaches 0: no verdict
        return None
    ev = (f"exposed communication {fmt.pct(f)} of each step ({fmt.duration(bd.comm)} "
          f"of {fmt.duration(bd.measured_total_s())}; threshold {fmt.pct(th.comm_fraction)})")
    transfer, overhead = c.transfer_s, c.sync_overhead_s
    if transfer is not None and overhead is not None:
        standalone = dict_of(c.transfer_standalone)
        op = standalone.get("op") or "collective"
        size = fmt.bytes_(num(standalone.get("bytes")))
        ev += (f" = transfer {advice.short_ms(transfer)} (a standalone {op} of {size} in the "
               f"same process group) + sync overhead {advice.short_ms(overhead)} "
               f"({advice.unsplit(advice.sync_words(rec)[1])})")
    else:
        ev += "; not split into transfer and sync overhead (not measured in this result)"
    if per.get("interval_s"):
        lo, hi = per["interval_s"]
        ev += (f"; measured in the step: median {fmt.duration(per.get('median_s'))} "
               f"[{fmt.duration(lo)}, {fmt.duration(hi)}] over {per.get('steps')} steps")
    sync, no_sync = c.sync_step_s, c.no_sync_step_s
    if sync and no_sync:
        ev += (f"; measured in place: {fmt.duration(sync)} per step with gradient sync vs "
               f"{fmt.duration(no_sync)} without")
    verdict = ("synchronisation overhead" if advice.comm_dominant(rec) == "sync_overhead"
               else "communication-bound")
    return Finding(verdict, ev, advice.comm_bound(rec), "warning")


def _straggler(rec: RunResult, th: Thresholds) -> Finding | None:
    st = rec.straggler
    ratio = st.slowest_vs_median if st is not None else None
    if st is None or ratio is None or ratio <= th.straggler_ratio:
        return None
    ev = (f"rank {st.slowest_rank} runs at {ratio:.2f}x the median rank's step time "
          f"(threshold {th.straggler_ratio:.2f}x)")
    done = st.steps_done
    if done:
        ev += "; steps done per rank: " + ", ".join(f"{k}:{v}" for k, v in done.items())
    return Finding("straggler", ev, advice.straggler(rec, st.slowest_rank), "warning")


def _cpu(rec: RunResult, th: Thresholds) -> Finding | None:
    """Decided by measured CPU use only: the run tree's share of all cores over the timed
    window. Counting threads against cores said "CPU saturated" of a run that used 16% of
    the cores (a default run: 2 compute threads + 2 loader workers on 2 cores, mostly idle)."""
    util = rec.metrics.cpu_util_pct
    if util is None or util <= th.cpu_util_pct:
        return None
    cores = advice.cores(rec)
    demand, demand_text = advice.cpu_demand(rec)
    oversub = bool(cores and demand and demand > cores)
    on_gpu = advice.on_gpu(rec)
    parts = [f"the run's processes used {util:.0f}% of all {cores or '?'} cores (measured; "
             f"threshold {th.cpu_util_pct:.0f}%)"]
    if demand_text and cores:
        parts.append(f"context: {demand_text} on {cores} cores")
    severity = "warning" if (oversub or on_gpu) else "info"
    return Finding("CPU saturated", "; ".join(parts),
                   advice.cpu_saturated(rec, oversub, on_gpu), severity)


def _compute_bound(rec: RunResult, th: Thresholds) -> Finding | None:
    bd = rec.metrics.breakdown_s
    compute, total = bd.compute_s(), bd.measured_total_s()
    if compute is None or not total or compute / total < th.compute_fraction:
        return None
    ev = (f"compute {fmt.pct(compute / total)} of each step ({fmt.duration(compute)} of "
          f"{fmt.duration(total)}); {_shares(rec)}")
    return Finding("compute-bound", ev, advice.compute_bound(rec), "info")


def _peak_use(rec: RunResult, th: Thresholds) -> Finding | None:
    """MFU against the device's peak: "8% of peak: not compute-bound; the step waits on X",
    X the largest part of the step that is not the device's arithmetic."""
    mfu = rec.metrics.mfu
    if mfu is None:
        return None
    peak = rec.metrics.peak or Peak()
    measured = "measured " if peak.measured else ""
    of = _flops_of(rec.metrics.achieved_flops_per_s,
                   (peak.flops_per_s or 0) * (peak.devices or 1))
    head = f"{fmt.mfu(mfu)} of the {measured}peak ({of} {peak.dtype or ''}; MFU)"
    if mfu >= th.mfu_compute_bound:
        return Finding("compute-bound", f"{head}: the device's arithmetic bounds the step "
                       f"(threshold {fmt.pct(th.mfu_compute_bound)})", advice.compute_bound(rec),
                       "info")
    waits = _waits_on(rec)
    if waits.startswith("the CPU"):
        return Finding("CPU-starved", f"{head}; the step waits on {waits}",
                       "measure on a quiet machine (or pin the run to cores nothing else "
                       "uses) before reading its MFU as the model's", "warning")
    return Finding("not compute-bound", f"{head}; the step waits on {waits}",
                   advice.below_peak(rec), "info")


def _waits_on(rec: RunResult) -> str:
    bd = rec.metrics.breakdown_s
    total = bd.measured_total_s()
    if not total:
        return "something the step breakdown does not show"
    data, comm = (bd.data or 0.0), (bd.comm or 0.0)
    compute = bd.compute_s() or 0.0
    if max(data, comm) >= compute:
        what = "input (data wait" if data >= comm else "communication (exposed"
        return f"{what} {fmt.pct(max(data, comm) / total)} of the step)"
    starved = _cpu_starved(rec)
    if starved:
        return (f"the CPU: compute phases take {fmt.pct(compute / total)} of the step, but "
                f"{starved}: the processor was busy elsewhere, so no statement about the "
                "model's own efficiency can be made from this run")
    if rec.metrics.cpu_util_pct is None:
        return (f"the host or memory: compute phases take {fmt.pct(compute / total)} of the "
                "step but use little of the peak (the run's CPU share was not measured, so "
                "a starved processor is not ruled out)")
    return (f"the host and memory: compute phases take {fmt.pct(compute / total)} of the step "
            "but use little of the peak (small operators, kernel launches, memory-bound layers)")


# a run whose processes used less than this share of the cores their threads could use was
# starved of CPU (other programs held the cores): its low MFU is not the model's
CPU_STARVED_SHARE = 0.5


def _cpu_starved(rec: RunResult) -> str | None:
    """"the run's processes used 8% of the machine's cores, 16% of what its 1 thread(s) x 2
    process(es) could" when that is below ``CPU_STARVED_SHARE``; None when not starved or
    not measured."""
    cpu = rec.metrics.cpu_util_pct
    cores = rec.env_number("cores")
    threads = rec.env_number("threads")
    if cpu is None or not cores or not threads:
        return None
    ranks = rec.world_size or 1
    usable = min(1.0, threads * ranks / cores)  # the share of the machine its threads can use
    share = cpu / 100.0 / usable
    if share >= CPU_STARVED_SHARE:
        return None
    return (f"the run's processes used {fmt.pct_value(cpu)} of the machine's cores, "
            f"{fmt.pct(share)} of what its {int(threads)} thread(s) x {ranks} process(es) "
            "could")


def _memory(rec: RunResult, th: Thresholds) -> Finding | None:
    got = device_peak(rec)
    if got is None:
        return None
    peak, total = got
    frac = peak / total
    ev = f"device peak {fmt.bytes_(peak)} of {fmt.bytes_(total)} ({fmt.pct(frac)})"
    batch = rec.batch_size
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


def _audit(rec: RunResult) -> Finding | None:
    a = rec.audit
    if a is None or a.ok is not False:
        return None
    return Finding("shard audit failed", str(a.detail or "replicas saw overlapping data"),
                   "give each rank its own shard (DistributedSampler, --set "
                   "dist.sampler=distributed) and call set_epoch(epoch) every epoch", "error")


INVARIANT_ADVICE = {
    "shares": "a measuring error: report it with the run's result.json",
    "no comm at 1": "one process has nothing to communicate; compare with --strategy single",
    "window": "a measuring error: report it with the run's result.json",
    "unique data": "fix the sharding first: throughput over repeated samples is not progress",
}


def _uneven(rec: RunResult) -> Finding | None:
    """Steps that vary widely: the median step's rate is not the run's throughput."""
    gap = uneven_steps(rec)
    if gap is None:
        return None
    step, window = gap
    why = epoch_start_wait(rec)
    return Finding("steps vary widely",
                   f"{fmt.rate(window)} samples/s over the timed window, {fmt.rate(step)} from "
                   f"the median step ({step / window:.2f}x)" + (f": {why}" if why else ""),
                   "look at steps.csv for the slow steps (loader stalls, epoch starts, other "
                   "programs); plan epochs with the window's figure, the one samples/s shows",
                   "warning")


def _invariants(rec: RunResult) -> list[Finding]:
    """What the record breaks of the invariants, checked again here (old files too)."""
    return [Finding(f"invariant broken: {v['name']}", v["detail"],
                    INVARIANT_ADVICE.get(v["name"], "see docs/VERDICTS.md"), "warning")
            for v in check_run(rec)]


def diagnose_experiment(records: list[Record], th: Thresholds = DEFAULT) -> list[Finding]:
    """Findings across runs: batch and loader recommendations, loader workers competing
    with compute, scaling losses, co-location and accuracy parity."""
    return experiment_findings(records, th)


def diagnose_all(records: list[Record], th: Thresholds = DEFAULT) -> list[Finding]:
    """Experiment findings first, then every run's."""
    runs = R.runs(records)
    out = diagnose_experiment(records, th)
    for r in runs:
        out.extend(diagnose_run(r, runs, th))
    return out


UNIT = re.compile(r"(\d) (ms|s|min|[KMGT]iB|[kMGTP]?FLOP/s|samples/s|repeats?|cores?)\b")


def format_findings(findings: list[Finding], width: int | None = None) -> str:
    """Findings as plain text for the terminal, most severe first, each line wrapped to the
    terminal (``width``) with its continuation lines under the text they continue."""
    if not findings:
        return "No findings: nothing stands out in these results."

    width = max(width or shutil.get_terminal_size((100, 24)).columns, 60) - 1
    order = {s: i for i, s in enumerate(SEVERITIES)}
    lines = []

    def put(head: str, text: str, indent: int) -> None:
        glued = UNIT.sub("\\1\u00a0\\2", text)  # a figure and its unit stay on one line
        lines.append(textwrap.fill(glued, width, initial_indent=head,
                                   subsequent_indent=" " * indent, break_on_hyphens=False,
                                   break_long_words=False).replace("\u00a0", " "))

    for f in sorted(findings, key=lambda f: order.get(f.severity, len(order))):
        about = f" ({f.subject})" if f.subject else ""
        put("", f"[{f.severity}] {f.verdict}{about}", 4)
        put("    evidence: ", f.evidence, 14)
        put("    next:     ", f.recommendation, 14)
    return "\n".join(lines)
