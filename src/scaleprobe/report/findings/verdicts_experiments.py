"""The verdicts of "What this says" on the experiments that compare runs: scaling at the
largest process count, co-location's slowdown and accuracy parity."""

from __future__ import annotations

import math

from scaleprobe.core import claim as CL
from scaleprobe.core import fmt
from scaleprobe.core import metrics as M
from scaleprobe.core.experiment_records import ColocateRecord, ParityRecord
from scaleprobe.core.record import Record
from scaleprobe.core.result_model import RunResult, dict_of, dicts, num
from scaleprobe.core.thresholds import Thresholds
from scaleprobe.report.findings import rerun as RC
from scaleprobe.report.findings.verdict import DECIDED, ERROR, UNDECIDED, Verdict, to_decide
from scaleprobe.report.tables import scale as S


def _repeats_text(need: int | None, what: str = "") -> str:
    if need is None:
        return (f"more than {M.MAX_REPEATS_SUGGESTED} repeats would be needed{what}, or the "
                "difference is smaller than the noise")
    return f"about {need} repeats would decide it{what}"


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
            lost = S.lost_text(row) or "see Scaling"
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
                               to_decide(need, eiv, again, [row["record"]], th), UNDECIDED))
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
    if caveats:  # load alone makes a slowdown look smaller, together larger
        number += "; " + "; ".join(caveats)
    interval = iv.text() if iv else "no interval: recorded without repeats"
    if verdict == CL.INCONCLUSIVE or iv is None:
        need = M.repeats_to_decide(iv, th.colocate_slowdown) if iv else None
        return Verdict(claim, number, interval,
                       to_decide(need, iv, lambda k: RC.rerun("colocate", eid, rec.source, k,
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
