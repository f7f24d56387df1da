"""A batch-size sweep run with ``--target``: which batch size reaches the target soonest and
which needs the fewest samples (McCandlish et al. 2018: past the critical batch size a larger
batch finishes epochs sooner and needs more samples for the same quality)."""

from __future__ import annotations

from collections.abc import Callable

from scaleprobe.core import claim as CL
from scaleprobe.core import fmt
from scaleprobe.core.result_model import RunResult
from scaleprobe.report.reading import machine_load as L
from scaleprobe.report.reading import repeats as P
from scaleprobe.report.tables import time_to_target as T
from scaleprobe.report.tables.rows import BatchRow, TargetPicks


def target_picks(rows: list[BatchRow]) -> TargetPicks:
    """With a target (``--target``): the batch size that reaches it soonest (wall clock,
    evaluation excluded) and the one that needs the fewest samples, per group, each named
    only when the seeds' paired intervals put it ahead of every other batch size that reached
    the target (else "inconclusive", with the ones it is not told apart from; where one seed
    of a pair is all an interval stands on, "inconclusive (1 repeat)" and "not decided
    against", as ``claim.ranking`` words the fewest repeats). A larger batch can shorten each
    epoch and still need more samples (McCandlish et al. 2018, the critical batch size): the
    two picks differ exactly there. Each line carries the load caveat of the runs it
    compared. Batch sizes whose runs never reached the target are named as such."""
    out: TargetPicks = {"soonest": None, "fewest_samples": None, "lines": []}
    measured = [r for r in rows if r["status"] in ("ok", "target_not_reached")
                and T.has_target(r["record"])]
    if not measured:
        return out
    what = T.target_text(measured[0]["record"])
    groups = list(dict.fromkeys(r["group"] for r in measured))
    for group in groups:
        members: list[BatchRow] = [{**r, **T.point_figures(r["record"])} for r in measured
                                   if r["group"] == group]
        reached = [r for r in members if r["ttt_reached"]]
        never = [f"batch {r['batch_size']} (0 of {r['ttt_runs']} runs)" for r in members
                 if not r["ttt_reached"]]
        where = f" ({group})" if group and len(groups) > 1 else ""
        if not reached:
            out["lines"].append(f"- {what}{where}: no batch size reached it: "
                                + "; ".join(never) + ".")
            continue
        for key, label, figure, median, unit in (
                ("soonest", "Soonest to", T.time_to_target_s,
                 lambda r: r.get("ttt_median_s"), "time"),
                ("fewest_samples", "Fewest samples to", T.samples_to_target,
                 lambda r: r.get("samples_to_target_median"), "samples")):
            best = min(reached, key=lambda r: _or_inf(median(r)))
            ahead: list[str] = []
            tied: list[str] = []
            # the fewest repeats behind any interval it is held against (the pairs of seeds
            # that both reached it; the best's own runs without another): one decides nothing
            fewest = max(best.get("ttt_reached") or 1, 1)
            for o in reached:
                if o is best:
                    continue
                # the other's figure / the best's, seed by seed, within the evaluations
                iv = T.target_ratio(best["record"], o["record"], figure)
                fewest = min(fewest, iv.n if iv is not None
                             else _pairs(best["record"], o["record"], figure))
                text = f"batch {o['batch_size']} ({'no spread' if iv is None else iv.text()})"
                (ahead if iv is not None and iv.above(1.0) else tied).append(text)
            figure_text = (fmt.duration(best.get("ttt_median_s")) if unit == "time"
                           else f"{best.get('samples_to_target_median') or 0:,.0f} samples")
            body = (f"batch {best['batch_size']}{where}, median {figure_text} over "
                    f"{best.get('ttt_reached')} of {best.get('ttt_runs')} runs that reached it")
            line = "- " + _with_caveat(claim(f"{label} {what}", body, tied, ahead,
                                             max(fewest, 1)), reached)
            if never:
                line += " Never reached: " + "; ".join(never) + "."
            out["lines"].append(line)
            if not tied and key == "soonest" and out["soonest"] is None:
                out["soonest"] = best
            elif not tied and key == "fewest_samples" and out["fewest_samples"] is None:
                out["fewest_samples"] = best
    lr = T.lr_statement([r["record"] for r in measured])
    if lr:  # a larger batch's samples to target depend on its step size (Goyal et al.)
        out["lines"].append(f"- {lr[0].upper()}{lr[1:]}.")
    return out


def _or_inf(v: float | None) -> float:
    return float("inf") if v is None else v


def _pairs(a: RunResult, b: RunResult, figure: Callable[[RunResult], float | None]) -> int:
    """The seeds at which both points have the figure (both reached the target)."""
    av, bv, _, _ = P.paired(a, b, figure)
    return sum(1 for x, y in zip(av, bv, strict=True)
               if x is not None and y is not None and x > 0 and y > 0)


def _with_caveat(line: str, compared: list[BatchRow]) -> str:
    """A pick's line with the load caveat (core/claim.py) of the runs it compared: every
    repeat of the batch sizes of its group that reached the target (as the Fastest and Most
    efficient lines carry that of their group's finished rows)."""
    caveat = CL.load_caveat(L.sources([r["record"] for r in compared]))
    return line.rstrip(".") + f"; {caveat}." if caveat else line


def claim(what: str, body: str, tied: list[str], ahead: list[str] | None = None,
          repeats: int = 2) -> str:
    """``Fastest: <body>`` ahead of the others, or not: ``claim.ranking``'s words."""
    return CL.ranking(what, body, tied, ahead, repeats)