"""The critical-batch figure of a batch sweep (``report/tables/critical.py`` holds the fit and the
prediction it draws): samples against steps to the target with the fitted curve, beside
B_noise over training."""

from __future__ import annotations

import math
from typing import Any

from scaleprobe.report.render import plots
from scaleprobe.report.tables.critical import (
    CriticalFit,
    Predicted,
    batch_global,
    group_fit,
    median_words,
    predicted,
    runs_of,
    steps_to_target,
    steps_to_target_lo,
)
from scaleprobe.report.tables.rows import BatchRow

# a B_noise value more than this many times the series' 90th percentile (or the fitted and
# predicted lines, whichever is higher) is drawn at the panel's top edge and named, not scaled
# to: one spike of 35,000 among values of 20-700 flattened every other line onto the axis
CLIP_ABOVE = 4.0


def critical_plot(rows: list[BatchRow], title: str) -> Any:
    """Left: samples against steps to the target, one dot per run (labelled with its batch
    size at the median), and the fitted curve (S(B), E(B)) with its asymptotes S_min and
    E_min. Right: B_noise over training, one line per batch size (its median repeat's
    series), with the fitted critical batch. A panel without data is left out (the figure
    narrows to the other); B_noise values far above the rest are clipped and named in the
    panel and in ``meta["clipped"]`` (for the caption: ``clipped_note``). None without a fit
    or a series to draw."""
    fit = group_fit(rows)
    series = [(batch_global(r["record"]), r["record"].gns.series) for r in rows
              if r.get("record") is not None and r["record"].gns is not None
              and r["record"].gns.series]
    if fit is None and not series:
        return None
    two = fit is not None and bool(series)
    fig, axes = plots._figure(11.0 if two else 6.2, 4.4, 2 if two else 1)
    panels = list(axes) if two else [axes]
    clipped: list[tuple[int | None, float, float]] = []
    if fit is not None:
        _fit_panel(panels[0], rows, fit)
    if series:
        clipped = _series_panel(panels[-1], series, fit, predicted(rows))
    fig.suptitle(title)
    plot = plots._render(fig)
    plot.meta["clipped"] = [{"batch": b, "samples": x, "b_noise": y} for b, x, y in clipped]
    return plot


def clipped_note(plot: Any) -> str | None:
    """The caption's line for the values the B_noise panel cut off, or None."""
    cut = (plot.meta.get("clipped") if plot is not None else None) or []
    if not cut:
        return None
    each = "; ".join(f"batch {c['batch']}: {c['b_noise']:,.0f} at {c['samples']:,.0f} samples "
                     "trained" for c in cut)
    return (f"The B_noise panel's axis stops below {len(cut)} value"
            f"{'s' if len(cut) != 1 else ''} far above the rest (marked ^ at its top edge), "
            f"so the other lines stay readable: {each}. One block's B_noise is a noisy "
            "estimate; the table's figure is each run's over all its steps.")


def _fit_panel(ax: Any, rows: list[BatchRow], fit: CriticalFit) -> None:
    runs: list[tuple[int, int]] = []
    for r in runs_of(rows):
        b, s = batch_global(r), steps_to_target(r)
        if b and s:
            runs.append((b, s))
    ax.plot([s for _, s in runs], [s * b for b, s in runs], "o", color="#30638e", ms=5,
            label="each run (seed)")
    said = False
    for r in runs_of(rows):  # where the evaluation before the hit leaves it open
        b, s, before = batch_global(r), steps_to_target(r), steps_to_target_lo(r)
        if b and s and before is not None and before < s:
            first = max(before, 1)
            ax.plot([first, s], [first * b, s * b], "-", color="#30638e", alpha=0.35, lw=2,
                    label=None if said else "crossed between evaluations")
            said = True
    for b in fit.batches:  # label each batch size at its median run
        mine = sorted(s for bb, s in runs if bb == b)
        s = mine[(len(mine) - 1) // 2]
        ax.annotate(f"B={b}", (s, s * b), textcoords="offset points", xytext=(5, 4),
                    fontsize=8, color="#444")
    lo, hi = fit.batches[0] / 2, fit.batches[-1] * 2
    bs = [lo * (hi / lo) ** (i / 99) for i in range(100)]
    curve = [(fit.steps(b), fit.samples(b)) for b in bs if fit.steps(b) > 0]
    if curve:
        label = ("fit S = S_min + E_min/B" + (f", B_crit {fit.b_crit:,.0f}" if fit.b_crit
                                              else ""))
        ax.plot([c[0] for c in curve], [c[1] for c in curve], "-", color="#d1495b",
                label=label)
    if fit.s_min > 0:
        ax.axvline(fit.s_min, ls=":", color="#999", label=f"S_min {fit.s_min:,.0f} steps")
    if fit.e_min > 0:
        ax.axhline(fit.e_min, ls="--", color="#999", label=f"E_min {fit.e_min:,.0f} samples")
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # heavy: matplotlib

    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):  # plain numbers at 1, 2, 5 x 10^k; no minor labels
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
        axis.set_minor_formatter(NullFormatter())
    ax.set(xlabel="steps to target", ylabel="samples to target",
           title="Samples against steps to the target")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="upper right")


def _series_panel(ax: Any, series: list[tuple[int | None, list[Any]]],
                  fit: CriticalFit | None, pred: Predicted | None
                  ) -> list[tuple[int | None, float, float]]:
    """B_noise over training; returns the (batch, samples, value) points clipped off."""
    drawn = []
    for b, pts in series:
        xs = [p.samples for p in pts if p.b_simple is not None and p.samples is not None]
        ys = [p.b_simple for p in pts if p.b_simple is not None and p.samples is not None]
        line = ax.plot(xs, ys, "o-", ms=3, label=f"batch {b}")[0]
        drawn.append((b, xs, ys, line.get_color()))
    refs = []
    if fit is not None and fit.b_crit is not None:
        ax.axhline(fit.b_crit, color="#d1495b", ls="-", lw=1.5,
                   label=f"fitted critical batch {fit.b_crit:,.0f}")
        refs.append(fit.b_crit)
        if fit.lo is not None and fit.hi is not None:
            ax.axhspan(fit.lo, fit.hi, color="#d1495b", alpha=0.12)
            refs.append(fit.hi)
    if pred is not None:
        ax.axhline(pred.b_noise, color="#444", ls="--", lw=1,
                   label=f"B_noise at the runs' end {pred.b_noise:,.0f} "
                         f"({median_words(pred.runs)} runs)")
        refs.append(pred.b_noise)
    ax.set_xlim(left=0)
    clipped = _clip(ax, drawn, refs)
    if not clipped:
        ax.set_ylim(bottom=0)
    ax.set(xlabel="samples trained", ylabel="B_noise (samples)",
           title="B_noise over training (blocks of steps)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", framealpha=0.6)
    return clipped


def _clip(ax: Any, drawn: list[tuple[int | None, list[float], list[float], str]],
          refs: list[float]) -> list[tuple[int | None, float, float]]:
    """Stop the y axis below values more than ``CLIP_ABOVE`` times the rest (their 90th
    percentile, or the reference lines); each is marked at the top edge with its value."""
    values = sorted(y for _, _, ys, _ in drawn for y in ys if math.isfinite(y))
    if len(values) < 5:
        return []
    base = max([values[int(0.9 * (len(values) - 1))], *refs])
    limit = CLIP_ABOVE * base if base > 0 else math.inf
    out = [(b, x, y, c) for b, xs, ys, c in drawn for x, y in zip(xs, ys, strict=True)
           if y > limit]
    if not out:
        return []
    kept = [v for v in values if v <= limit] + refs
    top = max(kept) * 1.25 if kept else limit
    ax.set_ylim(0, top)
    for _b, x, y, color in out:
        ax.plot([x], [top], "^", color=color, ms=7, clip_on=False)
        ax.annotate(f"{y:,.0f}", (x, top), textcoords="offset points", xytext=(6, -10),
                    fontsize=7, color="#444")
    return [(b, x, y) for b, x, y, _ in out]
