"""A batch-size sweep run with ``--target``: which batch size reaches the target soonest and
which needs the fewest samples (McCandlish et al. 2018: past the critical batch size a larger
batch finishes epochs sooner and needs more samples for the same quality)."""

from __future__ import annotations

from scaleprobe.core import claim as CL
from scaleprobe.core import fmt
from scaleprobe.report.tables import time_to_target as T
from scaleprobe.report.tables.rows import BatchRow, TargetPicks


def target_picks(rows: list[BatchRow]) -> TargetPicks:
    """With a target (``--target``): the batch size that reaches it soonest (wall clock,
    evaluation excluded) and the one that needs the fewest samples, per group, each named
    only when the seeds' paired intervals put it ahead of every other batch size that reached
    the target (else "inconclusive", with the ones it is not told apart from). A larger batch
    can shorten each epoch and still need more samples (McCandlish et al. 2018, the critical
    batch size): the two picks differ exactly there. Batch sizes whose runs never reached
    the target are named as such."""
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
            for o in reached:
                if o is best:
                    continue
                # the other's figure / the best's, seed by seed, within the evaluations
                iv = T.target_ratio(best["record"], o["record"], figure)
                text = f"batch {o['batch_size']} ({'no spread' if iv is None else iv.text()})"
                (ahead if iv is not None and iv.above(1.0) else tied).append(text)
            figure_text = (fmt.duration(best.get("ttt_median_s")) if unit == "time"
                           else f"{best.get('samples_to_target_median') or 0:,.0f} samples")
            body = (f"batch {best['batch_size']}{where}, median {figure_text} over "
                    f"{best.get('ttt_reached')} of {best.get('ttt_runs')} runs that reached it")
            line = "- " + claim(f"{label} {what}", body, tied, ahead)
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


def claim(what: str, body: str, tied: list[str], ahead: list[str] | None = None,
          repeats: int = 2) -> str:
    """``Fastest: <body>`` ahead of the others, or not: ``claim.ranking``'s words."""
    return CL.ranking(what, body, tied, ahead, repeats)