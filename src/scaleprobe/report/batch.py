"""Batch-size analysis of sweep runs, usable outside the report.

``batch_table(records)`` gives one row per batch size (grouped by the sweep's other axes)
with growth rates between consecutive points, in the style of the reference studies::

    | Batch size | Devices | Peak memory | Growth | Epoch time | Growth | Samples/s | TFLOP/s |
    | MFU | ...

``recommend_batch(records)`` applies the rule: a larger batch pays only while epoch time
falls faster than memory grows; it names the fastest batch size and the most efficient one
(samples/s per GiB of peak memory: device memory when measured, else host memory).
Loader settings: ``report/workers.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scaleprobe.core import fmt
from scaleprobe.core import metrics as M
from scaleprobe.core.results import Record, RunResult
from scaleprobe.core.thresholds import DEFAULT, Thresholds
from scaleprobe.measure.summary import projected_epoch_s
from scaleprobe.report import critical as C
from scaleprobe.report import records as R
from scaleprobe.report import repeats as P
from scaleprobe.report import target as T
from scaleprobe.report.batch_target import claim, target_picks
from scaleprobe.report.rows import BatchPicks, BatchRow, BatchStep
from scaleprobe.report.sweep_points import point_groups, sweep_runs

BATCH_HEADERS = ("Batch size", "Devices", "Peak memory", "Growth", "Epoch time", "Growth",
                 "Samples/s", "TFLOP/s", "MFU", "CPU util", "GPU util")


def host_memory(r: RunResult) -> float | None:
    """Host memory a batch size costs: the peak net of the process's resident memory before
    the model was built (torch itself is ~750 MiB that no batch size changes), else the total
    peak for records that predate the baseline."""
    pm = r.metrics.peak_mem_bytes
    return pm.host_net or pm.host


def device_memory(r: RunResult) -> float | None:
    return r.metrics.peak_mem_bytes.device_peak()


def _memory_figure(kind: str) -> Any:
    return device_memory if kind == "device" else host_memory


def _projected(r: RunResult) -> bool:
    return r.metrics.epoch_time_projected is True


def epoch_figure(r: RunResult) -> float | None:
    """Epoch time; where it is missing, seconds per sample (the same dataset either way, so
    their ratios between batch sizes agree)."""
    e = r.metrics.epoch_time_s
    if e is not None:
        return e
    sps = r.metrics.samples_per_s
    return 1.0 / sps if sps else None


def projected_epoch(r: RunResult) -> float | None:
    """Epoch time on the median step's basis: the record's own where it was projected, else
    its median step x steps per epoch (a measured epoch also holds the wait for each epoch's
    first batch, which the median step leaves out)."""
    if _projected(r):
        return r.metrics.epoch_time_s
    return projected_epoch_s(r.step_median_s, r.metrics.steps_per_epoch)


def seconds_per_sample(r: RunResult) -> float | None:
    sps = r.metrics.samples_per_s
    return 1.0 / sps if sps else None


def epoch_time_s(r: RunResult) -> float | None:
    return r.metrics.epoch_time_s


EPOCH_BASES = {"measured": epoch_figure, "projected": projected_epoch,
               "per sample": seconds_per_sample}


def measured_epoch(r: RunResult) -> bool:
    """A measured epoch time that compares like for like: not projected, and not a run's
    only complete epoch (its first, which holds the warm-up and the loader's start-up; with
    two or more the figure is the median of those after the first)."""
    if _projected(r) or r.metrics.epoch_time_s is None:
        return False
    walls = r.metrics.epoch_times_s
    return not (walls is not None and len(walls) == 1)


def _epoch_kind(r: RunResult) -> str:
    """like (epochs after the first measured), first (only a first epoch measured),
    projected, or none."""
    if measured_epoch(r):
        return "like"
    if r.metrics.epoch_time_s is None:
        return "none"
    return "projected" if _projected(r) else "first"


KIND_TEXT = {"like": "measured over epochs after the first",
             "first": "only a first epoch measured, which holds the warm-up",
             "projected": "projected from the median step", "none": "no epoch time"}


def epoch_basis(recs: list[RunResult]) -> str:
    """One basis for every epoch time a group compares, so that no comparison pairs a
    measured epoch (its first batch's wait included) with a projected one (median step x
    steps per epoch, no such wait): "measured" when every repeat of every point measured a
    like-for-like epoch (``measured_epoch``), else "projected" when each has a median step
    and steps per epoch, else seconds per sample."""
    every = [x for r in recs for x in P.repeats_of(r)]
    if every and all(measured_epoch(x) for x in every):
        return "measured"
    if every and all(projected_epoch(x) is not None for x in every):
        return "projected"
    return "per sample"


def batch_table(records: list[Record]) -> list[BatchRow]:
    """One row per batch size (each figure its median over the point's repeats), sorted by
    batch size within each group, with growth rates between consecutive points that finished
    (the first row's growth is None). Epoch-time growth is the paired estimate over the repeats (``epoch_interval``)."""
    rows: list[BatchRow] = []
    for label, recs in point_groups(sweep_runs(records), R.BATCH_AXES).items():
        recs = sorted(recs, key=lambda r: (r.batch_size is None, r.batch_size or 0))
        ok = [r for r in recs if r.status == "ok"]
        mem_kind = "device" if ok and all(device_memory(r) is not None for r in ok) else "host"
        basis = epoch_basis(ok)
        fig = EPOCH_BASES[basis]
        kinds = {_epoch_kind(x) for r2 in ok for x in P.repeats_of(r2)}
        prev: BatchRow | None = None
        for r in recs:
            row = _batch_row(r, label, mem_kind)
            row["epoch_basis"] = basis
            row["epoch_kinds"] = kinds
            # some epoch times of the group were measured: the basis is not what they show
            row["epoch_basis_mixed"] = basis != "measured" and bool(kinds & {"like", "first"})
            row["epoch_compared_s"] = (P.median_of(r, fig) if row["status"] == "ok"
                                       and basis != "per sample" else None)
            if row["status"] == "ok":
                if prev is not None:
                    row["mem_growth"] = M.growth(row["peak_mem_bytes"], prev["peak_mem_bytes"])
                    row["mem_interval"] = _mem_interval(prev["record"], r, mem_kind)
                    iv = P.interval(prev["record"], r, fig)
                    row["epoch_interval"] = iv
                    row["epoch_growth"] = (iv.estimate - 1.0 if iv is not None else
                                           M.growth(fig(r), fig(prev["record"])))
                prev = row
            rows.append(row)
    return rows


def _mem_interval(a: RunResult, b: RunResult, mem_kind: str) -> M.Interval | None:
    """The interval of B's peak memory / A's over their paired repeats (two or more pairs).
    Host memory moves between repeats of one point (a digits batch of 16: 52-70 MiB net over
    three repeats, 2026-11-25), so its growth is an estimate as the epoch time's is; with one
    repeat there is no spread to tell, and the point estimate stands alone."""
    av, bv, _, _ = P.paired(a, b, _memory_figure(mem_kind))
    if sum(1 for x, y in zip(av, bv, strict=False) if x and y) < 2:
        return None
    return M.ratio_interval(av, bv)


def _batch_row(r: RunResult, group: str, mem_kind: str) -> BatchRow:
    # every measured column the median over the point's repeats (an even count: the mean of
    # the middle two), as the growth beside it is taken over the repeats: a row that mixed
    # one repeat's samples/s with the median epoch did not add up (8.90 samples/s beside
    # 139.9 s for 1,437 samples)
    ok = r.status == "ok"
    mem = P.median_of(r, _memory_figure(mem_kind)) if ok else None

    def med(fig: Any) -> Any:
        return P.median_of(r, fig) if ok else fig(r)

    m = r.metrics
    return {
        "group": group, "run": r.label, "point": r.point, "batch_size": r.batch_size,
        "devices": r.world_size, "status": r.status, "error": r.error,
        "peak_mem_bytes": mem, "memory_kind": mem_kind, "mem_growth": None,
        "mem_interval": None,
        "peak_host_total_bytes": m.peak_mem_bytes.host,
        "epoch_time_s": med(epoch_time_s),
        "epoch_projected": _projected(r), "epoch_growth": None, "epoch_interval": None,
        "samples_per_s": med(P.sps_of),
        "achieved_flops_per_s": med(lambda x: x.metrics.achieved_flops_per_s),
        "mfu": med(lambda x: x.metrics.mfu), "cpu_util_pct": med(lambda x: x.metrics.cpu_util_pct),
        "gpu_util_pct": med(lambda x: x.metrics.gpu_util_pct),
        "repeats": len(P.repeats_of(r)), "record": r,
        "b_noise": P.median_of(r, C.b_noise_path),  # gradient noise scale (report/critical.py)
    }


def batch_table_parts(rows: list[BatchRow]) -> tuple[list[str], list[list[str]]]:
    """The batch table's headers and cells; with --target, each batch size's time to it over
    its seeds (median, fastest-slowest, k of n reached, samples) beside the usual columns."""
    shown: list[BatchRow] = [{**r, **T.point_figures(r["record"])}
                             if T.has_target(r["record"]) else r for r in rows]
    headers, cells = T.table_parts(BATCH_HEADERS, shown, batch_cells)
    if headers[-1] == T.TARGET_HEADERS[-1]:  # a speedup over processes: not a batch sweep's
        headers, cells = headers[:-1], [c[:-1] for c in cells]
    headers, cells = _one_unit_per_column(headers, cells, shown)
    if C.has_gns(rows):  # the gradient noise scale each batch size measured (report/critical)
        headers += list(C.NOISE_HEADERS)
        cells = [c + [C.noise_cell(r), C.regime_cell(r)] for c, r in zip(cells, rows, strict=True)]
    return headers, cells


def _one_unit_per_column(headers: list[str], cells: list[list[str]],
                         rows: list[BatchRow]) -> tuple[list[str], list[list[str]]]:
    """Epoch times in one unit (fmt.durations) and FLOP/s in the unit that reads (GFLOP/s
    on a CPU, never '2.40e-04' TFLOP/s), for the rows that measured them."""
    ok = [r["status"] == "ok" for r in rows]
    e, f = headers.index("Epoch time"), headers.index("TFLOP/s")
    epochs = fmt.durations([shown_epoch(r) if k else None for r, k in zip(rows, ok, strict=True)],
                           [epoch_projected(r) for r in rows])
    unit, rates = fmt.flops_column([r["achieved_flops_per_s"] if k else None
                                    for r, k in zip(rows, ok, strict=True)])
    for row, k, ep, fl in zip(cells, ok, epochs, rates, strict=True):
        if k:
            row[e], row[f] = ep, fl
    return [unit if i == f else h for i, h in enumerate(headers)], cells


def batch_cells(row: BatchRow) -> list[str]:
    """The row as table cells, in BATCH_HEADERS order."""
    head = [fmt.num(row["batch_size"], "d"), fmt.num(row["devices"], "d")]
    if row["status"] == "oom":
        return head + ["out of memory"] + ["-"] * 8
    if row["status"] != "ok":
        err = f": {row['error']}" if row.get("error") else ""
        return head + [f"{row['status']}{err}"[:80]] + ["-"] * 8
    mem = fmt.bytes_(row["peak_mem_bytes"])
    total = row.get("peak_host_total_bytes")
    if row["memory_kind"] == "host" and total and total != row["peak_mem_bytes"]:
        mem += f" net ({fmt.bytes_(total)} total)"
    return head + [
        mem, _growth_cell(row["mem_growth"], row.get("mem_interval")),
        epoch_text(row),
        _growth_cell(row["epoch_growth"], row.get("epoch_interval")),
        fmt.rate(row["samples_per_s"]), fmt.tflops(row["achieved_flops_per_s"]),
        fmt.mfu(row["mfu"]), fmt.pct_value(row["cpu_util_pct"]),
        fmt.pct_value(row["gpu_util_pct"]),
    ]


def _growth_cell(growth: float | None, iv: M.Interval | None) -> str:
    """``+37%``, with the interval when the repeats gave one that is not a single value."""
    text = fmt.growth(growth)
    if iv is not None and iv.lo < iv.hi:
        text += " " + iv.bounds(lambda v: fmt.signed_pct(v - 1))
    return text


def _samples_per_s_per_gib(row: BatchRow) -> float | None:
    if not row["samples_per_s"] or not row["peak_mem_bytes"]:
        return None
    return row["samples_per_s"] / (row["peak_mem_bytes"] / fmt.GIB)


def pays(epoch: M.Interval | None, mem_growth: float | None,
         mem: M.Interval | None = None) -> bool | None:
    """The batch rule: a larger batch pays while epoch time falls faster than memory grows,
    i.e. epoch ratio E < 1 - memory growth = 2 - memory ratio R. True / False only when E's
    interval lies wholly on one side of the bar; with memory's own interval (``mem``, over
    the repeats) the bar is a range too, and E must clear all of it. None (cannot tell)
    otherwise."""
    if epoch is None or mem_growth is None:
        return None
    strict, lenient = ((2.0 - mem.hi, 2.0 - mem.lo) if mem is not None
                       else (1.0 - mem_growth, 1.0 - mem_growth))
    if epoch.below(strict):
        return True
    if epoch.above(lenient):
        return False
    return None


def _steps(rows: list[BatchRow]) -> list[BatchStep]:
    """Each step up in batch size within a group: did it pay?"""
    out: list[BatchStep] = []
    prev: BatchRow | None = None
    for row in rows:
        if row["status"] != "ok":
            continue
        if prev is not None and prev["group"] == row["group"]:
            eg, mg, iv = row["epoch_growth"], row["mem_growth"], row["epoch_interval"]
            miv = row["mem_interval"]
            verdict = pays(iv, mg, miv)
            text = _step_text(iv, mg, miv)
            if verdict is not True:
                text += _at_peak(prev, row)
            out.append({"group": row["group"], "from": prev["batch_size"],
                        "to": row["batch_size"], "epoch_growth": eg, "mem_growth": mg,
                        "epoch_interval": iv.to_dict() if iv else None,
                        "mem_interval": miv.to_dict() if miv else None,
                        "mem_growth_text": _growth_cell(mg, miv),
                        "pays": verdict, "text": text})
        prev = row
    return out


def _at_peak(row: BatchRow, nxt: BatchRow | None = None,
             th: Thresholds = DEFAULT) -> str:
    """Roofline context for a step up that did not pay: at or above ``mfu_compute_bound``
    the smaller batch already kept the device's arithmetic busy, so a larger one can only
    cut the rest of the step (waiting, launch and per-step overhead), not its compute. The
    larger batch's own MFU is shown beside it: how much more of the peak it reached."""
    mfu = row.get("mfu")
    if mfu is None or mfu < th.mfu_compute_bound:
        return ""
    then = nxt.get("mfu") if nxt is not None else None
    beside = (f" and batch {nxt['batch_size']} at {then:.0%}"
              if nxt is not None and then is not None else "")
    return (f" (batch {row['batch_size']} already ran at {mfu:.0%} of the device's peak "
            f"FLOP/s{beside}: compute-bound, at or above {th.mfu_compute_bound:.0%}, so a "
            "larger batch cannot cut the compute per sample, only the rest of the step)")


def _step_text(iv: M.Interval | None, mg: float | None, miv: M.Interval | None = None) -> str:
    if iv is None or mg is None:
        return "cannot tell: " + ("no epoch-time spread" if mg is not None
                                  else "no memory figure")
    v = pays(iv, mg, miv)
    if v is not None:  # decided: with the interval it was decided on
        return (f"{'pays' if v else 'does not pay'} (epoch-time ratio {iv.short(ref=None)}, "
                f"{bar_text(mg, miv)})")
    bar = 1.0 - mg
    return M.undecided_text(iv, bar, f"epoch-time ratio ({bar_text(mg, miv)})",
                            need=_repeats_to_decide(iv, mg, miv))


def bar_text(mg: float, miv: M.Interval | None = None) -> str:
    """The bar an epoch-time ratio must pass, ``pays below 1 - memory growth = 0.62x``, and
    its range over memory's own interval; never a ratio of 0 or below (memory that more than
    doubled leaves no epoch time that could pay) and never the numbers of an interval too
    wide to mean anything."""
    bar = 1.0 - mg
    if bar <= 0:
        text = (f"memory grew {fmt.signed_pct(mg)}, more than epoch time can fall, so it pays "
                "only if memory's true growth is below +100%")
    else:
        text = f"pays below 1 - memory growth = {bar:.2f}x"
    if miv is None or not miv.lo < miv.hi:
        return text
    if miv.too_wide(None):
        return text + "; memory's own interval: spread too large"
    lo, hi = 2.0 - miv.hi, 2.0 - miv.lo
    if hi <= 0:
        return text
    return text + (f"; {lo:.2f}x to {hi:.2f}x over memory's interval" if lo > 0
                   else f"; up to {hi:.2f}x over memory's interval")


def _repeats_to_decide(iv: M.Interval, mg: float, miv: M.Interval | None) -> int | None:
    """The repeats after which the rule would decide, if both the epoch-time ratio and the
    memory ratio kept their estimates and spreads: both intervals narrow with more repeats
    (the epoch interval alone can clear the bar at memory's estimate while memory's
    interval still straddles it)."""
    for n in range(max(2, iv.n + 1), M.MAX_REPEATS_SUGGESTED + 1):
        mem = M.projected(miv, n) if miv is not None else None
        if pays(M.projected(iv, n), mg, mem) is not None:
            return n
    return None


def _ahead(best: BatchRow, others: list[BatchRow], figure: Any,
           higher_is_better: bool) -> tuple[list[str], list[str]]:
    """The rows ``best`` is ahead of by more than the repeats' spread, and those it cannot
    be told apart from, each as ``batch N (interval of other / best)``."""
    ahead, tied = [], []
    for o in others:
        iv = P.interval(best["record"], o["record"], figure)
        text = f"batch {o['batch_size']} ({'no spread' if iv is None else iv.text()})"
        if iv is not None and (iv.below(1.0) if higher_is_better else iv.above(1.0)):
            ahead.append(text)
        else:
            tied.append(text)
    return ahead, tied


def epoch_projected(row: BatchRow) -> bool:
    return row.get("epoch_basis") == "projected" or bool(row.get("epoch_projected"))


def epoch_text(row: BatchRow) -> str:
    """``shown_epoch`` as the table writes it, ``~`` where projected."""
    return fmt.seconds(shown_epoch(row), epoch_projected(row))


def shown_epoch(row: BatchRow) -> float | None:
    """The epoch time the table shows for the row, in seconds: the compared (projected)
    figure where the group's basis is the median step's; none where it is seconds per sample
    and the kinds were mixed (the growth beside it is from samples/s); else the row's own."""
    if row.get("epoch_basis") == "projected":
        return compared_epoch(row)
    if row.get("epoch_basis") == "per sample" and row.get("epoch_basis_mixed"):
        return None
    return row["epoch_time_s"]


def shown_epoch_figure(row: BatchRow) -> Any:
    """The per-repeat figure behind ``shown_epoch``."""
    if row.get("epoch_basis") == "projected":
        return projected_epoch
    return epoch_time_s


def compared_epoch(row: BatchRow) -> float | None:
    """The row's epoch time on its group's basis (``epoch_basis``), over its repeats."""
    fig = EPOCH_BASES[row["epoch_basis"]]
    return P.median_of(row["record"], fig)


def _fastest(ok: list[BatchRow]) -> BatchRow:
    """The shortest epoch on the groups' basis when every group has the same one (seconds
    per sample is not seconds per epoch); across groups of different bases, the most
    samples/s."""
    bases = {r["epoch_basis"] for r in ok}
    timed = [r for r in ok if compared_epoch(r) is not None]
    if len(bases) == 1 and timed:
        return min(timed, key=lambda r: compared_epoch(r) or 0.0)  # None left out above
    return max(ok, key=lambda r: r["samples_per_s"] or 0.0)


def recommend_batch(records: list[Record]) -> BatchPicks:
    """Fastest and most efficient batch size, and which steps up in batch size paid.

    Returns ``{"fastest", "most_efficient", "steps", "text", "fastest_decided",
    "most_efficient_decided"}``; ``fastest`` and ``most_efficient`` are table rows
    (``most_efficient`` with ``samples_per_s_per_gib``), or None when no batch size
    finished. A row is called fastest / most efficient only when the repeats' intervals
    put it ahead of every other batch size of its group; otherwise the text says which ones
    it cannot be told apart from."""
    rows = batch_table(records)
    ok = [r for r in rows if r["status"] == "ok" and (r["samples_per_s"] or 0) > 0]
    steps = _steps(rows)
    if not ok:
        return {"fastest": None, "most_efficient": None, "steps": steps,
                "text": "No batch size finished, so there is nothing to recommend."}
    fastest = _fastest(ok)
    same = [r for r in ok if r["group"] == fastest["group"] and r is not fastest]
    fast_ahead, fast_tied = _ahead(fastest, same, EPOCH_BASES[fastest["epoch_basis"]],
                                   higher_is_better=False)
    eff_rows = [r for r in ok if _samples_per_s_per_gib(r) is not None]
    # picked on the figure its verdict compares (each repeat's own samples/s per byte, the
    # median over repeats), so the intervals beside it never favour another row
    best_eff = (max(eff_rows, key=lambda r: P.median_of(r["record"], _per_byte(r)) or 0.0)
                if eff_rows else None)
    eff_ahead: list[str] = []
    eff_tied: list[str] = []
    if best_eff is not None:
        peers = [r for r in eff_rows if r["group"] == best_eff["group"] and r is not best_eff]
        eff_ahead, eff_tied = _ahead(best_eff, peers, _per_byte(best_eff),
                                     higher_is_better=True)
        per_gib = P.median_of(best_eff["record"], _per_byte(best_eff))
        best_eff = {**best_eff, "samples_per_s_per_gib": per_gib * fmt.GIB if per_gib else None}
    multi = len({r["group"] for r in rows}) > 1

    picks = target_picks(rows)
    text = _batch_text(fastest, best_eff, steps, multi, (fast_ahead, fast_tied),
                       (eff_ahead, eff_tied))
    if picks["lines"]:
        text += "\n" + "\n".join(picks["lines"])
    crit = C.group_lines(rows, {"fastest": None if fast_tied else fastest,  # decided picks
                                "most_efficient": None if eff_tied else best_eff})
    if crit:
        text += "\n" + "\n".join(crit)
    return {"fastest": fastest, "most_efficient": best_eff, "steps": steps,
            "fastest_decided": not fast_tied,
            "most_efficient_decided": best_eff is not None and not eff_tied,
            "soonest": picks["soonest"], "fewest_samples": picks["fewest_samples"],
            "text": text}


def _per_byte(row: BatchRow) -> Any:
    """Each repeat's own samples/s per byte of the row's kind of peak memory."""
    mem_of = _memory_figure(row["memory_kind"])

    def per_byte(r: RunResult) -> float | None:
        sps, mem = P.sps_of(r), mem_of(r)
        return sps / mem if sps and mem else None

    return per_byte


def runs_own_spread(fastest: BatchRow, rows: list[BatchRow]) -> bool:
    """Every interval that leaves ``fastest`` undecided against a batch size of its group is
    as wide as the runs' own spread made it (``Interval.within_run_bound``): stalls inside
    the runs, not the repeats, keep it open."""
    fig = EPOCH_BASES[fastest["epoch_basis"]]
    open_ivs = []
    for o in rows:
        if (o["group"] != fastest["group"] or o["status"] != "ok"
                or o["batch_size"] == fastest["batch_size"]):
            continue
        iv = P.interval(fastest["record"], o["record"], fig)
        if iv is None or not iv.above(1.0):
            open_ivs.append(iv)
    return bool(open_ivs) and all(iv is not None and iv.within_run_bound for iv in open_ivs)



def _batch_text(fastest: BatchRow, eff: BatchRow | None, steps: list[BatchStep], multi: bool,
                fast: tuple[list[str], list[str]], eff_vs: tuple[list[str], list[str]]) -> str:
    """The recommendation's text; ``fast`` and ``eff_vs`` are (ahead of, tied with)."""
    n = max((fastest.get("repeats") or 1), 1)
    lines = ["A larger batch pays only while epoch time falls faster than memory grows "
             f"(intervals over {n} repeat{'s' if n != 1 else ''}, 95%)."]

    def where(row: Mapping[str, object]) -> str:
        return f" ({row['group']})" if multi and row["group"] else ""

    if fastest.get("epoch_basis_mixed"):
        how = ("as projected (median step x steps per epoch)"
               if fastest["epoch_basis"] == "projected" else
               "as seconds per sample (from samples/s; no epoch time is shown)")
        kinds = [KIND_TEXT[k] for k in ("like", "first", "projected", "none")
                 if k in fastest.get("epoch_kinds", ())]
        lines.append(f"Epoch times are compared {how} for every batch size, as their own "
                     f"were not alike ({'; '.join(kinds)}): a measured epoch holds the wait "
                     "for its first batch, and a run's first epoch the warm-up, which a "
                     "projection leaves out.")
    for s in steps:
        lines.append(f"- {s['from']} -> {s['to']}{where(s)}: epoch time {fmt.growth(s['epoch_growth'])},"
                     f" memory {s['mem_growth_text']}: {s['text']}.")
    head = (f"batch {fastest['batch_size']}{where(fastest)}, epoch time "
            f"{epoch_text(fastest)}, "
            f"{fmt.rate(fastest['samples_per_s'])} samples/s")
    lines.append(claim("Fastest", head, fast[1], fast[0], n))
    if eff is not None:
        body = (f"batch {eff['batch_size']}{where(eff)}, {fmt.rate(eff['samples_per_s_per_gib'])} "
                f"samples/s per GiB of peak {eff['memory_kind']} memory (the median over its "
                f"repeats of each one's own; the row: {fmt.rate(eff['samples_per_s'])} samples/s "
                f"at {fmt.bytes_(eff['peak_mem_bytes'])})")
        lines.append(claim("Most efficient", body, eff_vs[1], eff_vs[0], n))
    return "\n".join(lines)
