"""The report's figures as PNG bytes (matplotlib's Agg renderer, no display, no pyplot state).

Each function returns PNG bytes, or None when its data is missing, so a section simply
leaves the figure out.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

from scaleprobe import metrics as M
from scaleprobe.report import fmt
from scaleprobe.report.records import dict_of, dicts, num
from scaleprobe.results import BREAKDOWN_PHASES

PHASE_COLOURS = {"data": "#d1495b", "h2d": "#edae49", "forward": "#00798c",
                 "backward": "#30638e", "optimizer": "#66a182", "comm": "#8d6a9f"}
MAX_BARS = 40
MAX_SERIES = 10


def _figure(w_in: float = 9.0, h_in: float = 4.2, ncols: int = 1) -> tuple[Any, Any]:
    # a bare Figure (no pyplot) renders PNG through the Agg canvas and leaves the caller's
    # backend and global state alone
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w_in, h_in), dpi=100, layout="constrained")
    return fig, fig.subplots(1, ncols)


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def _label_points(ax: Any, xs: list[float], ys: list[float], labels: list[str]) -> None:
    for x, y, text in zip(xs, ys, labels, strict=True):
        if text and text != "-":
            ax.annotate(text, (x, y), textcoords="offset points", xytext=(0, 7),
                        ha="center", fontsize=8, color="#444")


def batch_plot(rows: list[dict[str, Any]], title: str) -> bytes | None:
    """Samples/s and peak memory against batch size, each point labelled with its growth."""
    ok = [r for r in rows if r["status"] == "ok" and (r["batch_size"] or 0) > 0]
    if len(ok) < 2:
        return None
    fig, (left, right) = _figure(10.0, 4.0, 2)
    xs = [r["batch_size"] for r in ok]
    sps = [r["samples_per_s"] for r in ok]
    if all(v is not None for v in sps):
        left.plot(xs, sps, "o-", color="#30638e")
        _label_points(left, xs, sps, [fmt.growth(M.growth(b, a)) if i else "-" for i, (a, b)
                                      in enumerate(zip([None, *sps[:-1]], sps, strict=True))])
    left.set(xlabel="batch size", ylabel="samples/s", title="Throughput")
    mem = [r["peak_mem_bytes"] for r in ok]
    if all(v is not None for v in mem):
        gib = [m / fmt.GIB for m in mem]
        right.plot(xs, gib, "o-", color="#d1495b")
        _label_points(right, xs, gib, [fmt.growth(r["mem_growth"]) for r in ok])
        for r in rows:
            if r["status"] == "oom" and (r["batch_size"] or 0) > 0:
                right.axvline(r["batch_size"], color="#b3261e", ls=":", lw=1)
                right.annotate("out of memory", (r["batch_size"], max(gib)), fontsize=8,
                               color="#b3261e", rotation=90, va="top", ha="right")
        right.set_ylim(bottom=0)  # a memory axis from zero: +5% must look like +5%
    right.set(xlabel="batch size", ylabel=f"peak {ok[0]['memory_kind']} memory (GiB)",
              title="Peak memory")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs])
        ax.grid(alpha=0.3)
        ax.margins(y=0.2)
    fig.suptitle(title)
    return _png(fig)


def scale_plot(rows: list[dict[str, Any]]) -> bytes | None:
    """Measured speedup against processes, with the ideal line."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["speedup"] is not None and r["nproc"]:
            groups.setdefault(r["experiment"], []).append(r)
    if not groups or max(len(g) for g in groups.values()) < 2:
        return None
    fig, ax = _figure(7.0, 4.2)
    top = max(r["nproc"] for g in groups.values() for r in g)
    ax.plot([1, top], [1, top], "--", color="#999", label="ideal")
    for eid, g in groups.items():
        xs, ys = [r["nproc"] for r in g], [r["speedup"] for r in g]
        ax.plot(xs, ys, "o-", label=eid)
        _label_points(ax, xs, ys, [fmt.pct(r["efficiency"]) for r in g])
    ticks = sorted({r["nproc"] for g in groups.values() for r in g} | {1})
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.set(xlabel="processes", ylabel="speedup vs 1 process", title="Scaling")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return _png(fig)


def breakdown_plot(labels: list[str], breakdowns: list[dict[str, Any]]) -> bytes | None:
    """Stacked bars of the median step's phases (ms; each phase's share of a typical step
    laid over the median step), one bar per run or configuration."""
    pairs = [(lab, bd) for lab, bd in zip(labels, breakdowns, strict=True)
             if bd and any(isinstance(v, (int, float)) and v > 0 for v in bd.values())]
    if not pairs:
        return None
    pairs = pairs[:MAX_BARS]
    fig, ax = _figure(max(6.0, 1.0 + 0.45 * len(pairs)), 4.6)
    xs = list(range(len(pairs)))
    bottom = [0.0] * len(pairs)
    for phase in BREAKDOWN_PHASES:
        vals = [(bd.get(phase) or 0.0) * 1000 for _, bd in pairs]
        if any(vals):
            ax.bar(xs, vals, bottom=bottom, label=phase, color=PHASE_COLOURS[phase])
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set_xticks(xs, [lab[:28] for lab, _ in pairs], rotation=35, ha="right", fontsize=8)
    ax.set(ylabel="ms per phase of the median step", title="Step-time breakdown (median step)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


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


def utilisation_plot(series: list[tuple[str, dict[str, list[float | None]]]]) -> bytes | None:
    """CPU and (when sampled) GPU utilisation over time, one line per run."""
    series = [(n, c) for n, c in series if any(v is not None for v in c.get("cpu_util_pct", []))]
    if not series:
        return None
    series = series[:MAX_SERIES]
    has_gpu = any(v is not None for _, c in series for v in c.get("gpu_util_pct", []))
    fig, axes = _figure(10.0 if has_gpu else 7.0, 3.8, 2 if has_gpu else 1)
    axes = list(axes) if has_gpu else [axes]
    for ax, col, title in zip(axes, ("cpu_util_pct", "gpu_util_pct"),
                              ("CPU utilisation (all cores)", "GPU utilisation"), strict=False):
        for i, (label, c) in enumerate(series):  # one colour per run in both panels
            pts = [(t, v) for t, v in zip(c["t_s"], c.get(col, []), strict=False)
                   if t is not None and v is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], lw=1.2, label=label[:28],
                        color=f"C{i}")
        ax.set(xlabel="seconds", ylabel="%", title=title, ylim=(0, 105))
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    return _png(fig)


def loader_plot(rows: list[dict[str, Any]]) -> bytes | None:
    """Data wait and compute (h2d + forward + backward + optimizer) per step for each loader setting, stacked, with the
    data-wait fraction on top: a fall in data wait that compute eats shows as a flat bar."""
    ok = [r for r in rows if r["status"] == "ok" and r["data_s"] is not None
          and r["compute_s"] is not None]
    if not ok:
        return None
    ok = ok[:MAX_BARS]
    fig, ax = _figure(max(6.0, 1.5 + 0.7 * len(ok)), 4.4)
    xs = list(range(len(ok)))
    data = [r["data_s"] * 1000 for r in ok]
    comp = [r["compute_s"] * 1000 for r in ok]
    ax.bar(xs, comp, label="compute", color=PHASE_COLOURS["backward"])
    ax.bar(xs, data, bottom=comp, label="data wait", color=PHASE_COLOURS["data"])
    tops = [a + b for a, b in zip(comp, data, strict=True)]
    _label_points(ax, xs, tops, [f"wait {fmt.pct(r['data_wait_fraction'])}" for r in ok])
    multi = len({r["group"] for r in ok}) > 1
    labels = [(f"{r['group']} {r['setting']}" if multi else r["setting"])[:34] for r in ok]
    ax.set_xticks(xs, labels, rotation=30, ha="right", fontsize=8)
    ax.set(ylabel="ms per step", title="Loader settings: data wait vs compute per step")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.margins(y=0.15)
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def colocate_plot(records: list[dict[str, Any]]) -> bytes | None:
    """Slowdown of each job when sharing, grouped by placement."""
    bars = [(f"{j.get('name')} ({r.get('placement') or '?'})", float(j["slowdown"]))
            for r in records for j in dicts(r.get("jobs")) if num(j.get("slowdown")) is not None]
    if not bars:
        return None
    bars = bars[:MAX_BARS]
    fig, ax = _figure(max(5.0, 1.5 + 0.8 * len(bars)), 3.8)
    xs = list(range(len(bars)))
    ax.bar(xs, [b[1] for b in bars], color="#edae49")
    ax.axhline(1.0, color="#999", ls="--", lw=1)
    _label_points(ax, xs, [b[1] for b in bars], [f"{b[1]:.2f}x" for b in bars])
    ax.set_xticks(xs, [b[0][:30] for b in bars], rotation=20, ha="right", fontsize=8)
    ax.set(ylabel="slowdown together vs alone", title="Co-location")
    ax.margins(y=0.15)
    return _png(fig)


def comm_fit_plot(rec: dict[str, Any]) -> bytes | None:
    """Measured time per message size against the fitted alpha + beta * size, per op."""
    rows = [r for r in dicts(rec.get("rows")) if isinstance(r.get("op"), str)
            and (num(r.get("size_bytes")) or 0) > 0 and (num(r.get("time_s")) or 0) > 0]
    if not rows:
        return None
    fig, ax = _figure(7.5, 4.4)
    for op in dict.fromkeys(r["op"] for r in rows):
        pts = sorted((r["size_bytes"], r["time_s"]) for r in rows if r["op"] == op)
        line = ax.plot([p[0] for p in pts], [p[1] * 1e3 for p in pts], "o", label=f"{op} measured")
        fit = dict_of(dict_of(rec.get("fit")).get(op))
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
    return _png(fig)


def comm_prediction_plot(labels: list[str], predicted_s: list[float],
                         measured_s: list[float]) -> bytes | None:
    """Per run: the network model's communication per step against the standalone
    collective measured in the run's process group, on the same link."""
    if not labels:
        return None
    fig, ax = _figure(max(5.5, 1.5 + 0.9 * len(labels)), 4.0)
    xs = list(range(len(labels)))
    w = 0.38
    ax.bar([x - w / 2 for x in xs], [p * 1e3 for p in predicted_s], w, label="predicted",
           color="#8d6a9f")
    ax.bar([x + w / 2 for x in xs], [m * 1e3 for m in measured_s], w,
           label="measured (standalone collective)",
           color="#00798c")
    ax.set_xticks(xs, [lab[:28] for lab in labels], rotation=20, ha="right", fontsize=8)
    ax.set(ylabel="ms per step", title="Communication per step: predicted vs measured")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)
