"""The verdicts of "What this says" on the experiments that compare runs: scaling at the
largest process count, co-location's slowdown and accuracy parity."""

from __future__ import annotations

import dataclasses
import math

from scaleprobe.core import claim as CL
from scaleprobe.core import claim_kinds as CK
from scaleprobe.core import fmt
from scaleprobe.core import metrics as M
from scaleprobe.core.experiment_records import ColocateRecord, ParityRecord, pair_seeds
from scaleprobe.core.record import Record
from scaleprobe.core.result_model import RunResult, dict_of, dicts, num
from scaleprobe.core.thresholds import Thresholds
from scaleprobe.report.findings import rerun as RC
from scaleprobe.report.findings.verdict import DECIDED, ERROR, UNDECIDED, Verdict, to_decide
from scaleprobe.report.reading import machine_load as L
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
    reading = CK.slowdown_claim(str(worst.get("name")), worst["slowdown"], iv).short_verdict
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


def parity_means(rec: ParityRecord) -> tuple[float | None, float | None, list[int],
                                             list[tuple[int, str]]]:
    """(mean accuracy on 1 process, on N, the paired repeats, [(repeat, why)] for the
    others): the means over the repeats the difference pairs (an accuracy on both sides
    after the same samples; experiments/parity.py ``paired_repeats``), so the two shown
    beside the difference give it. Worked out from the per-seed accuracies, so a record
    written when the means took every seed with a value on its own side reads the same; one
    without them (written before repeats) keeps its own means, every repeat paired."""
    a1, an = rec.accuracies_1, rec.accuracies_n
    if not a1 or not an or len(a1) != len(an):
        return rec.accuracy_1, rec.accuracy_n, list(range(int(rec.repeats or 1))), []
    samples = [x if isinstance(x, list) else None for x in rec.samples_seen_repeats or []]
    paired, left = pair_seeds([num(x) for x in a1], [num(y) for y in an], samples,
                              f"{rec.nproc or 'N'} processes")
    mean_1 = sum(float(a1[i] or 0.0) for i in paired) / len(paired) if paired else None
    mean_n = sum(float(an[i] or 0.0) for i in paired) / len(paired) if paired else None
    return mean_1, mean_n, paired, left


def _seed(rec: ParityRecord, i: int) -> str:
    """Repeat ``i``'s seed, or ``#2`` (the repeat, counted from 1) where none is recorded."""
    seeds = rec.seeds or []
    return str(seeds[i]) if i < len(seeds) and seeds[i] is not None else f"#{i + 1}"


def parity_pairs_text(rec: ParityRecord) -> str:
    """``means over the 2 paired seeds (0, 2); seed 1 left out: no accuracy on 2
    processes``: which seeds the means and the difference stand on."""
    _, _, paired, left = parity_means(rec)
    k = len(paired)
    text = (f"means over the {k} paired seed{'s' if k != 1 else ''} "
            f"({', '.join(_seed(rec, i) for i in paired) or 'none'})")
    return "; ".join([text, *(f"seed {_seed(rec, i)} left out: {why}" for i, why in left)])


def parity_sources(rec: ParityRecord, runs: dict[str, RunResult] | None) -> tuple[CL.Source, ...]:
    """The paired seeds' runs on both sides (``rec.runs``: 1 process, N processes, repeat by
    repeat) as the claim's sources, each with its load; none where the runs are not read."""
    ids = rec.runs or []
    _, _, paired, _ = parity_means(rec)
    found = [runs[str(rid)] for i in paired for rid in ids[2 * i:2 * i + 2]
             if runs and rid is not None and str(rid) in runs]
    return L.sources(found)


def parity_claim(rec: ParityRecord, runs: dict[str, RunResult] | None = None) -> CL.Claim:
    """The record's difference as the claim (core/claim.py ``parity``) over its paired
    seeds: their count is the claim's repeats, their runs its sources."""
    diff, tol = rec.difference, rec.tolerance
    _, _, paired, _ = parity_means(rec)
    n = len(paired)
    ivd = dict_of(rec.difference_interval)
    lo, hi = num(ivd.get("lo")), num(ivd.get("hi"))
    iv = (M.Interval(diff, lo, hi, n, "paired t")
          if lo is not None and hi is not None and diff is not None and tol is not None
          else None)
    c = CK.parity(diff, iv, n if iv is not None or diff is None else 1, tol or 0.01)
    return dataclasses.replace(c, sources=parity_sources(rec, runs))


def parity_verdict(rec: ParityRecord, runs: dict[str, RunResult] | None = None) -> Verdict:
    """The parity record's verdict, in the claim's words (core/claim.py); ``runs``: run
    records by id, to print the command that measures it again with its options and to judge
    the load of the runs behind it. The mean accuracies beside the difference are over the
    same paired seeds (``parity_means``)."""
    eid = rec.exp_id or "parity"
    diff, tol = rec.difference, rec.tolerance
    a1, an, paired, _ = parity_means(rec)
    number = (f"accuracy {fmt.num(a1, '.3f')} on 1 process vs "
              f"{fmt.num(an, '.3f')} on {rec.nproc or 'N'}, {parity_pairs_text(rec)}")
    c = parity_claim(rec, runs)
    if c.under_load:  # the caveat travels with the figures
        number += "; " + CL.load_caveat(c.sources)
    n = len(paired)
    iv = c.interval
    if iv is None or diff is None or tol is None:
        return Verdict(f"Accuracy parity ({eid}): {c.short_verdict}", number,
                       "one seed, no interval", RC.parity_command(rec, runs or {}, 3),
                       UNDECIDED)
    interval = f"{c.figure()}; tolerance +/-{tol:.3f}"
    head = f"Accuracy parity ({eid}): {c.short_verdict}"
    if not c.decided:
        need = parity_repeats(diff, iv.lo, iv.hi, tol, max(n, 1))
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
