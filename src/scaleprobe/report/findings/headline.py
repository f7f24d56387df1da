"""The report's opening section, "What this says": at most five verdicts, most important
first, each with its number, its interval and the command that would improve or decide it.

Where the verdicts come from (the details stay in the sections below):

    batch size        report/tables/batch_rule.py: the fastest batch size against every other of its
                      group, epoch-time ratios over the paired repeats
    loader workers    report/tables/workers.py: the fewest workers within reach of the best samples/s
    scaling           report/tables/scale.py: speedup and efficiency at the largest process count
    co-location       the colocate record's verdict and each job's slowdown interval
    accuracy parity   the parity record's verdict and the difference's interval
    loader contention more workers cut the data wait but slowed compute
    per-run findings  grouped by verdict and next step (report/findings/grouped.py)

Order: runs that failed; verdicts an experiment decided (warnings first); verdicts it could
not decide (each says how many repeats would); loader contention; per-run warnings, the one
about most runs first; then per-run notes. Runs measured under load are one caveat line, not
a verdict, because they weaken every verdict above.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scaleprobe.core import claim as CL
from scaleprobe.core import fmt
from scaleprobe.core import metrics as M
from scaleprobe.core.experiment_records import ColocateRecord, ParityRecord, SweepRecord
from scaleprobe.core.record import Record
from scaleprobe.core.result_model import BATCH_AXES, RunResult, dict_of, dicts, num
from scaleprobe.core.thresholds import DEFAULT, Thresholds
from scaleprobe.report.findings import rerun as RC
from scaleprobe.report.findings.across_runs import (
    contention_cases,
    contention_evidence,
    contention_keep,
)
from scaleprobe.report.findings.grouped import Group, counted
from scaleprobe.report.reading import records as R
from scaleprobe.report.reading import repeats as P
from scaleprobe.report.reading.machine_load import run_load
from scaleprobe.report.render.doc import Section, Table, Text
from scaleprobe.report.tables import batch as B
from scaleprobe.report.tables import batch_rule as BR
from scaleprobe.report.tables import scale as S
from scaleprobe.report.tables import workers as W
from scaleprobe.report.tables.rows import LoaderRow, WorkersPick

TITLE = "What this says"
ANCHOR = "what-this-says"
MOST = 5
HEADERS = ["", "Verdict", "Number", "Interval (95%)", "To decide or improve it"]
ERROR, DECIDED, UNDECIDED, CONTENTION, RUN_WARNING, NOTE = range(6)


@dataclass(frozen=True)
class Verdict:
    claim: str
    number: str
    interval: str
    command: str
    rank: int  # ERROR ... NOTE: lower comes first
    weight: float = 0.0  # within a rank, larger comes first (runs affected)
    warning: bool = False  # a decided verdict that calls for a change


def headline_section(records: list[Record], groups: list[Group],
                     th: Thresholds = DEFAULT) -> Section:
    """The section; ``groups``: the per-run findings, grouped."""
    found = collect(records, groups, th)
    s = Section(TITLE, anchor=ANCHOR, lead=True)
    if not found:
        s.add(Text("Nothing stands out: no run failed and no rule in docs/REPORTS.md fired. The "
                   "figures are in the sections below."))
        return s
    shown = found[:MOST]
    rows = [[str(i), v.claim, v.number, v.interval, v.command] for i, v in enumerate(shown, 1)]
    s.add(Table(HEADERS, rows, right=[True, False, False, False, False]))
    notes = [line for line in (_load_caveat(records, th), _more(found[MOST:])) if line]
    if notes:
        s.add(Text("\n".join(notes), note=True))
    return s


def collect(records: list[Record], groups: list[Group],
            th: Thresholds = DEFAULT) -> list[Verdict]:
    """Every verdict, most important first (the section shows the first ``MOST``)."""
    found: list[Verdict] = []
    for eid, runs in R.by_experiment(records, "sweep").items():
        recs: list[Record] = [*runs, *R.summaries(records, SweepRecord, eid)]
        axes = {k for r in runs for k in r.point}
        if axes & set(BATCH_AXES):
            found += batch_verdicts(eid, recs)
        if axes & set(R.LOADER_AXES):
            found += worker_verdicts(eid, recs, th)
    found += scale_verdicts(records, th)
    found += [colocate_verdict(r, th) for r in R.of_type(records, ColocateRecord)]
    by_id = {r.run_id: r for r in R.runs(records) if r.run_id}
    found += [parity_verdict(r, by_id) for r in R.of_type(records, ParityRecord)]
    found += contention_verdicts(R.runs(records), th)
    found += group_verdicts(groups)
    order = {id(v): i for i, v in enumerate(found)}
    return sorted(found, key=lambda v: (v.rank, not v.warning, -v.weight, order[id(v)]))


def _repeats_text(need: int | None, what: str = "") -> str:
    if need is None:
        return (f"more than {M.MAX_REPEATS_SUGGESTED} repeats would be needed{what}, or the "
                "difference is smaller than the noise")
    return f"about {need} repeats would decide it{what}"


def batch_verdicts(eid: str, recs: list[Record]) -> list[Verdict]:
    """The fastest batch size, told apart from every other of its group or not."""
    rec = BR.recommend_batch(recs)
    fast = rec["fastest"]
    folder = RC.folder_of(recs)
    if fast is None:
        return [Verdict(f"Batch size ({eid}): no batch size finished", "0 points finished",
                        "-", "see Findings: why each point failed", ERROR)]
    table = [r for r in B.batch_table(recs) if r["group"] == fast["group"]]
    others = [r for r in table if r["status"] == "ok" and r["batch_size"] != fast["batch_size"]]
    fig = B.EPOCH_BASES[fast["epoch_basis"]]
    ivs = [(o, P.interval(fast["record"], o["record"], fig)) for o in others]
    oom = [str(r["batch_size"]) for r in table if r["status"] == "oom"]
    number = (f"batch {fast['batch_size']}: epoch {B.epoch_text(fast)}, "
              f"{fmt.rate(fast['samples_per_s'])} samples/s"
              + (f"; batch {', '.join(oom)} ran out of memory" if oom else ""))
    if not others:
        # bug caught: an interrupted sweep with one batch size finished said "Batch 32 gives
        # the shortest epoch", a ranking of one
        reps = max((x.repeat or 0) + 1 for x in R.runs(recs)) if R.runs(recs) else 1
        return [Verdict(f"Batch size ({eid}): {CL.INCONCLUSIVE}, only batch "
                        f"{fast['batch_size']} finished", number,
                        "no other batch size of its group finished: nothing to compare",
                        "run the sweep again so the other batch sizes finish: "
                        f"{RC.rerun('sweep', eid, folder, reps, RC.spec_of(recs))}",
                        UNDECIDED)]
    tied = [(o, iv) for o, iv in ivs if iv is None or not iv.above(1.0)]
    if not tied:
        # the batch size it is least clearly ahead of: the interval whose lower bound is
        # lowest (every interval here is set: none is tied)
        nearest = min(((o, iv) for o, iv in ivs if iv is not None), key=lambda p: p[1].lo,
                      default=None)
        call = (f"the closest call, batch {nearest[0]['batch_size']}: {nearest[1].text()} "
                f"(its epoch time / batch {fast['batch_size']}'s)" if nearest is not None
                else "-")
        use = RC.run_command(fast["record"], {"batch_size": fast["batch_size"]})
        return [Verdict(f"Batch {fast['batch_size']} gives the shortest epoch ({eid})", number,
                        call, f"use it: {use}", DECIDED)]
    needs = [(o, iv, M.repeats_to_decide(iv, 1.0) if iv is not None else None) for o, iv in tied]
    o, iv, need = max(needs, key=lambda t: math.inf if t[2] is None else t[2])
    closest = (f"batch {o['batch_size']}: {iv.text()} (its epoch time / batch "
               f"{fast['batch_size']}'s)" if iv is not None else f"batch {o['batch_size']}: no spread")
    names = ", ".join(str(t[0]["batch_size"]) for t in tied)
    # one repeat decides nothing even where its interval is clear of 1: "not told apart"
    # would contradict the interval shown beside it
    one = all(t[1] is not None and not t[1].enough_repeats for t in tied)
    return [Verdict(f"Fastest batch size ({eid}): {CL.INCONCLUSIVE}, batch "
                    f"{fast['batch_size']} is {CL.tied_words(one)} batch {names}", number, closest,
                    _decide(need, iv, lambda n: RC.rerun("sweep", eid, folder, n, RC.spec_of(recs)),
                            recs),
                    UNDECIDED)]


def _decide(need: int | None, iv: M.Interval | None, command: Any,
            recs: Sequence[Record] = (), th: Thresholds = DEFAULT) -> str:
    """The command with the repeats that would decide; when no number of repeats would (the
    difference is below the noise): a quieter machine first where runs were measured under
    load, the two equal at this noise where every run was measured quiet, and neither claim
    where the load was not measured or there is no spread at all."""
    if need is not None:
        return f"about {need} repeats would decide it: {command(need)}"
    n = max(2 * (iv.n if iv is not None else 1), 3)
    if iv is None:
        return ("no spread to judge by (too few timed steps or repeats): measure again with "
                f"more, e.g. {command(n)}")
    if iv.within_run_bound:
        k = math.exp((iv.within_log_h or 0.0) / math.sqrt(max(iv.n, 1)))
        return ("the runs' own step times vary more than the difference (their spread alone "
                f"leaves the ratio uncertain by a factor of {k:.2f} either way: stalls or waits "
                "inside the runs, see Findings and each run's steps.csv), so "
                "neither more repeats nor a quieter machine is the first fix: remove the stalls, "
                f"or time more steps per run, then e.g. {command(n)}")
    flags = [run_load(r, th)[0] for r in R.runs(recs)]
    if any(f is True for f in flags):
        return ("the noise is larger than the difference and runs were measured under load: "
                f"measure on a quiet machine, e.g. {command(n)}")
    if flags and all(f is False for f in flags):
        return ("the difference is within this machine's run-to-run noise (no run measured "
                "under load): either will do; only longer runs or many more repeats could "
                f"separate them, e.g. {command(n)}")
    return ("the noise is larger than the difference (whether other programs used the machine "
            f"was not measured): measure on a quiet machine, e.g. {command(n)}")


def _worker_flags(r: WorkersPick) -> dict[str, Any]:
    if r["workers"] == 0:
        return {"loader": "naive", "workers": None}
    return {"loader": "pipelined", "workers": r["workers"], "prefetch": r.get("prefetch")}


def worker_verdicts(eid: str, recs: list[Record], th: Thresholds) -> list[Verdict]:
    """The loader-worker recommendation, one per group of the sweep's other axes and per
    transform, each naming its own."""
    rec = W.recommend_workers(recs, th)
    if rec.get("workers") is None and rec.get("decided") is not False and "by_group" not in rec:
        return [Verdict(f"Loader settings ({eid}): none finished", "0 settings finished", "-",
                        "see Findings: why each point failed", ERROR)]
    rows = W.loader_table(recs)
    out = []
    for key, r in (rec.get("by_group") or {"": rec}).items():
        where = f"{eid}, {key}" if key else eid  # the group and transform it is about
        caveat = f"; {r['load_caveat']}" if r.get("load_caveat") else ""
        if r.get("workers") is None:
            iv = M.interval_of(r.get("interval"))
            need = r.get("need")  # as the recommendation itself counted them
            why = (r["unexplained"] if r.get("unexplained") else
                   f"{r.get('compared') or 'fewer workers / the best'}: "
                   f"{iv.text(ref=r.get('ref', 1.0)) if iv else 'no spread'}")
            def again(n: int | None, eid: str = eid) -> str:
                return RC.rerun("sweep", eid, RC.folder_of(recs), n, RC.spec_of(recs))

            if r.get("alone"):  # finished runs are reused: only the missing ones run
                reps = max((x.repeat or 0) + 1 for x in R.runs(recs)) if R.runs(recs) else 1
                act = f"run the sweep again so the other settings finish: {again(reps)}"
            else:
                act = _decide(need, iv, again, recs, th)
            head = "only" if r.get("alone") else "best"
            out.append(Verdict(f"Loader workers ({where}): {CL.INCONCLUSIVE}",
                               f"{head}: {r['best_setting']}, "
                               f"{fmt.rate(r['best_samples_per_s'])} samples/s{caveat}", why,
                               act, UNDECIDED))
            continue
        pick = next((x for x in rows if x["group"] == r["group"] and x["setting"] == r["setting"]),
                    None)
        use = (f"use it: {RC.run_command(pick['record'], _worker_flags(r))}" if pick is not None
               else "see Sweeps")
        out.append(Verdict(f"Use {r['workers']} loader worker(s) ({where}): {r['setting']}",
                           f"{fmt.rate(r['samples_per_s'])} samples/s{caveat}",
                           _worker_margin(r, pick, rows), use, DECIDED))
    return out


def _worker_margin(r: WorkersPick, pick: LoaderRow | None,
                   rows: list[LoaderRow]) -> str:
    """The recommendation's interval, or (the best setting itself) how the next setting of
    its group compares with it."""
    shown = r.get("interval")
    if shown:
        return f"{M.Interval(**shown).text()} of the best ({r.get('best_setting')})"
    if pick is None:
        return "-"
    peers = [x for x in rows if x["group"] == pick["group"] and x is not pick
             and x["status"] == "ok" and x["transform"] == pick["transform"]]
    ivs = [(x, iv) for x, iv in ((x, P.interval(pick["record"], x["record"], P.sps_of))
                                 for x in peers) if iv is not None]
    if not ivs:
        return "no other setting to compare"
    x, iv = max(ivs, key=lambda p: p[1].estimate)
    return f"the next, {x['setting']}: {iv.text()} (its samples/s / this one's)"


def scale_verdicts(records: list[Record], th: Thresholds) -> list[Verdict]:
    """Each scale experiment at its largest process count that finished."""
    every = S.scale_table(records, th)
    rows = [r for r in every if r["status"] == "ok" and not r["is_base"]
            and r["speedup"] is not None]
    out = []
    for eid in dict.fromkeys(r["experiment"] for r in rows):
        row = max((r for r in rows if r["experiment"] == eid), key=lambda r: r["nproc"] or 0)
        n, folder = row["nproc"], row["record"].source
        runs = [r["record"] for r in every if r["experiment"] == eid]

        def again(k: int | None, runs: list[RunResult] = runs, folder: str = folder,
                  eid: str = eid) -> str:
            return RC.rerun("scale", eid, folder, k, runs=runs)

        against = f" against {row['base_nproc']}" if row["base_nproc"] != 1 else ""
        number = (f"{n} processes{against}: speedup {fmt.ratio(row['speedup'])}, efficiency "
                  f"{fmt.pct(row['efficiency'])}")
        sc = row.get("claim")
        if sc is not None and sc.under_load:  # the caveat travels with the figures
            number += "; " + CL.load_caveat(sc.sources)
        iv, eiv = row["speedup_interval"], row["efficiency_interval"]
        if row.get("unlike") and not row.get("implausible"):
            out.append(Verdict(f"Scaling ({eid}): not like for like", number,
                               "; ".join(row["unlike"]),
                               "run every count with the same settings", UNDECIDED))
            continue
        if row.get("implausible"):
            out.append(Verdict(f"Scaling ({eid}): the speedup is implausible", number,
                               iv.text() if iv else "no spread", again(5),
                               UNDECIDED))
            continue
        if eiv is None:
            out.append(Verdict(f"Scaling ({eid}): not judged", number, "no spread to judge by",
                               again(3), UNDECIDED))
            continue
        ivtext = (f"efficiency {eiv.bounds(fmt.pct, th.scale_efficiency)}"
                  + ("" if eiv.too_wide(th.scale_efficiency) else f", {eiv.repeats_text}"))
        bar = th.scale_efficiency
        if eiv.below(bar):
            lost = S._lost_text(row["lost"]) or "see Scaling"
            out.append(Verdict(f"{n} processes scale below {fmt.pct(bar)} efficiency ({eid}); "
                               f"lost to {lost}", number, ivtext,
                               "see Scaling and Findings for what to change", DECIDED,
                               warning=True))
        elif eiv.above(bar):
            out.append(Verdict(f"{n} processes scale above {fmt.pct(bar)} efficiency ({eid})",
                               number, ivtext, "nothing to change", DECIDED))
        else:  # in the claim's words: "not resolved" or "inconclusive (1 repeat)"
            need = M.repeats_to_decide(eiv, bar)
            word = CL.Claim("", eiv.estimate, eiv, ref=bar, unit="%").short_verdict
            out.append(Verdict(f"Scaling ({eid}): {word} against {fmt.pct(bar)} "
                               "efficiency", number, ivtext,
                               _decide(need, eiv, again, [row["record"]], th), UNDECIDED))
    return out


def colocate_verdict(rec: ColocateRecord, th: Thresholds) -> Verdict:
    eid = rec.exp_id or "co-location"
    jobs = [j for j in dicts(rec.jobs) if num(j.get("slowdown")) is not None]
    verdict = str(rec.verdict or "no verdict")
    claim = f"Co-location ({eid}, {rec.placement or 'shared'}): {verdict}"
    if not jobs:
        return Verdict(claim, "no job figures", "-", "see the jobs' run records", ERROR)
    worst = max(jobs, key=lambda j: j["slowdown"])
    ivd = dict_of(worst.get("slowdown_interval"))
    iv = M.Interval(**ivd) if {"estimate", "lo", "hi", "n", "method"} <= set(ivd) else None
    # the worst job's own reading, by the claim's rules: "slower together" only where its
    # interval says so ("inconclusive (1 repeat)", "not resolved" otherwise)
    reading = CL.slowdown_claim(str(worst.get("name")), worst["slowdown"], iv).short_verdict
    number = f"{worst.get('name')}: {fmt.ratio(worst['slowdown'])} ({reading})"
    caveats = [f"{j.get('name')}: {j['load_caveat']}" for j in jobs if j.get("load_caveat")]
    if caveats:  # a job measured alone under load: its slowdown may look smaller
        number += "; " + "; ".join(caveats)
    interval = iv.text() if iv else "no interval: recorded without repeats"
    if verdict == CL.INCONCLUSIVE or iv is None:
        need = M.repeats_to_decide(iv, th.colocate_slowdown) if iv else None
        return Verdict(claim, number, interval,
                       _decide(need, iv, lambda k: RC.rerun("colocate", eid, rec.source, k,
                                                          RC.spec_of([rec]))), UNDECIDED)
    warning = verdict not in ("no interference",)
    return Verdict(claim, number, interval, "see Co-location and Findings" if warning
                   else "nothing to change", DECIDED, warning=warning)


def parity_verdict(rec: ParityRecord, runs: dict[str, RunResult] | None = None) -> Verdict:
    """The parity record's verdict, in the claim's words (core/claim.py); ``runs``: run
    records by id, to print the command that measures it again with its options."""
    eid = rec.exp_id or "parity"
    diff, tol = rec.difference, rec.tolerance
    number = (f"accuracy {fmt.num(rec.accuracy_1, '.3f')} on 1 process vs "
              f"{fmt.num(rec.accuracy_n, '.3f')} on {rec.nproc or 'N'}")
    ivd = dict_of(rec.difference_interval)
    lo, hi = num(ivd.get("lo")), num(ivd.get("hi"))
    n = int(rec.repeats or 1)
    if lo is None or hi is None or diff is None or tol is None:
        c = CL.parity(diff, None, 1 if diff is not None else n, tol or 0.01)
        return Verdict(f"Accuracy parity ({eid}): {c.short_verdict}", number,
                       "one seed, no interval", RC.parity_command(rec, runs or {}, 3),
                       UNDECIDED)
    c = CL.parity(diff, M.Interval(diff, lo, hi, n, "paired t"), n, tol)
    interval = f"{c.figure()}; tolerance +/-{tol:.3f}"
    head = f"Accuracy parity ({eid}): {c.short_verdict}"
    if not c.decided:
        need = parity_repeats(diff, lo, hi, tol, n)
        return Verdict(head, number, interval,
                       (f"about {need} seeds a side would decide it: "
                        f"{RC.parity_command(rec, runs or {}, need)}" if need else
                        f"{_repeats_text(None)}: set the tolerance by what matters to you"),
                       UNDECIDED)
    broken = c.rule == CL.RULE_OUTSIDE_BAND
    return Verdict(head, number, interval,
                   "see Accuracy parity and Findings" if broken else "nothing to change",
                   DECIDED, warning=broken)


def parity_repeats(diff: float, lo: float, hi: float, tol: float, n: int) -> int | None:
    """Seeds that would shrink the difference's interval (half-width ~ 1/sqrt(seeds)) inside
    the tolerance or wholly outside it, the difference staying where it is."""
    half = (hi - lo) / 2
    room = abs(tol - abs(diff))
    if room == 0 or half == 0:
        return None
    need = math.ceil(n * (half / room) ** 2) + 1
    return need if need <= M.MAX_REPEATS_SUGGESTED else None


def contention_verdicts(runs: list[RunResult], th: Thresholds) -> list[Verdict]:
    out = []
    for c in contention_cases(runs, th):
        base, worst = c["base"], c["worst"]
        wa, wb = base.loader_workers, worst.loader_workers
        setting = fmt.describe_point({k: v for k, v in worst.point.items()
                                      if k not in ("workers", "loader", "prefetch")})
        where = ", ".join(x for x in (c["label"], setting) if x)
        wait, figures, interval = contention_evidence(c)
        pick = contention_keep(c, th)
        command = (f"keep {pick['workers']} worker(s): "
                   f"{RC.run_command(base, _worker_flags(pick))}, or make each sample cheaper"
                   if pick is not None else
                   "the worker count itself is undecided (see Loader workers): cap compute "
                   "threads so threads + workers fit the cores, or make each sample cheaper")
        out.append(Verdict(
            f"Loader workers take cores from compute ({where}): {wa} -> {wb} worker(s) cut "
            f"the {wait}", figures, interval, command, CONTENTION, weight=c["growth"]))
    return out


def group_verdicts(groups: list[Group]) -> list[Verdict]:
    """Per-run findings (grouped): failures, warnings by the number of runs, then notes.
    "Measured under load" is left to the caveat line."""
    out = []
    for g in groups:
        f = g.finding
        if f.verdict == "measured under load" or (f.verdict == "out of memory" and all(
                _batch_point(r) for r in g.recs)):
            continue  # the caveat line says the one; the batch-size verdict the other
        if f.severity == "error":
            rank = ERROR
        elif f.severity == "warning":
            rank = RUN_WARNING
        else:
            rank = NOTE
        n = len(g.recs)
        who = f"{n} runs" if n > 1 else (f.subject or "1 run")
        number = g.range_text() or (f.evidence if n == 1 else
                                    f"{n} runs: {counted(f.verdict) or 'its figure not measured'}")
        interval = ("-: per-run readings, no interval" if n > 1 else "-: one run, no interval")
        if f.severity == "error":
            interval = "-: a failure, not a measurement"
        out.append(Verdict(f"{f.verdict[:1].upper()}{f.verdict[1:]} ({who})", number, interval,
                           f.recommendation.split("; ")[0], rank, weight=n))
    return out


def _batch_point(rec: RunResult) -> bool:
    """A point of a sweep over batch size (running out of memory there finds the limit)."""
    return rec.exp_kind == "sweep" and bool(set(rec.point) & set(BATCH_AXES))


def _load_caveat(records: list[Record], th: Thresholds) -> str | None:
    runs = R.runs(records)
    loaded = [r for r in runs if run_load(r, th)[0]]
    if not loaded:
        return None
    return (f"Caveat: {len(loaded)} of {len(runs)} runs were measured under load (processes "
            "outside the run used the machine during its timed window); their figures may be "
            "slower than the machine allows and widen the intervals above. Measure again on a "
            "quiet machine; the runs are named under Findings.")


def _more(rest: list[Verdict]) -> str | None:
    if not rest:
        return None
    names = "; ".join(v.claim for v in rest[:4]) + ("; ..." if len(rest) > 4 else "")
    return f"{len(rest)} more below (Findings and the sections after it): {names}."
