"""Scaling analysis of ``scale`` experiments: speedup and efficiency against the 1-process
run, and what the gap was lost to. Usable outside the report (the scale command prints it).

Speedup is measured, never extrapolated: ``samples/s at N / samples/s at 1`` over the paired
repeats (``metrics.ratio_interval``), with its 95% interval; efficiency is ``speedup / N``. A
speedup above N x 1.1 is marked implausible and never feeds a verdict. The gap (100% - the
efficiency) is attributed from the step-time breakdowns of the two points' median repeats, as
shares of the N-process step:

    communication  exposed communication at N (comm phase)
    data wait      data wait at N minus the data wait expected from the 1-process run
    slower compute h2d + forward + backward + optimizer at N minus the expected compute

"Expected" scales the 1-process figure by the per-device batch ratio, so strong scaling (a
fixed global batch split over more devices) is attributed correctly too. Shares below
``Thresholds.minor_fraction`` are not listed; what the listed shares leave of the gap shown in
the row is named ``other/unexplained`` (``lost_parts``), so the parts add up to the gap: the
minor shares, phases that got faster, time outside the breakdown's phases, and the difference
between the median repeats' breakdowns and the paired efficiency over every repeat. Negative
where the listed shares exceed the gap.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scaleprobe.core import fmt
from scaleprobe.core import metrics as M
from scaleprobe.core.claim import Claim, Source, load_caveat
from scaleprobe.core.record import Record
from scaleprobe.core.result_model import MEASURED, RunResult, num
from scaleprobe.core.results import RESULTS_FILE
from scaleprobe.core.thresholds import DEFAULT, Thresholds
from scaleprobe.report.reading import machine_load as L
from scaleprobe.report.reading import pairing as PR
from scaleprobe.report.reading import records as R
from scaleprobe.report.reading import repeats as P
from scaleprobe.report.tables.rows import ScaleRow
from scaleprobe.report.tables.time_to_target import target_fields

# "Speedup" is the ratio of the Samples/s column to the baseline row's, so a reader who
# divides the columns gets it; the paired speedup over the repeats (the one verdicts use) is
# its own column with its own name (bug caught: "1.08x (paired)" beside 111 / 98.1 = 1.13x)
SCALE_HEADERS = ("Processes", "Threads/rank", "Samples/s", "Speedup", "Paired speedup",
                 "Paired efficiency", "Step median", "Comm", "Data wait", "Lost to")
# what a scale experiment varies: every other configuration key must match its baseline's
# (a 1-process baseline may run without a distributed wrapper: single against ddp)
VARIED = frozenset({"dist.nproc", "dist.nnodes", "name", "dist.node_rank", "dist.strategy"})
# what the listed "lost to" shares leave of the row's efficiency gap (``lost_parts``)
UNEXPLAINED = "other/unexplained"
LOADED = "under load"  # beside a table figure whose run was measured under load


def nproc(rec: RunResult) -> int | None:
    """The point's processes in all: per node times nodes (``scale --nnodes 1,2``)."""
    n = num(rec.point.get("nproc"))
    if n is not None:
        return int(n) * nodes(rec)
    return rec.world_size


def nodes(rec: RunResult) -> int:
    k = rec.point.get("nnodes")
    return int(k) if isinstance(k, (int, float)) and k >= 1 else 1


def _placement(row: ScaleRow) -> str:
    """``2 nodes x 2`` for a point over several nodes, else empty."""
    k = row.get("nodes") or 1
    return f"{k} nodes x {(row['nproc'] or 0) // k}" if k > 1 else ""


def lost_to(rec: RunResult, base: RunResult | None,
            th: Thresholds = DEFAULT) -> dict[str, float]:
    """Shares of the N-process step lost to communication, extra data wait, slower compute."""
    bd = rec.metrics.breakdown_s
    total = bd.measured_total_s()
    if not total:
        return {}
    out: dict[str, float] = {}
    if bd.comm:
        out["communication"] = bd.comm / total
    if base is not None and base.metrics.breakdown_s.measured_total_s():
        ratio = _batch_ratio(rec, base)
        bb = base.metrics.breakdown_s
        for label, now, then in (("data wait", bd.data, bb.data),
                                 ("slower compute", bd.compute_s(), bb.compute_s())):
            if now is not None and then is not None and now > then * ratio:
                out[label] = (now - then * ratio) / total
    elif bd.data:
        out["data wait"] = bd.data / total
    return {k: v for k, v in out.items() if v >= th.minor_fraction}


def _batch_ratio(rec: RunResult, base: RunResult) -> float:
    a, b = rec.batch_size, base.batch_size
    return a / b if a and b else 1.0


def scale_table(records: list[Record], th: Thresholds = DEFAULT) -> list[ScaleRow]:
    """One row per process count of each scale experiment (the point's median repeat), with
    speedup and efficiency against that experiment's baseline, each with its interval over the
    paired repeats, and a ``line`` such as ``2 processes: 1.62x [1.41, 1.86], 3 repeats
    (efficiency 81%); lost to: ...``. The baseline is the 1-process point, or, in an
    experiment without one (``--nproc 2 --nnodes 1,2``), its smallest measured point: N
    processes against B are ideally N / B times as fast, and efficiency is the speedup over
    N / B (``base_nproc``; ``is_base`` on the baseline's own row).

    A speedup above N / B x 1.1 is ``implausible``: the row says so with the baseline's
    spread, and ``verdict_ok`` is False so that no verdict is drawn from it."""
    rows: list[ScaleRow] = []
    for eid, recs in R.by_experiment(records, "scale").items():
        recs = sorted(P.group_repeats(recs), key=lambda r: (nproc(r) or 0, nodes(r)))
        base = next((r for r in recs if r.status in MEASURED and nproc(r)), None)
        for r in recs:
            rows.append(_row(eid, r, base, th))
    return rows


def experiment_rows(folder: Path, sid: str) -> list[ScaleRow]:
    """The scale table of experiment ``sid`` from the records in ``folder``: what a scale
    experiment reads to measure an implausible point again (``experiments.scale``)."""
    runs: list[Record] = list(R.runs(R.load_records(folder / RESULTS_FILE)))
    return [r for r in scale_table(runs) if r["experiment"] == sid]


def _row(eid: str, r: RunResult, base: RunResult | None,
         th: Thresholds) -> ScaleRow:
    n, sps = nproc(r), r.metrics.samples_per_s
    ok = r.status in MEASURED
    b = nproc(base) if base is not None else None
    ideal = M.ideal_speedup(n, b)
    is_base = r is base
    iv = P.interval(base, r, P.sps_of) if ok and base is not None and not is_base \
        else None
    speedup = iv.estimate if iv is not None else (
        M.speedup(sps, base.metrics.samples_per_s) if ok and base is not None else None)
    eff_iv = iv.scaled(1.0 / ideal) if iv is not None and ideal else None
    eff = M.efficiency(speedup, ideal)
    # above ideal there is no gap to attribute (a share "lost" on a 332%-efficient row is noise)
    lost = (lost_to(r, base, th) if n and n > 1 and ok and not is_base
            and (eff is None or eff <= 1.0) else {})
    unlike = unlike_settings(r, base) if ok and base is not None and not is_base else []
    implausible = None
    if not M.plausible_speedup(speedup, ideal):
        what = "1-process baseline" if b == 1 else f"baseline ({b} processes)"
        implausible = (f"above {_ideal_text(n, b)} x {M.PLAUSIBLE_SPEEDUP_FACTOR:.1f}: "
                       + (f"not like for like ({'; '.join(unlike)})" if unlike else
                          f"a measuring error, most likely in the {what} (its spread: "
                          f"{_spread(base)})"))
    row: ScaleRow = {"experiment": eid, "run": r.label, "record": r, "nproc": n, "nodes": nodes(r),
           "base_nproc": b, "is_base": is_base, "threads": _threads(r), "unlike": unlike,
           "status": r.status, "error": r.error, "samples_per_s": sps,
           "speedup": speedup, "efficiency": eff,
           "column_speedup": (M.speedup(sps, base.metrics.samples_per_s)
                              if ok and base is not None else None),
           "speedup_interval": iv, "efficiency_interval": eff_iv,
           "repeats": len(P.repeats_of(r)), "implausible": implausible,
           "verdict_ok": implausible is None and iv is not None and not unlike,
           "step_median_s": r.step_median_s,
           "comm_fraction": r.metrics.comm_fraction,
           "data_wait_fraction": r.metrics.data_wait_fraction, "lost": lost}
    if ok and base is not None and not is_base:
        row["claim"] = speedup_claim(row, base, th)
    tf = target_fields(r, base, ok)
    if tf is not None:
        row = {**row, **tf}
    row["line"] = scale_line(row, th)
    return row


def speedup_claim(row: ScaleRow, base: RunResult, th: Thresholds = DEFAULT) -> Claim:
    """The row's speedup as a claim (core/claim.py): its interval over the paired repeats,
    the runs of both points with their load, and in its detail the efficiency and what the
    gap was lost to, so the load caveat and the rule's words travel with all three."""
    b = row.get("base_nproc") or 1
    against = f"{b} process{'es' if b != 1 else ''}"
    iv, eiv = row.get("speedup_interval"), row.get("efficiency_interval")
    detail = []
    if eiv is not None and not eiv.too_wide(None):
        detail.append(f"efficiency {fmt.pct(eiv.estimate)} {eiv.bounds(fmt.pct, None)}")
    elif row["efficiency"] is not None and iv is None:
        detail.append(f"efficiency {fmt.pct(row['efficiency'])}")
    lost = lost_text(row)
    if lost:
        detail.append("lost to: " + lost)
    subject = _head(row) + (f" against {b}" if b != 1 else "")
    return paired_claim(subject, row["speedup"], iv, base, row["record"], against,
                        "; ".join(detail), th)


def paired_claim(subject: str, value: float | None, iv: M.Interval | None, base: RunResult,
                 r: RunResult, against: str = "1 process", detail: str = "",
                 th: Thresholds = DEFAULT) -> Claim:
    """A speedup of point ``r`` over point ``base`` as a claim: ``value`` with its interval
    over the paired repeats, the runs of both points with their load (what scale.md's rows
    and sweep.md's paired speedup column both render)."""
    return Claim(subject, value, iv, above=f"faster than {against}",
                 below=f"slower than {against}", sources=L.sources([base, r], th),
                 pairing="paired by repeat index", detail=detail, kind="speedup",
                 repeats=_sides(base, r, iv))


def _sides(base: RunResult, r: RunResult, iv: M.Interval | None) -> tuple[int, ...]:
    """Repeats per side behind a paired interval: the pairs it was built from."""
    return (iv.n, iv.n) if iv is not None else (len(P.repeats_of(base)), len(P.repeats_of(r)))


def _threads(r: RunResult) -> int | None:
    """The compute threads a training rank of the run used (env.threads)."""
    t = r.env_number("threads")
    return int(t) if t else None


def unlike_settings(r: RunResult, base: RunResult) -> list[str]:
    """What differs between a point and its baseline besides the process count: the
    configuration keys (report/reading/pairing.py) and the threads each rank ran."""
    out = [f"{k}: {_val(k, base)} -> {_val(k, r)}"
           for k in sorted(PR.differing_keys(base, r) - VARIED)]
    ta, tb = _threads(base), _threads(r)
    if ta and tb and ta != tb:
        out.append(f"threads per rank: {ta} -> {tb}")
    return out


def _val(key: str, r: RunResult) -> Any:
    return PR.resolved_config(r).get(key, "(absent)")


def _ideal_text(n: int | None, b: int | None) -> str:
    return f"{n}" if b == 1 else f"{n}/{b}"


def _spread(base: RunResult | None) -> str:
    """The baseline's spread: between its repeats, and within its runs."""
    if base is None:
        return "no baseline"
    vals = P.values(base, P.sps_of)
    parts = []
    if len(vals) >= 2:
        parts.append(f"repeats {fmt.rate(min(vals))}-{fmt.rate(max(vals))} samples/s")
    rci = [c for c in (P.rel_ci(x) for x in P.repeats_of(base)) if c is not None]
    if rci:
        parts.append(f"median step +/-{fmt.pct(max(rci), 1)} within a run")
    return ", ".join(parts) or "unknown"


def _head(row: ScaleRow) -> str:
    n = row["nproc"]
    head = f"{n} process{'es' if n != 1 else ''}"
    if row.get("nodes", 1) > 1:
        head += f" on {row['nodes']} nodes"
    if row.get("threads"):
        head += f" x {row['threads']} thread{'s' if row['threads'] != 1 else ''}"
    return head


def scale_line(row: ScaleRow, th: Thresholds = DEFAULT) -> str:
    """The row in words. Wherever a run behind its figures was measured under load the line
    ends with the load caveat naming those runs (core/claim.py's words): the speedup claim's,
    and the baseline's, implausible and not-like-for-like lines', which no claim renders."""
    head = _head(row)
    n = row["nproc"]
    if row["status"] not in MEASURED:
        return f"{head}: {row['record'].status_text}"
    if row["speedup"] is None:
        return f"{head}: {fmt.rate(row['samples_per_s'])} samples/s (no measured run to compare)"
    if row.get("is_base", n == 1):
        return (f"{head}: the baseline, {fmt.rate(row['samples_per_s'])} samples/s "
                f"({shown_repeat_text(row)})"
                + _caveat(L.sources([row["record"]], th)))
    b = row.get("base_nproc") or 1
    if b != 1:
        head += f" against {b}"
    claim = row.get("claim")
    caveat = _caveat(claim.sources) if claim is not None else ""
    if row.get("implausible"):
        return (f"{head}: {row['speedup']:.2f}x is implausible ({row['implausible']}); "
                "left out of every verdict" + caveat)
    if row.get("unlike"):
        return (f"{head}: {row['speedup']:.2f}x, not like for like with the baseline "
                f"({'; '.join(row['unlike'])}); left out of every verdict" + caveat)
    if claim is None:
        return f"{head}: {row['speedup']:.2f}x ({fmt.pct(row['efficiency'])})"
    return claim.text()


def _caveat(sources: tuple[Source, ...]) -> str:
    """``; measured under load: ...`` where any of ``sources`` was, else empty."""
    text = load_caveat(sources)
    return f"; {text}" if text else ""


def under_load_note(rows: list[ScaleRow], th: Thresholds = DEFAULT) -> str | None:
    """``Measured under load (K of N points): nproc=1 (1.70 cores outside); ...`` over every
    repeat of the rows' points (a point that did not finish: its record), as sweep.md and
    the report list them; None when none was."""
    runs = [x for row in rows for x in (P.repeats_of(row["record"]) or [row["record"]])]
    return L.under_load_line(runs, th)


def _whole_pct(v: float) -> int:
    """A fraction as the whole percent ``fmt.pct`` shows: 0.256 -> 26."""
    return int(f"{v * 100:.0f}")


def _gap_attributed(row: ScaleRow) -> bool:
    """Whether the row has an efficiency gap that "lost to" splits: a measured point beyond
    its baseline, at or under 100% efficiency, with a step breakdown."""
    eff = row["efficiency"]
    rec = row["record"]
    return (row["status"] in MEASURED and not row.get("is_base") and eff is not None
            and eff <= 1.0 and (row["nproc"] or 0) > 1
            and bool(rec.metrics.breakdown_s.measured_total_s()))


def lost_parts(row: ScaleRow) -> list[tuple[str, int]]:
    """The row's "lost to" as shown, in whole percents of the N-process step: the shares of
    ``lost_to`` (largest first) and ``other/unexplained``, what they leave of the gap the row
    shows (100% - its efficiency, as rounded): the listed parts then add up to that gap
    exactly. The remainder holds the shares below ``minor_fraction``, phases that got
    faster, time outside the breakdown's phases, and the difference between the median
    repeats' breakdowns and the paired efficiency over every repeat; it is negative where
    the listed shares exceed the gap, and left out where it is 0."""
    parts = [(k, _whole_pct(v)) for k, v in sorted(row["lost"].items(), key=lambda kv: -kv[1])]
    eff = row["efficiency"]
    if eff is None or not _gap_attributed(row):
        return parts
    rest = (100 - _whole_pct(eff)) - sum(v for _, v in parts)
    return parts + ([(UNEXPLAINED, rest)] if rest else [])


def lost_text(row: ScaleRow) -> str:
    """``communication 12%, data wait 5%, other/unexplained 2%`` (``lost_parts``), or empty."""
    return ", ".join(f"{k} {v}%" for k, v in lost_parts(row))


def paired_cell(value: float | None, claim: Claim | None, implausible: bool = False,
                unlike: bool = False) -> str:
    """A paired speedup's table cell: the claim's (``1.13x [0.88, 1.44], not resolved, under
    load``), or an implausible or not-like-for-like estimate marked so, with "under load"
    where any run behind it was measured under load."""
    if claim is not None and not implausible and not unlike:
        return claim.cell()
    text = fmt.ratio(value) if value is not None else fmt.NA
    if implausible:
        text += " (implausible)"
    elif unlike:
        text += " (not like for like)"
    return text + (f", {LOADED}" if claim is not None and claim.under_load else "")


def _loaded(text: str, flag: bool | None) -> str:
    return f"{text}, {LOADED}" if flag else text


def shown_repeat_text(row: ScaleRow) -> str:
    """Which run a row's figures come from: the point's median repeat (for an even count the
    lower middle one by samples/s, a real run, not an average of two)."""
    k = row.get("repeats") or 0
    rep = row["record"].repeat if row.get("record") is not None else None
    if k <= 1:
        return "one repeat" if rep is None else f"{fmt.repeat_label(rep)}, the only one"
    which = fmt.repeat_label(rep) if rep is not None else "one repeat"
    return (f"{which}, the median of {k} by samples/s" if k % 2 else
            f"{which}, the lower middle of {k} by samples/s")


def scale_cells(row: ScaleRow, th: Thresholds = DEFAULT) -> list[str]:
    """The row's cells. A figure whose run was measured under load says so beside it: the
    Samples/s and Step median of the row's shown run, and the figures drawn from both
    points' runs (Speedup, Paired speedup, Paired efficiency, Lost to) where any of their
    runs was (the claim's sources)."""
    head = [fmt.num(row["nproc"], "d") + (f" ({_placement(row)})" if _placement(row) else ""),
            fmt.num(row.get("threads"), "d")]
    if row["status"] not in MEASURED:
        return head + [fmt.clipped(row["record"].status_text)] + ["-"] * 7
    claim = row.get("claim")
    both = claim is not None and claim.under_load  # a run of either point was loaded
    shown = L.run_load(row["record"], th)[0]  # the run this row's figures come from
    sp = paired_cell(row["speedup"], claim, bool(row.get("implausible")),
                     bool(row.get("unlike")))
    lost = lost_text(row) or "-"
    if lost != "-" and both:
        lost += f" ({LOADED})"
    cs = row.get("column_speedup")
    col = ("1.00x (baseline)" if row.get("is_base")
           else _loaded(fmt.ratio(cs), both) if cs is not None else "-")
    # the paired efficiency with its interval, as the paired speedup beside it: a bare 83%
    # stood beside a speedup "spread too large, not resolved"
    eiv = row.get("efficiency_interval")
    eff = fmt.pct(row["efficiency"]) + (f" {eiv.bounds(fmt.pct, None)}" if eiv is not None
                                        else "")
    return head + [_loaded(fmt.rate(row["samples_per_s"]), shown), col, sp,
                   _loaded(eff, both), _loaded(fmt.duration(row["step_median_s"]), shown),
                   fmt.pct(row["comm_fraction"]), fmt.pct(row["data_wait_fraction"]),
                   lost]
