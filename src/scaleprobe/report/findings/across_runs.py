"""Findings that need several records: batch and loader recommendations, loader workers that
slow compute down, scaling losses, co-location and accuracy parity.

The loader check is the lesson measured on a 2-core machine: more loader workers cut the data
wait from 26% to 1% of a step, yet compute per step grew 1.4x because workers and compute
threads shared the cores, and throughput did not move. So the data wait is never judged
alone: compute (h2d + forward + backward + optimizer) per step is compared across loader settings of the same model,
data and batch.

Every pairing here is like for like (``report/reading/pairing.py``): the two runs differ in the keys
the finding varies and in nothing else, or no finding is made.
"""

from __future__ import annotations

from typing import Any

from scaleprobe.core import claim as CL
from scaleprobe.core import claim_kinds as CK
from scaleprobe.core import fmt
from scaleprobe.core import metrics as M
from scaleprobe.core.experiment_records import ColocateRecord, ParityRecord, SweepRecord
from scaleprobe.core.record import Record
from scaleprobe.core.result_model import BATCH_AXES, RunResult, dict_of, dicts, num
from scaleprobe.core.thresholds import DEFAULT, Thresholds
from scaleprobe.report.findings import advice
from scaleprobe.report.findings.finding import Finding
from scaleprobe.report.reading import pairing as P
from scaleprobe.report.reading import records as R
from scaleprobe.report.reading import repeats as REP
from scaleprobe.report.tables.batch import batch_table
from scaleprobe.report.tables.batch_rule import recommend_batch, runs_own_spread
from scaleprobe.report.tables.rows import ContentionCase, ScaleRow, WorkersPick
from scaleprobe.report.tables.scale import scale_table
from scaleprobe.report.tables.workers import recommend_workers


def experiment_findings(records: list[Record], th: Thresholds) -> list[Finding]:
    out: list[Finding] = []
    for eid, recs in R.by_experiment(records, "sweep").items():
        sweep: list[Record] = [*recs, *R.summaries(records, SweepRecord, eid)]
        if any(k in BATCH_AXES for r in recs for k in r.point):
            out.extend(_batch(eid, sweep))
        if any(k in R.LOADER_AXES for r in recs for k in r.point):
            out.extend(_workers(eid, sweep, th))
    out.extend(loader_contention(R.runs(records), th))
    out.extend(_scaling(records, th))
    out.extend(_colocate(r, th) for r in R.of_type(records, ColocateRecord))
    out.extend(_parity(r) for r in R.of_type(records, ParityRecord))
    return out


def _batch(eid: str, recs: list[Record]) -> list[Finding]:
    rec = recommend_batch(recs)
    fast, eff = rec["fastest"], rec["most_efficient"]
    if fast is None:
        return [Finding("batch size", rec["text"], "check the sweep's failed points", "warning",
                        eid)]
    evidence = " ".join(line.lstrip("- ") for line in rec["text"].splitlines()[1:])
    if not rec.get("fastest_decided"):
        tip = ("run the sweep with more --repeats (the spread is larger than the "
               "differences between batch sizes)")
        if runs_own_spread(fast, batch_table(recs)):
            tip = ("the runs' own step times vary more than the differences between batch "
                   "sizes (stalls or waits inside the runs: see the runs' findings and "
                   "steps.csv): remove them, or time more steps per run, before adding "
                   "--repeats")
        return [Finding(f"batch size: {CL.INCONCLUSIVE}", evidence, tip, "info", eid)]
    advice_text = f"batch {fast['batch_size']} for the shortest epoch"
    if eff is not None and rec.get("most_efficient_decided"):
        advice_text += (f"; batch {eff['batch_size']} for the most samples/s per GiB of memory"
                        if eff["batch_size"] != fast["batch_size"]
                        else " (also the most samples/s per GiB of memory)")
    return [Finding("batch size", evidence, advice_text, "info", eid)]


def _workers(eid: str, recs: list[Record], th: Thresholds) -> list[Finding]:
    rec = recommend_workers(recs, th)
    if rec["workers"] is None:
        if rec.get("decided") is False:
            return [Finding(f"loader workers: {CL.INCONCLUSIVE}", rec["text"],
                            "run the sweep with more --repeats", "info", eid)]
        return []
    if rec["workers"] == 0:
        flags = "--loader naive"
    else:
        flags = f"--loader pipelined --workers {rec['workers']}" + (
            f" --prefetch {rec['prefetch']}" if rec.get("prefetch") else "")
    return [Finding("loader workers", rec["text"], flags, "info", eid)]


def _worker_groups(runs: list[RunResult]) -> list[tuple[str | None, list[RunResult]]]:
    """(experiment label, runs): runs of one experiment that differ in loader workers and in
    nothing else."""
    shared = R.shared_ids(runs)
    by_exp: dict[str | None, list[RunResult]] = {}
    for r in runs:
        if r.status == "ok" and _compute_s(r) and r.loader_workers is not None:
            by_exp.setdefault(R.exp_label(r, shared), []).append(r)
    return [(label, g) for label, recs in by_exp.items()
            for g in P.like_for_like_groups(recs, P.WORKER_KEYS)]


def _compute_s(r: RunResult) -> float | None:
    return r.metrics.breakdown_s.compute_s()


def _workers_of(r: RunResult) -> int:
    return r.loader_workers or 0


def contention_cases(runs: list[RunResult], th: Thresholds) -> list[ContentionCase]:
    """Points that differ only in loader workers where more workers cut the data wait but
    compute per step grew by more than ``th.compute_growth``, by the paired interval over
    the points' repeats (one repeat each: the within-run spread, at least +/-10%). Per group:
    ``{"label", "base", "worst", "growth", "interval", "group"}``: ``base`` is the point with
    the fewest workers (the shortest median compute among several), ``worst`` the point
    whose compute interval lies above the bar with the largest estimate; both are points of
    ``repeats.group_repeats`` (the median repeat, with ``repeats``)."""
    out: list[ContentionCase] = []
    for label, recs in _worker_groups(runs):
        points = REP.group_repeats(recs)
        if len({p.loader_workers for p in points}) < 2:
            continue
        fewest = min(_workers_of(p) for p in points)
        base = min((p for p in points if _workers_of(p) == fewest),
                   key=lambda p: REP.median_of(p, _compute_s) or float("inf"))
        base_wait = REP.median_of(base, _data_wait) or 0.0
        worst, worst_iv = None, None
        for p in points:
            if _workers_of(p) <= fewest or (REP.median_of(p, _data_wait) or 0.0) >= base_wait:
                continue
            iv = REP.interval(base, p, _compute_s)
            if iv is not None and iv.above(th.compute_growth) and (
                    worst_iv is None or iv.estimate > worst_iv.estimate):
                worst, worst_iv = p, iv
        if worst is not None and worst_iv is not None:
            out.append({"label": label, "base": base, "worst": worst,
                        "growth": worst_iv.estimate, "interval": worst_iv, "group": recs})
    return out


def _data_wait(r: RunResult) -> float | None:
    return r.metrics.data_wait_fraction


def loader_contention(runs: list[RunResult], th: Thresholds) -> list[Finding]:
    """Runs that differ only in loader workers: did more workers cut the data wait but slow
    compute (workers and compute threads sharing the cores)?"""
    return [_contention_finding(c, th) for c in contention_cases(runs, th)]


def contention_evidence(c: ContentionCase) -> tuple[str, str, str]:
    """A contention case in words: (the data wait, compute and samples/s as medians over the
    repeats, the interval of compute per step)."""
    a, b = c["base"], c["worst"]
    med = REP.median_of
    sa, sb = med(a, REP.sps_of), med(b, REP.sps_of)
    wait = (f"data wait {fmt.pct(med(a, _data_wait))} -> {fmt.pct(med(b, _data_wait))} "
            "of each step")
    figures = (f"compute {fmt.duration(med(a, _compute_s))} -> "
               f"{fmt.duration(med(b, _compute_s))} per step; samples/s {fmt.rate(sa)} -> "
               f"{fmt.rate(sb)} ({fmt.signed_pct(M.growth(sb, sa))})")
    return wait, figures, (f"compute per step {c['interval'].text()} (more workers / fewer, "
                           "paired by repeat)")


def contention_keep(c: ContentionCase, th: Thresholds) -> WorkersPick | None:
    """The loader-worker recommendation for the case's group when it is decided (the fewest
    workers within ``th.workers_within`` of the best samples/s), else None: compute that grows
    with workers does not by itself say fewer workers are faster."""
    group = c["group"]
    if not any(r.point for r in group):
        return None
    pick = recommend_workers(group, th)
    return pick if pick.get("workers") is not None else None


def _contention_finding(c: ContentionCase, th: Thresholds) -> Finding:
    wait, figures, interval = contention_evidence(c)
    a, b = c["base"], c["worst"]
    ev = (f"workers {a.loader_workers} -> {b.loader_workers}: {wait}, but {figures}; "
          f"{interval}")
    _, demand = advice.cpu_demand(b)
    if demand and advice.cores(b):
        ev += f"; {demand} on {advice.cores(b)} cores"
    pick = contention_keep(c, th)
    keep = (f"keep {pick['workers']} worker(s) (the fewest within {th.workers_within:.0%} of the "
            "best samples/s); " if pick is not None else "")
    rec = (f"the data wait alone misleads here (loader workers took cores from compute): {keep}"
           "cap compute threads so threads + workers fit the cores, or make each sample cheaper "
           "(pre-resized images, a lighter transform) instead of adding workers")
    subject = c["label"] or f"{a.label} vs {b.label}"
    return Finding("loader workers compete with compute", ev, rec, "warning", subject)


def _scaling(records: list[Record], th: Thresholds) -> list[Finding]:
    out = []
    for row in scale_table(records, th):
        if row["status"] != "ok" or row["is_base"] or row["speedup"] is None:
            continue
        if row.get("unlike") and not row.get("implausible"):
            out.append(Finding("scaling not compared like for like", row["line"],
                               "run every process count with the same settings (scale holds "
                               "threads per rank equal unless --threads-per-rank or the spec "
                               "sets them)", "warning", row["experiment"]))
            continue
        if row.get("implausible"):
            out.append(Finding("implausible speedup", row["line"],
                               "measure again with more --repeats; a noisy baseline "
                               "is the usual cause", "warning", row["experiment"]))
            continue
        eiv = row.get("efficiency_interval")
        if eiv is None or not eiv.below(th.scale_efficiency):
            continue  # at or above the bar, or not shown to be below it
        main = max(row["lost"].items(), key=lambda kv: kv[1])[0] if row["lost"] else None
        rec = _scaling_advice(main, row)
        out.append(Finding("scaling loss", f"{row['line']} (the whole interval is below "
                           f"{fmt.pct(th.scale_efficiency)} efficiency)", rec, "warning",
                           row["experiment"]))
    return out


def _scaling_advice(main: str | None, row: ScaleRow) -> str:
    rec = row.get("record")  # the point itself, never a run found by its display name
    if rec is None or main is None:
        return "look at the step breakdown of each process count"
    if main == "communication":
        return advice.comm_bound(rec)
    if main == "data wait":
        return advice.input_bound(rec)
    _, demand = advice.cpu_demand(rec)
    cores = advice.cores(rec)
    where = f" ({demand} on {cores} cores)" if demand and cores else ""
    return (f"the processes slow each other's compute{where}: set threads per process = cores "
            "/ processes and give each its own cores, or add devices rather than processes")


INTERFERENCE = ("CPU saturated", "device contention", "interference without saturation")


def _job_reading(j: dict[str, Any]) -> str:
    """``a: 1.67x [1.50, 1.86], slower together``; a record written before repeats existed
    has no interval, and then the direction is not claimed."""
    iv = M.interval_of(j.get("slowdown_interval"))
    text = f"{j.get('name')}: {fmt.ratio(j.get('slowdown'))}"
    if iv is None:
        return f"{text} (no interval: recorded without repeats)"
    c = CK.slowdown_claim(str(j.get("name")), num(j.get("slowdown")), iv)
    return f"{text} {iv.bounds()} {c.short_verdict}"


def _colocate(rec: ColocateRecord, th: Thresholds = DEFAULT) -> Finding:
    jobs = [j for j in dicts(rec.jobs) if num(j.get("slowdown")) is not None]
    parts = [_job_reading(j) for j in jobs]
    alone = rec.total_samples_per_s_alone_sum
    together = rec.total_samples_per_s_together
    if alone and together:
        parts.append(f"total {fmt.rate(together)} samples/s together vs {fmt.rate(alone)} as the "
                     f"sum alone ({fmt.pct(together / alone)})")
    evidence = str(rec.evidence or "; ".join(parts) or "no job figures")
    if jobs and not any(dict_of(j.get("slowdown_interval")) for j in jobs):
        evidence += ("; recorded without repeats, so no interval supports this verdict (run "
                     "`scaleprobe colocate` again: it repeats by default)")
    placement = str(rec.placement or "shared")
    verdict = str(rec.verdict or "co-location")
    if verdict in INTERFERENCE:
        tip = ("pin each job to its own cores or device (placement \"pinned\") or run them one "
               "after the other" if placement == "shared" else
               "even pinned, the jobs compete (memory bandwidth, shared caches, the loader): "
               "run them one after the other when each one's time matters")
        severity = "warning"
    elif verdict == CL.INCONCLUSIVE:
        tip, severity = _colocate_to_decide(rec, jobs, th), "info"
    elif verdict == "no interference":
        tip, severity = "sharing costs little here; co-locating these jobs is fine", "info"
    else:
        tip, severity = "see the jobs' run records for why a figure is missing", "warning"
    return Finding(f"co-location ({placement}): {verdict}", evidence, tip, severity,
                   rec.exp_id or "")


def _colocate_to_decide(rec: ColocateRecord, jobs: list[dict[str, Any]],
                        th: Thresholds = DEFAULT) -> str:
    """What would decide an inconclusive co-location. One repeat decides nothing, whatever
    the slowdowns (core/claim.py: never "within noise"): it says so, with the largest one.
    Otherwise the intervals straddle the bar (``colocate_slowdown``). Either way, the repeats
    at which, the slowdowns and their spread staying as measured, some job's interval would
    lie above the bar or every job's below it (``metrics.projected``)."""
    bar = th.colocate_slowdown
    ivs = [iv for j in jobs if (iv := M.interval_of(j.get("slowdown_interval"))) is not None]
    n = min((iv.n for iv in ivs), default=int(rec.repeats or 1))
    need = next((k for k in range(max(M.MIN_REPEATS_TO_DECIDE, n + 1),
                                  M.MAX_REPEATS_SUGGESTED + 1)
                 if ivs and (any(M.projected(iv, k).above(bar) for iv in ivs)
                             or all(M.projected(iv, k).below(bar) for iv in ivs))), None)
    one = n < M.MIN_REPEATS_TO_DECIDE
    if need:
        rerun = f"about {need} repeats would decide it: run again with --repeats {need}"
    elif one or not ivs:  # no spread between runs measured: nothing to project from
        rerun = "run again with --repeats 3 or more to measure the spread between runs"
    else:
        rerun = (f"more than {M.MAX_REPEATS_SUGGESTED} repeats would be needed at this "
                 "spread: narrow it first (a quieter machine, longer timed windows)")
    rerun += " before acting"
    if one:
        worst = max(jobs, key=lambda j: num(j.get("slowdown")) or 0.0, default=None)
        largest = (f" (the largest: {worst.get('name')} {fmt.ratio(worst.get('slowdown'))})"
                   if worst is not None else "")
        return (f"{CL.one_repeat_text(n)}: one repeat cannot see the drift between runs, so it "
                f"decides nothing, whatever the slowdowns{largest}; " + rerun)
    return (f"at {n} repeats the slowdown intervals straddle {bar:.2f}x (no interference "
            "below it, interference above): " + rerun)


def _parity(rec: ParityRecord) -> Finding:
    a1, an, diff = rec.accuracy_1, rec.accuracy_n, rec.difference
    n = rec.nproc
    subject = rec.exp_id or ""
    verdict = rec.verdict
    if verdict is None:  # written before repeats: one seed and a fixed tolerance
        ev = (f"accuracy {fmt.num(a1, '.3f')} on 1 process vs {fmt.num(an, '.3f')} on {n} "
              f"({fmt.num(diff, '+.3f')}), from one seed with a fixed tolerance: no interval, "
              "and the seed-to-seed spread can exceed the difference")
        return Finding(f"accuracy parity {CL.INCONCLUSIVE}", ev, "run --parity again: it "
                       "repeats over seeds and judges the difference's interval against "
                       "--parity-tolerance (the user's margin)", "info", subject)
    ev = str(rec.verdict_text or verdict)
    if verdict == CL.PARITY_BROKEN:
        gb = rec.global_batch
        per = (f" (per-device batch {int(gb) // int(n)} on {n} processes vs {int(gb)} on 1)"
               if gb and isinstance(n, int) and n > 0 else "")
        # the global batch, seeds and samples seen were the same on both sides, so a learning
        # rate scaled with the batch (--lr-scaling linear) would change nothing here
        tip = (f"the global batch, seeds and samples seen were equal, so the learning rate is "
               f"not the cause: check batch-norm statistics over the smaller per-device "
               f"batch{per} (SyncBatchNorm, or a model without batch-norm) and the shard audit "
               "of the N-process runs")
        return Finding("accuracy differs", ev, tip, "warning", subject)
    if verdict == CL.INCONCLUSIVE:
        return Finding(f"accuracy parity {CL.INCONCLUSIVE}", ev, "run more --repeats before acting "
                       "on the difference (the evidence says about how many)", "info", subject)
    if verdict == "not measured":
        return Finding("accuracy parity not measured", ev, "see the runs' records for why",
                       "warning", subject)
    return Finding("accuracy holds", ev, "nothing to change", "info", subject)
