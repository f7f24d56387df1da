"""The report's figures (matplotlib's Agg renderer, no display, no pyplot state).

Each function returns a ``Plot`` (PNG bytes and what the figure shows: every panel's title,
axis labels and ranges, tick labels, point labels, and where its text landed), or None when
its data is missing, so a section simply leaves the figure out. The HTML report writes that
description beside the image, so a test can check that no memory axis starts above zero and
that no label was cut.

Rules every figure follows: an axis of memory or time starts at zero (+5% must look like
+5%); a label is never cut (categories are labelled with what varies between them, wrapped,
and the figure grows to hold them); a figure holds what its title says.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scaleprobe.core import fmt
from scaleprobe.core import metrics as M
from scaleprobe.core.experiment_records import ColocateRecord, CommBenchRecord
from scaleprobe.core.result_model import dict_of, dicts, num
from scaleprobe.core.run_metrics import BREAKDOWN_PHASES
from scaleprobe.core.run_parts import TimeToTarget
from scaleprobe.features.target import LOWER_IS_BETTER
from scaleprobe.report.reading import machine_load as L
from scaleprobe.report.reading import repeats as P
from scaleprobe.report.render.doc import Image
from scaleprobe.report.render.labels import wrap
from scaleprobe.report.tables import batch as B
from scaleprobe.report.tables.rows import BatchRow, LoaderRow, ScaleRow

PHASE_COLOURS = {"data": "#d1495b", "h2d": "#edae49", "forward": "#00798c",
                 "backward": "#30638e", "optimizer": "#66a182", "comm": "#8d6a9f"}
MAX_BARS = 40
MAX_PANELS = 12  # small multiples of the utilisation figure
DPI = 100
CHAR_IN = 0.075  # width of one character of an 8 pt tick label, inches (generous)
MAX_WIDTH_IN = 18.0


@dataclass(frozen=True)
class Plot:
    png: bytes
    meta: dict[str, Any]  # what the figure shows: see _meta


def image(name: str, plot: Plot | None, alt: str) -> Image | None:
    """The figure as a report block (None stays None: ``Section.add`` skips it)."""
    return None if plot is None else Image(name, plot.png, alt, plot.meta)


def _figure(w_in: float = 9.0, h_in: float = 4.2, ncols: int = 1, nrows: int = 1,
            **kw: Any) -> tuple[Any, Any]:
    # a bare Figure on its own Agg canvas (no pyplot) leaves the caller's backend and global
    # state alone, and keeps the renderer that placed the text, for _meta
    # heavy: matplotlib: only where a figure is drawn
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w_in, h_in), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(nrows, ncols, **kw)


def _render(fig: Any) -> Plot:
    """The figure drawn once: its pixels encoded as PNG, and where its text landed."""
    # heavy: matplotlib: only where a figure is drawn
    from matplotlib.image import imsave

    fig.canvas.draw()
    buf = io.BytesIO()
    no_software: dict[str, Any] = {"Software": None}  # None drops matplotlib's own entry
    imsave(buf, fig.canvas.buffer_rgba(), format="png", dpi=fig.dpi, metadata=no_software)
    return Plot(buf.getvalue(), _meta(fig))


def _extents(bb: Any) -> list[float]:
    return [round(float(v), 1) for v in bb.extents]


def _meta(fig: Any) -> dict[str, Any]:
    """Per visible panel: title, axis labels and ranges, tick and point labels, the box of
    each x tick label and the box that holds all its drawn text (pixels, origin bottom
    left); ``content``: the box of everything drawn. A label is cut when a box leaves
    ``[0, width] x [0, height]``; two tick labels run into each other when theirs overlap."""
    renderer = fig.canvas.get_renderer()
    axes = []
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        axes.append({
            "title": ax.get_title(), "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
            "xlim": [float(v) for v in ax.get_xlim()], "ylim": [float(v) for v in ax.get_ylim()],
            "xscale": ax.get_xscale(), "yscale": ax.get_yscale(),
            "xticklabels": [t.get_text() for t in ax.get_xticklabels() if t.get_text()],
            "xtickboxes": [_extents(t.get_window_extent(renderer))
                           for t in ax.get_xticklabels() if t.get_text()],
            "points": [t.get_text() for t in ax.texts],
            "legend": ([t.get_text() for t in ax.get_legend().get_texts()]
                       if ax.get_legend() is not None else []),
            "bbox": _extents(ax.get_tightbbox(renderer)),
        })
    content = fig.get_tightbbox(renderer)  # inches
    return {"width": round(fig.bbox.width), "height": round(fig.bbox.height),
            "suptitle": fig.get_suptitle(), "axes": axes,
            "content": [round(v * fig.dpi, 1) for v in content.extents]}


def _label_points(ax: Any, xs: Sequence[float | None], ys: Sequence[float | None],
                  labels: list[str]) -> None:
    for x, y, text in zip(xs, ys, labels, strict=True):
        if text and text != "-":
            ax.annotate(text, (x, y), textcoords="offset points", xytext=(0, 7),
                        ha="center", fontsize=8, color="#444")


def _from_zero(ax: Any, values: Sequence[float | None], headroom: float = 1.25) -> None:
    """The y axis from zero to the largest value plus room for the point labels."""
    top = max([v for v in values if v is not None and math.isfinite(v)] or [1.0])
    ax.set_ylim(0, top * headroom if top > 0 else 1.0)


def _categories(ax: Any, labels: list[str]) -> tuple[float, float]:
    """Tick labels for bars, wrapped, never cut. Returns the figure width they need and the
    height to add below the plot (inches); too many to stand side by side: turned upright."""
    wrapped = [wrap(lab) for lab in labels]
    lines = [line for w in wrapped for line in w.splitlines()] or ["????"]
    longest = max(len(line) for line in lines)
    per = max(0.55, CHAR_IN * longest + 0.2)
    xs = list(range(len(labels)))
    if 2.2 + per * len(labels) <= MAX_WIDTH_IN:
        ax.set_xticks(xs, wrapped, fontsize=8)
        depth = max(len(w.splitlines()) for w in wrapped) if wrapped else 1
        return max(6.0, 2.2 + per * len(labels)), 0.14 * depth
    upright = [wrap(lab, 40) for lab in labels]
    ax.set_xticks(xs, upright, fontsize=8, rotation=90)
    longest = max(len(line) for w in upright for line in w.splitlines())
    lines_per = max(len(w.splitlines()) for w in upright)
    return max(6.0, 2.2 + 0.16 * lines_per * len(labels)), CHAR_IN * longest


def _gib_or_mib(values: Sequence[float | None]) -> tuple[float, str]:
    top = max(v for v in values if v is not None)
    return (fmt.GIB, "GiB") if top >= fmt.GIB else (1 << 20, "MiB")


def batch_plot(rows: list[BatchRow], title: str) -> Plot | None:
    """The two figures of the batch table beside it, against batch size: epoch time (each
    point labelled with the table's epoch-time Growth; faint dots: every repeat) and peak
    memory (labelled with the table's memory Growth). Both axes start at zero."""
    ok = [r for r in rows if r["status"] == "ok" and (r["batch_size"] or 0) > 0]
    if len(ok) < 2:
        return None
    fig, (left, right) = _figure(10.0, 4.2, 2)
    xs = [r["batch_size"] or 0 for r in ok]  # every one above 0
    _epoch_panel(left, ok, xs)
    ooms = [r["batch_size"] or 0 for r in rows
            if r["status"] == "oom" and (r["batch_size"] or 0) > 0]
    _memory_panel(right, ok, xs, ooms)
    ticks = sorted(set(xs) | set(ooms))
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(x) for x in ticks])
        ax.minorticks_off()
        ax.set_xlabel("batch size")
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    return _render(fig)


def _epoch_panel(ax: Any, ok: list[BatchRow], xs: list[int]) -> None:
    epochs = [B.shown_epoch(r) for r in ok]  # the table's figures, on the group's basis
    if all(e is not None for e in epochs):
        every: list[float] = []
        for r in ok:
            reps = P.values(r["record"], B.shown_epoch_figure(r))
            every += reps
            ax.plot([r["batch_size"]] * len(reps), reps, ".", color="#9bb3d1", ms=6, zorder=1,
                    label="each repeat" if r is ok[0] else None)
        ax.plot(xs, epochs, "o-", color="#30638e", label="the table's row (median repeat)")
        _label_points(ax, xs, epochs, [fmt.growth(r["epoch_growth"]
                                                  if r.get("epoch_shown_growth") is None
                                                  else r.get("epoch_shown_growth"))
                                       for r in ok])  # as the table's Growth cell begins
        projected = any(r["epoch_projected"] or r.get("epoch_basis") in ("projected", "window", B.SAME_SAMPLES)
                        for r in ok)
        ax.set(ylabel="epoch time (s)" + (", ~ projected" if projected else ""),
               title="Epoch time, labelled with its Growth")
        _from_zero(ax, [*epochs, *every])
        ax.legend(fontsize=7, loc="lower left")
        return
    sps = [r["samples_per_s"] for r in ok]  # no epoch time: the table's Samples/s column
    if all(v is not None for v in sps):
        ax.plot(xs, sps, "o-", color="#30638e")
        _label_points(ax, xs, sps, [fmt.rate(v) for v in sps])
        _from_zero(ax, sps)
    ax.set(ylabel="samples/s", title="Samples/s")


def _memory_panel(ax: Any, ok: list[BatchRow], xs: list[int], ooms: list[int]) -> None:
    mem = [r["peak_mem_bytes"] for r in ok]
    kind = ok[0]["memory_kind"]
    net = kind == "host" and any(r.get("peak_host_total_bytes") not in (None, r["peak_mem_bytes"])
                                 for r in ok)
    unit_div: float = fmt.GIB
    unit = "GiB"
    if all(v is not None for v in mem):
        unit_div, unit = _gib_or_mib(mem)
        ys = [(m or 0.0) / unit_div for m in mem]  # every one set
        ax.plot(xs, ys, "o-", color="#d1495b")
        _label_points(ax, xs, ys, [fmt.growth(r["mem_growth"]) for r in ok])
        _from_zero(ax, ys)  # a memory axis from zero: +5% must look like +5%
        for b in ooms:
            ax.axvline(b, color="#b3261e", ls=":", lw=1)
            ax.annotate("out of memory", (b, ax.get_ylim()[1]), fontsize=8, color="#b3261e",
                        rotation=90, va="top", ha="right")
    else:
        ax.set_ylim(bottom=0)
    what = f"peak {kind} memory" + (", net of the baseline" if net else "")
    ax.set(ylabel=f"{what} ({unit})", title="Peak memory, labelled with its Growth")


def scale_plot(rows: list[ScaleRow]) -> Plot | None:
    """The paired speedup against processes (the table's Paired speedup column: the figure
    every verdict uses, not the Speedup column's ratio of the Samples/s shown), each point
    labelled with the table's Paired efficiency, with the ideal line. A point whose runs (of
    it or its baseline: the speedup claim's sources) were measured under load is drawn
    hollow, with a legend entry."""
    groups: dict[str, list[ScaleRow]] = {}
    for r in rows:
        if r["speedup"] is not None and r["nproc"]:
            groups.setdefault(r["experiment"], []).append(r)
    if not groups or max(len(g) for g in groups.values()) < 2:
        return None
    fig, ax = _figure(7.0, 4.2)
    top = max(r["nproc"] or 0 for g in groups.values() for r in g)  # every one set
    bases = sorted({r.get("base_nproc") or 1 for g in groups.values() for r in g})
    for b in bases:  # perfect scaling from each baseline: N / B at N processes
        ax.plot([b, top], [1, M.ideal_speedup(top, b)], "--", color="#999",
                label="ideal" if bases == [1] else f"ideal from {b}")
    any_loaded = False
    for eid, g in groups.items():
        xs, ys = [r["nproc"] for r in g], [r["speedup"] for r in g]
        colour = ax.plot(xs, ys, "-", label=eid)[0].get_color()
        loaded = [_scale_loaded(r) for r in g]
        for hollow in (False, True):
            pts = [(x, y) for x, y, flag in zip(xs, ys, loaded, strict=True) if flag == hollow]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], "o", color=colour,
                        mfc="white" if hollow else colour, mew=1.5)
        any_loaded = any_loaded or any(loaded)
        _label_points(ax, xs, ys, [fmt.pct(r["efficiency"]) for r in g])
    if any_loaded:
        ax.plot([], [], "o", color="#444", mfc="white", mew=1.5, label=LOADED_LABEL)
    ticks = sorted({r["nproc"] or 0 for g in groups.values() for r in g} | set(bases))
    ax.set_xticks(ticks, [str(t) for t in ticks])
    against = "1 process" if bases == [1] else "the smallest count measured"
    ax.set(xlabel="processes", ylabel=f"paired speedup vs {against}",
           title="Scaling: paired speedup (points labelled with their paired efficiency)")
    _from_zero(ax, [M.ideal_speedup(top, bases[0])]
               + [r["speedup"] for g in groups.values() for r in g], 1.15)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return _render(fig)


LOADED_LABEL = "measured under load"  # the legend entry of a hollow point


def _scale_loaded(row: ScaleRow) -> bool:
    """Was any run behind the row's point measured under load? The speedup claim's sources
    (every repeat of the point and its baseline); the baseline's row: its own repeats."""
    claim = row.get("claim")
    if claim is not None:
        return claim.under_load
    return any(s.under_load for s in L.sources([row["record"]]))


BREAKDOWN_TITLE = "Median step split by phase (ms): each phase keeps its share of a typical step"


def breakdown_plot(labels: list[str], breakdowns: list[dict[str, Any]],
                   gpu: bool = True) -> Plot | None:
    """Stacked bars of the median step's phases (ms; each phase's share of a typical step
    laid over the median step), one bar per label; the labels must tell the bars apart
    (``labels.distinct_labels``)."""
    pairs = [(lab, bd) for lab, bd in zip(labels, breakdowns, strict=True)
             if bd and any(isinstance(v, (int, float)) and v > 0 for v in bd.values())]
    if not pairs:
        return None
    pairs = pairs[:MAX_BARS]
    fig, ax = _figure(6.0, 4.2)
    xs = list(range(len(pairs)))
    bottom = [0.0] * len(pairs)
    for phase in BREAKDOWN_PHASES:
        vals = [(bd.get(phase) or 0.0) * 1000 for _, bd in pairs]
        if any(vals):
            ax.bar(xs, vals, bottom=bottom, label=fmt.phase_name(phase, gpu),
                   color=PHASE_COLOURS[phase])
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    w, extra = _categories(ax, [lab for lab, _ in pairs])
    fig.set_size_inches(w, 4.2 + extra)
    ax.set(ylabel="ms per step", title=BREAKDOWN_TITLE)
    ax.title.set_fontsize(10)
    _from_zero(ax, bottom, 1.1)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(axis="y", alpha=0.3)
    return _render(fig)


def read_monitor_csv(path: Path) -> dict[str, list[float | None]]:
    """monitor.csv as columns; empty cells are None, times start at 0."""
    cols: dict[str, list[float | None]] = {}
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            for k, v in row.items():
                try:
                    cols.setdefault(k, []).append(float(v) if v not in ("", None) else None)
                except ValueError:
                    cols.setdefault(k, []).append(None)
    t = cols.get("t_s") or []
    t0 = next((x for x in t if x is not None), 0.0)
    cols["t_s"] = [None if x is None else x - t0 for x in t]
    return cols


def _has(c: dict[str, list[float | None]], col: str) -> bool:
    return any(v is not None for v in c.get(col, []))


def utilisation_plot(series: list[tuple[str, dict[str, list[float | None]]]]) -> Plot | None:
    """Small multiples: one panel per run (at most ``MAX_PANELS``), CPU utilisation of all
    cores and, when sampled, GPU utilisation, on one 0-100% scale; each panel titled with
    what sets its run apart."""
    series = [(n, c) for n, c in series if _has(c, "cpu_util_pct")][:MAX_PANELS]
    if not series:
        return None
    has_gpu = any(_has(c, "gpu_util_pct") for _, c in series)
    ncols = min(3, len(series))
    nrows = math.ceil(len(series) / ncols)
    fig, axes = _figure(3.4 * ncols, 0.8 + 2.3 * nrows, ncols, nrows, sharey=True,
                        squeeze=False)
    flat = list(axes.ravel())
    for i, ax in enumerate(flat):
        if i >= len(series):
            ax.set_visible(False)
            continue
        label, c = series[i]
        for col, colour, name in (("cpu_util_pct", "#30638e", "CPU (all cores)"),
                                  ("gpu_util_pct", "#d1495b", "GPU")):
            pts = [(t, v) for t, v in zip(c["t_s"], c.get(col, []), strict=False)
                   if t is not None and v is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], lw=1.2, color=colour,
                        label=name)
        ax.set_title(wrap(label, 34), fontsize=8)
        ax.set_ylim(0, 105)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
        if i % ncols == 0:
            ax.set_ylabel("%", fontsize=8)
        if i + ncols >= len(series):
            ax.set_xlabel("seconds", fontsize=8)
    what = "CPU (all cores) and GPU utilisation" if has_gpu else "CPU utilisation (all cores)"
    fig.suptitle(f"{what} over each run", fontsize=10)
    if has_gpu:
        fig.legend(*flat[0].get_legend_handles_labels(), loc="outside upper right", fontsize=8)
    return _render(fig)


def loader_plot(rows: list[LoaderRow]) -> Plot | None:
    """Data wait and compute (h2d + forward + backward + optimizer) per step for each loader
    setting, stacked (each the median over the setting's repeats, as the table's), labelled
    with the data wait's share of the bar drawn: data wait / (data wait + compute). Not the
    table's Data wait column, the median of each repeat's share of its whole step, which
    holds communication too and can differ from it. A fall in data wait that compute eats
    shows as a flat bar."""
    ok = [r for r in rows if r["status"] == "ok" and r["data_s"] is not None
          and r["compute_s"] is not None]
    if not ok:
        return None
    ok = ok[:MAX_BARS]
    fig, ax = _figure(6.0, 4.4)
    xs = list(range(len(ok)))
    data = [(r["data_s"] or 0.0) * 1000 for r in ok]  # every one set (above)
    comp = [(r["compute_s"] or 0.0) * 1000 for r in ok]
    ax.bar(xs, comp, label="compute", color=PHASE_COLOURS["backward"])
    ax.bar(xs, data, bottom=comp, label="data wait", color=PHASE_COLOURS["data"])
    tops = [a + b for a, b in zip(comp, data, strict=True)]
    # the share the bar shows, from the two figures it stacks
    _label_points(ax, xs, tops, [f"wait {fmt.pct(d / t)} of bar" if t > 0 else "-"
                                 for d, t in zip(data, tops, strict=True)])
    multi = len({r["group"] for r in ok}) > 1
    w, extra = _categories(ax, [(f"{r['group']}, {r['setting']}" if multi else r["setting"])
                                for r in ok])
    fig.set_size_inches(w, 4.4 + extra)
    ax.set(ylabel="ms per step", title="Loader settings: data wait vs compute per step\n"
                                       "labelled: data wait / (data wait + compute)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    _from_zero(ax, tops)
    ax.grid(axis="y", alpha=0.3)
    return _render(fig)


def colocate_plot(records: list[ColocateRecord]) -> Plot | None:
    """Slowdown of each job when sharing, grouped by placement."""
    bars = [(f"{j.get('name')} ({r.placement or '?'})", float(j["slowdown"]))
            for r in records for j in dicts(r.jobs) if num(j.get("slowdown")) is not None]
    if not bars:
        return None
    bars = bars[:MAX_BARS]
    fig, ax = _figure(5.0, 3.8)
    xs = list(range(len(bars)))
    ax.bar(xs, [b[1] for b in bars], color="#edae49")
    ax.axhline(1.0, color="#999", ls="--", lw=1)
    _label_points(ax, xs, [b[1] for b in bars], [f"{b[1]:.2f}x" for b in bars])
    w, extra = _categories(ax, [b[0] for b in bars])
    fig.set_size_inches(max(5.0, w - 1.0), 3.8 + extra)
    ax.set(ylabel="slowdown together vs alone", title="Co-location")
    _from_zero(ax, [b[1] for b in bars])
    return _render(fig)


def comm_fit_plot(rec: CommBenchRecord) -> Plot | None:
    """Measured time per message size against the fitted alpha + beta * size, per op."""
    rows = [r for r in dicts(rec.rows) if isinstance(r.get("op"), str)
            and (num(r.get("size_bytes")) or 0) > 0 and (num(r.get("time_s")) or 0) > 0]
    if not rows:
        return None
    fig, ax = _figure(7.5, 4.4)
    for op in dict.fromkeys(r["op"] for r in rows):
        pts = sorted((r["size_bytes"], r["time_s"]) for r in rows if r["op"] == op)
        line = ax.plot([p[0] for p in pts], [p[1] * 1e3 for p in pts], "o", label=f"{op} measured")
        fit = dict_of(rec.fit.get(op))
        alpha, beta = num(fit.get("alpha_s")), num(fit.get("beta_s_per_byte"))
        if alpha is not None and beta is not None:
            lo, hi = math.log10(pts[0][0]), math.log10(pts[-1][0])
            xs = [10 ** (lo + (hi - lo) * i / 40) for i in range(41)]
            ys = [(alpha + beta * x) * 1e3 for x in xs]
            ax.plot(xs, ys, "-", color=line[0].get_color(), alpha=0.6, label=f"{op} predicted")
    ax.set(xscale="log", yscale="log", xlabel="message size (bytes)", ylabel="ms",
           title="Communication: measured vs predicted (alpha + beta * size)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return _render(fig)


def comm_prediction_plot(labels: list[str], predicted_s: list[float],
                         measured_s: list[float]) -> Plot | None:
    """Per run: the network model's communication per step against the standalone
    collective measured in the run's process group, on the same link."""
    if not labels:
        return None
    fig, ax = _figure(5.5, 4.0)
    xs = list(range(len(labels)))
    w = 0.38
    ax.bar([x - w / 2 for x in xs], [p * 1e3 for p in predicted_s], w, label="predicted",
           color="#8d6a9f")
    ax.bar([x + w / 2 for x in xs], [m * 1e3 for m in measured_s], w,
           label="measured (standalone collective)", color="#00798c")
    width, extra = _categories(ax, labels)
    fig.set_size_inches(max(5.5, width), 4.0 + extra)
    ax.set(ylabel="ms per step", title="Communication per step: predicted vs measured")
    _from_zero(ax, [p * 1e3 for p in predicted_s] + [m * 1e3 for m in measured_s], 1.3)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _render(fig)


def curve_plot(series: list[tuple[str, TimeToTarget]], target: float | None,
               metric: str) -> Any:
    """The metric against training wall clock (evaluation excluded), one line per
    configuration (its curve, from the run's ``target`` block), the target as a horizontal
    line. None when no series has two points."""
    drawn = [(label, tt.curve) for label, tt in series]
    drawn = [(label, [c for c in cv if c.get("value") is not None]) for label, cv in drawn]
    drawn = [(label, cv) for label, cv in drawn if cv]
    if not drawn:
        return None
    fig, ax = _figure(7.5, 4.2)
    for label, cv in drawn:
        ax.plot([c["train_wall_s"] for c in cv], [c["value"] for c in cv], "o-", label=label,
                ms=4)
    if target is not None:
        ax.axhline(target, ls="--", color="#d1495b", label=f"target {target:g}")
    ax.set(xlabel="training wall clock (s, evaluation excluded)", ylabel=metric,
           title=f"{metric} against training time")
    ax.set_xlim(left=0)  # training starts at 0 s: the lines compare from there
    ax.grid(alpha=0.3)
    # the curves rise to a target of accuracy, fall to one of loss: the legend where they leave
    ax.legend(fontsize=8, loc="upper right" if metric in LOWER_IS_BETTER else "lower right")
    return _render(fig)
