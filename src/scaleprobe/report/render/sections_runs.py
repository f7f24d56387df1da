"""Report sections about individual runs: the runs table (with why figures are missing),
findings, step-time breakdown, utilisation over time and top operators."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scaleprobe.core import fmt
from scaleprobe.core.result_model import RunResult, num
from scaleprobe.core.run_metrics import BREAKDOWN_PHASES
from scaleprobe.core.thresholds import DEFAULT
from scaleprobe.report.findings.finding import SEVERITIES, Finding
from scaleprobe.report.reading import records as R
from scaleprobe.report.reading import repeats as P
from scaleprobe.report.reading.machine_load import load_cell
from scaleprobe.report.reading.window import step_cell, step_note
from scaleprobe.report.render import plots
from scaleprobe.report.render.doc import Long, Section, Table, Text
from scaleprobe.report.render.labels import distinct_labels

RUN_HEADERS = ["Run", "Experiment", "Model", "Dataset", "Strategy", "World",
               "Batch (device/global)", "Samples/s", "MFU", "Step median", "Step p95", "Data wait",
               "Comm", "Peak host mem", "Peak device mem", "CPU", "GPU", "Outside load",
               "Accuracy", "Status"]
# column -> the metric whose null_reasons entry explains an "n/a" in it
REASON_KEYS = {
    "Samples/s": "samples_per_s", "MFU": "mfu", "Step median": "step_time_s", "Data wait": "data_wait_fraction",
    "Comm": "comm_fraction", "Peak host mem": "peak_mem_bytes.host",
    "Peak device mem": "peak_mem_bytes.device_allocated", "CPU": "cpu_util_pct",
    "GPU": "gpu_util_pct", "Outside load": "outside_cpu_cores", "Accuracy": "accuracy",
}


def _accuracy(rec: RunResult) -> str:
    return rec.task_metric_text(fmt.NA)


def _host_mem(rec: RunResult) -> str:
    """Total peak, and the part above the baseline read before the model was built."""
    pm = rec.metrics.peak_mem_bytes
    total, net = pm.host, pm.host_net
    if total is None or net is None:
        return fmt.bytes_(total)
    return f"{fmt.bytes_(total)} (net {fmt.bytes_(net)})"


def run_cells(rec: RunResult, shared: dict[str, list[str]] | None = None) -> list[str]:
    """One row of the runs table; ``shared``: experiment ids found in several folders."""
    b = rec.batch
    if b.per_device is None and b.global_ is None:
        batch = fmt.num(rec.cfg("train.batch_size"), "d")
    else:
        batch = f"{fmt.num(b.per_device, 'd')}/{fmt.num(b.global_, 'd')}"
    exp = R.exp_label(rec, shared or {})
    m = rec.metrics
    st = m.step_time_s
    return [
        rec.label, f"{exp} ({_point_text(rec)})" if exp else "-",
        str(rec.cfg("model.name") or fmt.NA),
        str(rec.cfg("data.dataset") or fmt.NA), str(rec.cfg("dist.strategy") or fmt.NA),
        fmt.num(rec.world_size, "d"), batch, fmt.rate(m.samples_per_s),
        fmt.mfu(m.mfu),
        step_cell(rec, fmt.duration(rec.step_median_s)),
        fmt.duration(st.p95 if st is not None else None),
        fmt.pct(m.data_wait_fraction), fmt.pct(m.comm_fraction),
        _host_mem(rec), fmt.bytes_(m.peak_mem_bytes.device_peak()),
        fmt.pct_value(m.cpu_util_pct), fmt.pct_value(m.gpu_util_pct),
        load_cell(rec), _accuracy(rec), rec.status_text,
    ]


def _point_text(rec: RunResult) -> str:
    text = fmt.describe_point(rec.point) or "-"
    return text if rec.repeat is None else f"{text}, {fmt.repeat_label(rec.repeat)}"


def missing_notes(runs: list[RunResult], rows: list[list[str]]) -> list[str]:
    """'n/a' explained: one line per (column, reason), naming the runs it applies to."""
    seen: dict[tuple[str, str], list[str]] = {}
    # a failed run that kept the steps before it stopped (partial) has figures of its own
    unfinished = [r.label for r in runs if r.status in ("oom", "failed") and not r.partial]
    for rec, row in zip(runs, rows, strict=True):
        if rec.status in ("oom", "failed") and not rec.partial:
            continue
        for col, cell in zip(RUN_HEADERS, row, strict=True):
            if cell != fmt.NA or col not in REASON_KEYS:
                continue
            reason = rec.null_reason(REASON_KEYS[col])
            if reason is None and col == "Peak device mem" and not rec.env.get("gpus"):
                reason = "no GPU in this run"
            if reason:
                seen.setdefault((col, reason), []).append(rec.label)
    lines = []
    if unfinished:
        who = ", ".join(unfinished) if len(unfinished) <= 4 else f"{len(unfinished)} runs"
        lines.append(f"n/a in runs that did not finish ({who}): no figures were measured")
    for (col, reason), names in seen.items():
        who = ", ".join(names) if len(names) <= 4 else f"{len(names)} runs"
        lines.append(f"n/a in {col}: {reason} ({who})")
    return lines


def rate_notes(runs: list[RunResult], limit: int = 6) -> list[str]:
    """Samples/s of a run with several training ranks: what it sums, and whose step times
    stand beside it (an asynchronous parameter server's workers run at their own pace)."""
    lines = [f"Samples/s of {r.label}: {text}" for r in runs
             if r.status == "ok" and (text := r.rate_definition())]
    if len(lines) > limit:
        lines = lines[:limit] + [f"... and {len(lines) - limit} more runs with several training "
                                 "ranks: samples/s is the sum of their rates (metrics."
                                 "samples_per_s_by_rank)"]
    return lines


# the columns of times: one unit per column (fmt.durations)
TIME_COLUMNS = ("Step median", "Step p95")


def runs_section(runs: list[RunResult]) -> Section | None:
    if not runs:
        return None
    shared = R.shared_ids(runs)
    rows = [run_cells(r, shared) for r in runs]
    for col in TIME_COLUMNS:
        i = RUN_HEADERS.index(col)
        st = [r.metrics.step_time_s for r in runs]
        raw = [(s.median if col == "Step median" else s.p95) if s is not None else None
               for s in st]
        for r, row, cell in zip(runs, rows, fmt.durations(raw), strict=True):
            # the median with its interval and how the window ended (report/reading/window.py)
            row[i] = step_cell(r, cell) if col == "Step median" else cell
    notes = missing_notes(runs, rows) + rate_notes(runs) + [step_note(rows)]
    if any(c.startswith("under load") for row in rows for c in row):
        notes.append("under load: processes outside the run's own process tree kept more than "
                     f"max({DEFAULT.load_cores:g} cores, {DEFAULT.load_machine_fraction:.0%} of "
                     "the machine) busy during its timed window (docs/REPORTS.md); its figures "
                     "may be slower than the machine allows")
    headers, rows, common = split_constant(RUN_HEADERS, rows)
    right = [h not in LEFT_COLUMNS for h in headers]
    s = Section("Runs", anchor="runs")
    if common:
        s.add(Text(common_line(common)))
    s.add(Table(headers, rows, right))
    if notes:
        s.add(Text("\n".join(notes), note=True))
    return s


LEFT_COLUMNS = ("Run", "Experiment", "Model", "Dataset", "Strategy", "World",
                "Batch (device/global)", "Status")
KEEP_CASE = ("MFU", "CPU", "GPU")


def split_constant(headers: list[str], rows: list[list[str]]
                   ) -> tuple[list[str], list[list[str]], list[tuple[str, str]]]:
    """The columns whose cell is the same in every row (of two or more) taken out of the
    table, as (header, value) pairs for one line above it: a 20-column table where model,
    dataset and strategy never change is cut off at the side of a window. The first column
    (the runs' names) stays."""
    if len(rows) < 2:
        return headers, rows, []
    same = [i for i in range(1, len(headers)) if len({row[i] for row in rows}) == 1]
    keep = [i for i in range(len(headers)) if i not in same]
    return ([headers[i] for i in keep], [[row[i] for i in keep] for row in rows],
            [(headers[i], rows[0][i]) for i in same])


def common_line(common: list[tuple[str, str]]) -> str:
    """'All runs: model digits_cnn, dataset digits, status ok; not measured in any: GPU,
    accuracy (why: below the table).' A column of '-' (nothing that applies) is left out."""
    def name(h: str) -> str:
        return h if h in KEEP_CASE else h.lower()

    same = [f"{name(h)} {v}" for h, v in common if v not in (fmt.NA, "-")]
    none = [name(h) for h, v in common if v == fmt.NA]
    parts = (["All runs: " + ", ".join(same)] if same else []) + (
        [f"{'n' if same else 'N'}ot measured in any run: {', '.join(none)} (why: under the "
         "table)"] if none else [])
    return "; ".join(parts) + "." if parts else ""


# a "Next step" cell shows its first words, one line of its column (HTML: at least
# NEXT_STEP_WIDTH wide, ~40 characters); the whole advice (up to nine lines of it) is one
# click away in HTML, in report.html from Markdown
NEXT_STEP_CHARS = 40
NEXT_STEP_WIDTH = "25em"


def findings_section(exp: list[Finding], per_run: list[Finding]) -> Section | None:
    """Findings across runs, then per run (``per_run`` already grouped: one row per verdict
    and next step, report/findings/grouped.py)."""
    if not exp and not per_run:
        return None
    order = {s: i for i, s in enumerate(SEVERITIES)}
    s = Section("Findings", anchor="findings")
    s.add(Text("What limits each run, the numbers that show it, and what to try next. "
               "Thresholds and rules: docs/REPORTS.md."))
    headers = ["Severity", "About", "Verdict", "Evidence", "Next step"]
    for caption, items in (("Across runs", exp), ("Per run", per_run)):
        if items:
            items = sorted(items, key=lambda f: order.get(f.severity, len(order)))
            rows = [[f.severity, Long(f.subject, 160), f.verdict, Long(f.evidence),
                     Long(f.recommendation, NEXT_STEP_CHARS)] for f in items]
            s.add(Table(headers, rows, [False] * 5, caption=caption,
                        min_width={4: NEXT_STEP_WIDTH}))
    return s


def _on_gpu(r: RunResult) -> bool:
    return bool(r.env.get("gpus")) or r.metrics.peak_mem_bytes.device_peak() is not None


def _points(runs: list[RunResult]) -> list[RunResult]:
    """One record per experiment point: its median repeat (a run of no experiment is its own
    point), so repeats do not multiply the bars and panels."""
    return P.group_repeats(runs)


def _total(r: RunResult) -> float | None:
    return r.metrics.breakdown_s.measured_total_s()


def breakdown_section(runs: list[RunResult]) -> Section | None:
    ok = [r for r in _points([r for r in runs if _total(r)]) if _total(r)]
    if not ok:
        return None
    labels = distinct_labels(ok, with_repeat=False)
    gpu = any(_on_gpu(r) for r in ok)
    headers = ["Run", *(fmt.phase_name(p, gpu) for p in BREAKDOWN_PHASES), "Total",
               "Step median", "Repeats"]
    bds = [r.metrics.breakdown_s.phases() for r in ok]
    cols = [fmt.durations([bd[p] for bd in bds]) for p in BREAKDOWN_PHASES]
    cols += [fmt.durations([_total(r) for r in ok]), fmt.durations([r.step_median_s for r in ok])]
    rows = [[lab, *(c[i] for c in cols), str(len(P.repeats_of(r)) or 1)]
            for i, (lab, r) in enumerate(zip(labels, ok, strict=True))]
    s = Section("Step-time breakdown", anchor="breakdown")
    s.add(Text("Time per phase of the median step: each phase keeps its share of a "
               "typical step (its mean over the steps between the 5th and 95th percentile of "
               "step time), laid over the median step time, so the phases add up to Step "
               "median. comm is exposed communication, measured in place. One row (and bar) "
               "per experiment point: its median repeat; Run names what sets it apart."))
    s.add(Table(headers, rows))
    plot = plots.breakdown_plot(labels, bds, gpu)
    s.add(plots.image("breakdown", plot, "stacked step-time breakdown per run"))
    return s


def utilisation_section(runs: list[RunResult], bases: list[Path]) -> Section | None:
    found = []
    for r in _points(runs):
        path = R.find_run_file(r, "monitor_csv", "monitor.csv", bases)
        if path is None:
            continue
        try:
            found.append((r, plots.read_monitor_csv(path)))
        except (OSError, ValueError):
            continue
    labels = distinct_labels([r for r, _ in found], with_repeat=False)
    series = [(lab, cols) for lab, (_, cols) in zip(labels, found, strict=True)]
    plot = plots.utilisation_plot(series)
    if plot is None:
        return None
    s = Section("Utilisation over time", anchor="utilisation")
    shown = len(plot.meta["axes"])
    of = f"the first {shown} of {len(series)}" if shown < len(series) else f"{shown}"
    s.add(Text(f"From each run's monitor.csv: one panel per experiment point ({of}; each "
               "point's median repeat), on one 0-100% scale. CPU utilisation is the average over "
               "all cores; GPU utilisation appears when NVML was sampled."))
    s.add(plots.image("utilisation", plot, "CPU and GPU utilisation over time, one panel per run"))
    return s


def _top_ops(rec: RunResult, bases: list[Path]) -> list[dict[str, Any]] | None:
    ops = rec.paths.get("top_ops")
    if isinstance(ops, str):
        path = R.find_run_file(rec, "top_ops", Path(ops).name, bases)
        if path is None:
            return None
        try:
            ops = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            return None
    if not isinstance(ops, list):
        return None
    return [o for o in ops if isinstance(o, dict) and o.get("name")]


def top_ops_section(runs: list[RunResult], bases: list[Path], limit: int = 15) -> Section | None:
    s = Section("Top operators", anchor="top-ops")
    for r in runs:
        ops = _top_ops(r, bases)
        if not ops:
            continue
        ops = sorted(ops, key=lambda o: -(num(o.get("self_time_ms")) or 0))[:limit]
        total = sum(num(o.get("self_time_ms")) or 0 for o in ops) or None
        rows = [[str(o["name"]), fmt.num(o.get("self_time_ms"), ".2f"),
                 fmt.pct((num(o.get("self_time_ms")) or 0) / total if total else None),
                 fmt.num(o.get("calls"), "d")] for o in ops]
        s.add(Table(["Operator", "Self time (ms)", "Share of listed", "Calls"], rows,
                    caption=f"{r.label} (profiler capture)"))
    return s if s.blocks else None
