"""The verdicts of "What this says" on a run's own settings: the batch size and the loader
workers a sweep recommends, and loader workers that take cores from compute."""

from __future__ import annotations

import math
from typing import Any

from scaleprobe.core import claim as CL
from scaleprobe.core import fmt
from scaleprobe.core import metrics as M
from scaleprobe.core.record import Record
from scaleprobe.core.result_model import RunResult
from scaleprobe.core.thresholds import Thresholds
from scaleprobe.report.findings import rerun as RC
from scaleprobe.report.findings.across_runs import (
    contention_cases,
    contention_evidence,
    contention_keep,
)
from scaleprobe.report.findings.verdict import (
    CONTENTION,
    DECIDED,
    ERROR,
    UNDECIDED,
    Verdict,
    to_decide,
)
from scaleprobe.report.reading import records as R
from scaleprobe.report.reading import repeats as P
from scaleprobe.report.tables import batch as B
from scaleprobe.report.tables import batch_rule as BR
from scaleprobe.report.tables import workers as W
from scaleprobe.report.tables.rows import LoaderRow, WorkersPick


def batch_verdicts(eid: str, recs: list[Record]) -> list[Verdict]:
    """The fastest batch size, told apart from every other of its group or not; then the
    largest batch size worth its memory (``worth_verdict``)."""
    rec = BR.recommend_batch(recs)
    if rec["fastest"] is None:
        return [Verdict(f"Batch size ({eid}): no batch size finished", "0 points finished",
                        "-", "see Findings: why each point failed", ERROR)]
    worth = worth_verdict(eid, recs, rec)
    return _fastest_verdicts(eid, recs, rec) + ([worth] if worth is not None else [])


def worth_verdict(eid: str, recs: list[Record], rec: Any) -> Verdict | None:
    """The largest batch size worth its memory, in the fastest's group: from its smallest
    batch size up, each step that paid (epoch time fell faster than memory grew, the batch
    rule) moves it up; the first that did not pay stops it there (decided); a step the
    intervals cannot decide leaves it inconclusive, with the repeats that would. None with
    fewer than two batch sizes finished."""
    group = rec["fastest"]["group"]
    steps = [s for s in rec["steps"] if s["group"] == group]
    if not steps:
        return None
    rows = {r["batch_size"]: r for r in B.batch_table(recs)
            if r["group"] == group and r["status"] == "ok"}
    def figures(s: Any) -> tuple[str, str, Any, Any]:
        """The step's number and interval cells, and its two intervals."""
        iv, miv = M.interval_of(s["epoch_interval"]), M.interval_of(s["mem_interval"])
        exact = rows[s["to"]]["memory_kind"] == "tensor" if s["to"] in rows else False
        number = (f"{s['from']} -> {s['to']}: epoch time {fmt.growth(s['epoch_growth'])}, "
                  f"memory {s['mem_growth_text']}")
        why = (f"epoch-time ratio {iv.text() if iv else 'no spread'}; "
               f"{BR.bar_text(s['mem_growth'], miv, exact)}"
               if s["mem_growth"] is not None else "no memory figure")
        return number, why, iv, miv

    worth = steps[0]["from"]
    for s in steps:
        if s["pays"] is True:
            worth = s["to"]
            continue
        number, why, iv, miv = figures(s)
        if s["pays"] is False:
            use = RC.run_command(rows[worth]["record"], {"batch_size": worth}) \
                if worth in rows else "see Sweeps"
            return Verdict(f"Batch {worth} is the largest worth its memory ({eid}): "
                           f"{s['from']} -> {s['to']} {CL.DOES_NOT_PAY}", number, why,
                           f"where memory is the limit, use it: {use}", DECIDED)
        need = BR.step_repeats_to_decide(iv, s["mem_growth"], miv) if iv else None
        return Verdict(f"Batch size worth its memory ({eid}): {CL.INCONCLUSIVE} at "
                       f"{s['from']} -> {s['to']}", number, why,
                       to_decide(need, iv, _sweep_again(eid, recs), recs), UNDECIDED)
    number, why, _, _ = figures(steps[-1])  # the last step up, paid as every one before it
    return Verdict(f"Every step up paid ({eid}): batch {worth}, the largest measured, is worth "
                   "its memory", number, why,
                   "a larger batch may pay too: add larger batch sizes to the sweep", DECIDED)


def _sweep_again(eid: str, recs: list[Record]) -> Any:
    """The command that runs sweep ``eid`` again with ``n`` repeats."""
    folder, spec = RC.folder_of(recs), RC.spec_of(recs)
    return lambda n: RC.rerun("sweep", eid, folder, n, spec)


def _fastest_verdicts(eid: str, recs: list[Record], rec: Any) -> list[Verdict]:
    fast = rec["fastest"]
    folder = RC.folder_of(recs)
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
                    to_decide(need, iv,
                              lambda n: RC.rerun("sweep", eid, folder, n, RC.spec_of(recs)), recs),
                    UNDECIDED)]


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
                act = to_decide(need, iv, again, recs, th)
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
