"""The batch rule over the batch table (``report/tables/batch.py``): a larger batch pays only while
epoch time falls faster than memory grows (``pays``, each step up with its interval); it
names the fastest batch size and the most efficient one (samples/s per GiB of peak memory:
device memory when measured, else host memory), each decided only when its interval says
so (``recommend_batch``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scaleprobe.core import claim as CL
from scaleprobe.core import claim_kinds as CK
from scaleprobe.core import fmt
from scaleprobe.core import metrics as M
from scaleprobe.core.record import Record
from scaleprobe.core.result_model import RunResult
from scaleprobe.core.thresholds import DEFAULT, Thresholds
from scaleprobe.report.reading import machine_load as L
from scaleprobe.report.reading import repeats as P
from scaleprobe.report.tables import critical as C
from scaleprobe.report.tables.batch import (
    EPOCH_BASES,
    KIND_TEXT,
    SAME_SAMPLES,
    batch_table,
    compared_epoch,
    epoch_text,
    growth_cell,
    memory_figure,
    samples_per_s_per_gib,
)
from scaleprobe.report.tables.batch_target import claim, target_picks
from scaleprobe.report.tables.rows import BatchPicks, BatchRow, BatchStep


def pays(epoch: M.Interval | None, mem_growth: float | None,
         mem: M.Interval | None = None) -> bool | None:
    """The batch rule (``claim_kinds.batch_step``): a larger batch pays while epoch time falls
    faster than memory grows, i.e. epoch ratio E < 1 - memory growth = 2 - memory ratio R.
    True / False only when E's interval lies wholly on one side of the bar; with memory's own
    interval (``mem``, over the repeats) the bar is a range too, and E must clear all of it.
    None (cannot tell) otherwise."""
    if epoch is None or mem_growth is None:
        return None
    rule = CK.batch_step(epoch, mem_growth, mem).rule
    return {CL.RULE_BELOW: True, CL.RULE_ABOVE: False}.get(rule)


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
            text = _step_text(iv, mg, miv, exact=row["memory_kind"] == "tensor")
            if verdict is not True:
                text += _at_peak(prev, row)
            # the step's claim stands on both points' runs: their load rides on it
            caveat = CL.load_caveat(L.sources([prev["record"], row["record"]]))
            if caveat:
                text += f"; {caveat}"
            out.append({"group": row["group"], "from": prev["batch_size"],
                        "to": row["batch_size"], "epoch_growth": eg, "mem_growth": mg,
                        "epoch_interval": iv.to_dict() if iv else None,
                        "mem_interval": miv.to_dict() if miv else None,
                        "mem_growth_text": growth_cell(mg, miv),
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


def _step_text(iv: M.Interval | None, mg: float | None, miv: M.Interval | None = None,
               exact: bool = False) -> str:
    if iv is None or mg is None:
        return "cannot tell: " + ("no epoch-time spread" if mg is not None
                                  else "no memory figure")
    c = CK.batch_step(iv, mg, miv)
    if c.decided:  # with the interval it was decided on: clear of the bar, however wide
        return (f"{c.verdict} (epoch-time ratio {iv.short(ref=1.0 - mg)}, "
                f"{bar_text(mg, miv, exact)})")
    bar = 1.0 - mg
    return CL.undecided(iv, bar, f"epoch-time ratio ({bar_text(mg, miv, exact)})",
                            need=step_repeats_to_decide(iv, mg, miv))


def bar_text(mg: float, miv: M.Interval | None = None, exact: bool = False) -> str:
    """The bar an epoch-time ratio must pass, ``pays below 1 - memory growth = 0.62x``, and
    its range over memory's own interval; never a ratio of 0 or below (memory that more than
    doubled leaves no epoch time that could pay) and never the numbers of an interval too
    wide to mean anything. ``exact``: the memory figure is the same in every repeat (the
    CPU's tensor bytes), with no true growth other than the one measured."""
    bar = 1.0 - mg
    if bar <= 0:
        text = (f"memory grew {fmt.growth(mg)}, more than epoch time can fall"
                + ("" if exact else ", so it pays only if memory's true growth is below +100%"))
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


def step_repeats_to_decide(iv: M.Interval, mg: float,
                           miv: M.Interval | None) -> int | None:
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
           higher_is_better: bool) -> tuple[list[str], list[str], int]:
    """The rows ``best`` is ahead of by more than the repeats' spread, and those it cannot
    be told apart from, each as ``batch N (interval of other / best)``, and the fewest
    repeats behind any of those intervals (the row's own without any)."""
    ahead, tied = [], []
    fewest = max(best.get("repeats") or 1, 1)
    for o in others:
        iv = P.interval(best["record"], o["record"], figure)
        if iv is not None:
            fewest = min(fewest, iv.n)
        text = f"batch {o['batch_size']} ({'no spread' if iv is None else iv.text()})"
        if iv is not None and (iv.below(1.0) if higher_is_better else iv.above(1.0)):
            ahead.append(text)
        else:
            tied.append(text)
    return ahead, tied, fewest


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
    fast_ahead, fast_tied, fast_n = _ahead(fastest, same, EPOCH_BASES[fastest["epoch_basis"]],
                                           higher_is_better=False)
    eff_rows = [r for r in ok if samples_per_s_per_gib(r) is not None]
    # picked on the figure its verdict compares (each repeat's own samples/s per byte, the
    # median over repeats), so the intervals beside it never favour another row
    best_eff = (max(eff_rows, key=lambda r: P.median_of(r["record"], _per_byte(r)) or 0.0)
                if eff_rows else None)
    eff_ahead: list[str] = []
    eff_tied: list[str] = []
    eff_n = 1
    if best_eff is not None:
        peers = [r for r in eff_rows if r["group"] == best_eff["group"] and r is not best_eff]
        eff_ahead, eff_tied, eff_n = _ahead(best_eff, peers, _per_byte(best_eff),
                                            higher_is_better=True)
        per_gib = P.median_of(best_eff["record"], _per_byte(best_eff))
        best_eff = {**best_eff, "samples_per_s_per_gib": per_gib * fmt.GIB if per_gib else None}
    multi = len({r["group"] for r in rows}) > 1

    picks = target_picks(rows)
    text = _batch_text(fastest, best_eff, steps, multi, (fast_ahead, fast_tied, fast_n),
                       (eff_ahead, eff_tied, eff_n), ok)
    if picks["lines"]:
        text += "\n" + "\n".join(picks["lines"])
    # decided: ahead of every other batch size of its group, and there was one
    fast_decided = bool(fast_ahead) and not fast_tied
    eff_decided = best_eff is not None and bool(eff_ahead) and not eff_tied
    crit = C.group_lines(rows, {"fastest": fastest if fast_decided else None,
                                "most_efficient": best_eff if eff_decided else None})
    if crit:
        text += "\n" + "\n".join(crit)
    return {"fastest": fastest, "most_efficient": best_eff, "steps": steps,
            "fastest_decided": fast_decided,
            "most_efficient_decided": eff_decided,
            "soonest": picks["soonest"], "fewest_samples": picks["fewest_samples"],
            "text": text}


def _per_byte(row: BatchRow) -> Any:
    """Each repeat's own samples/s per byte of the row's kind of peak memory."""
    mem_of = memory_figure(row["memory_kind"])

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



def _with_caveat(line: str, pick: BatchRow, ok: list[BatchRow]) -> str:
    """A ranking's line with the load caveat (core/claim.py) of the runs it compared: every
    finished row of the pick's group."""
    caveat = CL.load_caveat(L.sources([r["record"] for r in ok if r["group"] == pick["group"]]))
    return line.rstrip(".") + f"; {caveat}." if caveat else line


def _batch_text(fastest: BatchRow, eff: BatchRow | None, steps: list[BatchStep], multi: bool,
                fast: tuple[list[str], list[str], int], eff_vs: tuple[list[str], list[str], int],
                ok: list[BatchRow] | None = None) -> str:
    """The recommendation's text; ``fast`` and ``eff_vs`` are (ahead of, tied with, the
    fewest repeats behind those intervals); ``ok``: the finished rows, whose load rides on
    the rankings."""
    ok = ok or []
    reps = sorted({max(r.get("repeats") or 1, 1) for r in ok} or {1})
    over = (f"{reps[0]} repeat{'s' if reps[0] != 1 else ''}" if len(reps) == 1
            else f"{reps[0]}-{reps[-1]} repeats, as many as each pair has")
    lines = ["A larger batch pays only while epoch time falls faster than memory grows "
             f"(intervals over {over}, 95%)."]

    def where(row: Mapping[str, object]) -> str:
        return f" ({row['group']})" if multi and row["group"] else ""

    if fastest.get("epoch_basis_mixed"):
        how = {"window": "as projected from the timed window (samples per epoch / "
                         "samples/s)",
               SAME_SAMPLES: "as epochs of the same samples projected from the timed "
                             "window (those samples / samples/s)",
               "projected": "as projected (median step x steps per epoch)"}.get(
                   fastest["epoch_basis"],
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
    lines.append(_with_caveat(claim("Fastest", head, fast[1], fast[0], fast[2]), fastest, ok))
    if eff is not None:
        body = (f"batch {eff['batch_size']}{where(eff)}, {fmt.rate(eff['samples_per_s_per_gib'])} "
                f"samples/s per GiB of peak {eff['memory_kind']} memory (the median over its "
                f"repeats of each one's own; the row: {fmt.rate(eff['samples_per_s'])} samples/s "
                f"at {fmt.bytes_(eff['peak_mem_bytes'])})")
        lines.append(_with_caveat(claim("Most efficient", body, eff_vs[1], eff_vs[0], eff_vs[2]),
                                  eff, ok))
    return "\n".join(lines)
