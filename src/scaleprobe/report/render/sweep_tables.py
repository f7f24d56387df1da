"""A sweep's tables: batch size (memory, epoch time, their growth), loader settings (data wait,
compute per step), or every point; printed at the end and written as sweep.md / sweep.csv.

The batch-size and loader analysis and the recommendations come from ``report/tables/batch.py``,
``report/tables/batch_rule.py`` and ``report/tables/workers.py``; this module only chooses which tables a
sweep gets and lays them out. A sweep renders nothing itself: the commands hand
``write_tables`` to ``run_sweep``, which calls it at the end (and with ``partial=True`` when
the sweep is stopped), and records the recommendation it returns in the sweep record.
``sweep.csv`` holds the batch rows (raw figures, growth as fractions) for a batch sweep, else
one row per point.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from scaleprobe.config.sections import BATCH_KEYS
from scaleprobe.core import fmt
from scaleprobe.core import metrics as M
from scaleprobe.core.experiment_records import SkippedPoint, SweepRecord
from scaleprobe.core.record import Record
from scaleprobe.core.result_model import Experiment, RunResult, dict_of
from scaleprobe.core.traits import known
from scaleprobe.report.reading import repeats as P
from scaleprobe.report.reading.machine_load import under_load_line
from scaleprobe.report.tables import batch as B
from scaleprobe.report.tables import batch_rule as BR
from scaleprobe.report.tables import scale as S
from scaleprobe.report.tables import workers as W
from scaleprobe.report.tables.rows import BatchRow, LoaderRow


class Axis(Protocol):
    """What a table needs of one of the spec's axes (``experiments.spec.Axis``)."""

    @property
    def key(self) -> str: ...  # the full dotted config key, e.g. train.batch_size

    @property
    def label(self) -> str: ...  # as the spec wrote it, e.g. batch_size


class Spec(Protocol):
    """What the tables need of a sweep's spec (``experiments.spec.SweepSpec``)."""

    @property
    def sweep_id(self) -> str: ...

    @property
    def axes(self) -> Sequence[Axis]: ...

    @property
    def dropped(self) -> list[str]: ...  # the grid's invalid combinations, left out


LOADER_KEYS = ("data.loader", "data.workers", "data.prefetch", "data.transform")
POINT_HEADERS = ("status", "samples/s", "MFU", "step median", "epoch time", "peak host mem",
                 "peak device mem", "data wait", "CPU util", "GPU util", "metric",
                 "shard audit")
POINT_CSV = ("status", "samples_per_s", "achieved_flops_per_s", "mfu", "step_time_median_s", "epoch_time_s",
             "epoch_time_projected", "peak_host_mem_bytes", "peak_device_mem_bytes",
             "state_bytes_per_rank", "data_wait_fraction", "cpu_util_pct", "gpu_util_pct", "metric_name", "metric",
             "audit_ok", "speedup", "speedup_lo", "speedup_hi", "repeats", "run_id", "error")


def _point(rec: RunResult) -> dict[str, Any]:
    """The point as the spec names its axes (``train.batch_size`` where it said so)."""
    return dict_of(rec.experiment.point if rec.experiment is not None else None)


def _peak_device(rec: RunResult) -> Any:
    pm = rec.metrics.peak_mem_bytes
    return pm.device_allocated or pm.device_nvml


def _audit_text(rec: RunResult) -> str:
    if rec.audit is None:
        return "-"
    return "ok" if rec.audit.ok else "FAILED"


def baselines(records: list[RunResult], labels: list[str]) -> dict[int, RunResult]:
    """When ``nproc`` is an axis: each point's 1-process point of the same other axes (the
    baseline's own: itself), ``{id(record): baseline}`` for the records of
    ``group_repeats``; only points that finished, with a baseline that finished."""
    if "nproc" not in labels:
        return {}
    others = [k for k in labels if k not in ("nproc", "nnodes")]
    base = {tuple(repr(_point(r).get(k)) for k in others): r for r in records
            if _point(r).get("nproc") == 1 and _point(r).get("nnodes", 1) == 1
            and r.status == "ok"}
    out: dict[int, RunResult] = {}
    for r in records:
        b = base.get(tuple(repr(_point(r).get(k)) for k in others))
        if b is not None and (r is b or r.status == "ok"):
            out[id(r)] = b
    return out


def speedups(records: list[RunResult], labels: list[str]) -> dict[int, Any]:
    """When ``nproc`` is an axis: each point's samples/s against the 1-process point that
    shares its other axes, over the paired repeats (measured both, never extrapolated).
    ``{id(record): metrics.Interval}`` for the records of ``group_repeats``."""
    base = baselines(records, labels)
    out: dict[int, Any] = {}
    for r in records:
        b = base.get(id(r))
        if b is None:
            continue
        if r is b:
            out[id(r)] = "baseline"
        else:
            iv = P.interval(b, r, P.sps_of)
            if iv is not None:
                out[id(r)] = iv
    return out


def _raw_row(rec: RunResult, speedup: Any = None) -> list[Any]:
    m = rec.metrics
    found = rec.task_metric()
    return [rec.status, m.samples_per_s, m.achieved_flops_per_s, m.mfu, rec.step_median_s,
            m.epoch_time_s, m.epoch_time_projected, m.peak_mem_bytes.host,
            _peak_device(rec), _state_total(rec), m.data_wait_fraction, m.cpu_util_pct,
            m.gpu_util_pct,
            found[0] if found else None, found[1] if found else None,
            rec.audit.ok if rec.audit is not None else None,
            *_speedup_raw(speedup), len(P.repeats_of(rec)), rec.run_id, rec.error]


def _speedup_raw(iv: Any) -> tuple[Any, Any, Any]:
    if iv == "baseline":
        return 1.0, 1.0, 1.0
    return (None, None, None) if iv is None else (iv.estimate, iv.lo, iv.hi)


def _pretty_row(rec: RunResult) -> list[str]:
    m = rec.metrics
    status = {"oom": "out of memory"}.get(rec.status, rec.status)
    return [str(status), fmt.rate(m.samples_per_s), fmt.mfu(m.mfu), fmt.duration(rec.step_median_s),
            fmt.duration(*rec.shown_epoch()),  # on the samples/s' basis: they multiply out
            fmt.bytes_(m.peak_mem_bytes.host), fmt.bytes_(_peak_device(rec)),
            fmt.pct(m.data_wait_fraction), fmt.pct_value(m.cpu_util_pct),
            fmt.pct_value(m.gpu_util_pct), rec.task_metric_text("-"), _audit_text(rec)]


SPEEDUP_HEADERS = ("speedup", "paired speedup")
SPEEDUP_NOTE = ("speedup = the row's samples/s / the samples/s shown for the 1-process point "
                "of the same other axes (each point's median repeat): the ratio of the "
                "column. paired speedup = the geometric mean of the repeats' paired ratios "
                "(repeat i with repeat i), with its 95% interval and what it decides: the "
                "figure to act on; it differs from the ratio of the column where the "
                "repeats' ratios differ.")


def points_table(records: list[RunResult], skipped: list[SkippedPoint],
                 labels: list[str]) -> dict[str, Any]:
    """Every point (its median repeat): its axes, then its figures (skipped points say why);
    with a ``nproc`` axis also the speedup against the 1-process point of the same other
    axes twice, each what its header says: ``speedup``, the ratio of the samples/s shown
    (what a reader dividing the column gets), and ``paired speedup``, the claim over the
    paired repeats (core/claim.py: its interval and its state, "inconclusive (1 repeat)",
    "not resolved", under load, not like for like, implausible), as scale.md's columns."""
    records = P.group_repeats(records)
    sp = speedups(records, labels)
    base = baselines(records, labels) if sp else {}
    state = _shows_state(records)
    extra = list(SPEEDUP_HEADERS) * bool(sp) + ["state/rank"] * state
    rows = [[_point(r).get(k) for k in labels] + _pretty_row(r)
            + (_speedup_cells(r, base.get(id(r)), sp.get(id(r))) if sp else [])
            + ([fmt.bytes_(_state_total(r))] if state else [])
            for r in records]
    width = len(POINT_HEADERS) - 1 + len(extra)
    rows += [[s.point.get(k) for k in labels] + [s.reason] + [""] * width for s in skipped]
    return {"title": "All points", "headers": [*labels, *POINT_HEADERS, *extra], "rows": rows,
            **({"notes": [SPEEDUP_NOTE]} if sp else {})}


def _state_total(rec: RunResult) -> int | None:
    sb = rec.metrics.state_bytes
    return sb.total_bytes if sb is not None else None


def _shows_state(records: list[RunResult]) -> bool:
    """A sweep with a strategy that shards the training state (fsdp) shows the parameters +
    gradients + optimizer state each rank holds (the largest rank's), beside its peak."""
    return any((tr := known(r.cfg("dist.strategy"))) is not None and tr.shards_state
               for r in records)


def _world(rec: RunResult) -> Any:
    """The point's processes in all (per node times nodes), for the plausibility bound."""
    n, k = _point(rec).get("nproc"), _point(rec).get("nnodes", 1)
    return n * k if isinstance(n, int) and isinstance(k, int) else n


def _speedup_cells(rec: RunResult, base: RunResult | None, iv: Any) -> list[str]:
    """``[speedup, paired speedup]`` of a point against its 1-process point ``base``: the
    ratio of the two samples/s shown, and the paired speedup as a claim (``iv``: its
    interval over the paired repeats; ``"baseline"`` on the baseline's own row). Either says
    "under load" where a run of either point was measured under load."""
    if iv == "baseline":
        return ["1.00x (baseline)", "1.00x"]
    column = (M.speedup(rec.metrics.samples_per_s, base.metrics.samples_per_s)
              if base is not None else None)
    if iv is None or base is None:
        return [fmt.ratio(column) if column is not None else fmt.NA, fmt.NA]
    n = _world(rec)
    n = n if isinstance(n, int) else None
    claim = S.paired_claim(fmt.describe_point(_point(rec)) or rec.label, iv.estimate, iv,
                           base, rec)
    paired = S.paired_cell(iv.estimate, claim, not M.plausible_speedup(iv.estimate, n),
                           bool(S.unlike_settings(rec, base)))
    col = fmt.ratio(column) if column is not None else fmt.NA
    return [f"{col}, {S.LOADED}" if column is not None and claim.under_load else col, paired]


def points_csv(records: list[RunResult], skipped: list[SkippedPoint],
               labels: list[str]) -> str:
    """Machine-readable: raw figures in base units (bytes, seconds, fractions)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([*labels, *POINT_CSV])
    records = P.group_repeats(records)
    sp = speedups(records, labels)
    for r in records:
        w.writerow([_point(r).get(k) for k in labels] + ["" if v is None else v
                                                         for v in _raw_row(r, sp.get(id(r)))])
    for s in skipped:
        w.writerow([s.point.get(k) for k in labels] + ["skipped"]
                   + [""] * (len(POINT_CSV) - 2) + [s.reason])
    return buf.getvalue()


BATCH_CSV = ("group", "batch_size", "devices", "status", "peak_mem_bytes", "memory_kind",
             "mem_growth", "epoch_time_s", "epoch_projected", "epoch_basis",
             "epoch_compared_s", "epoch_growth", "samples_per_s",
             "achieved_flops_per_s", "mfu", "cpu_util_pct", "gpu_util_pct", "error", "b_noise",
             "epoch_samples")


def with_skipped(runs: list[RunResult], skipped: list[SkippedPoint],
                 sweep_id: str) -> list[Record]:
    """The runs plus a sweep record naming the points skipped after an out-of-memory run
    (report/tables/batch.py shows them as "out of memory" rows)."""
    if not skipped:
        return list(runs)
    return [*runs, SweepRecord(experiment=Experiment(id=sweep_id, kind="sweep"),
                               skipped=skipped)]


Row = TypeVar("Row", BatchRow, LoaderRow)


def _by_group(rows: list[Row]) -> dict[str, list[Row]]:
    out: dict[str, list[Row]] = {}
    for row in rows:
        out.setdefault(row["group"], []).append(row)
    return out


def _title(prefix: str, group: str, sweep_id: str) -> str:
    rest = group[len(sweep_id):].strip() if group.startswith(sweep_id) else group
    return f"{prefix}: {rest}" if rest else prefix


def batch_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(BATCH_CSV)
    for row in rows:
        w.writerow(["" if row.get(k) is None else row.get(k) for k in BATCH_CSV])
    return buf.getvalue()


def batch_sections(records: list[Record], sweep_id: str
                   ) -> tuple[list[dict[str, Any]], str, dict[str, Any]]:
    """(Markdown sections, one per group of points that differ only in batch size; the CSV of
    every row; the recommendation)."""
    rows = B.batch_table(records)
    rec = BR.recommend_batch(records)
    sections: list[dict[str, Any]] = []
    for group, group_rows in _by_group(rows).items():  # with --target: time-to-target columns
        headers, cells = B.batch_table_parts(group_rows)
        # under its own table, in sweep.md and the terminal
        notes = [n for n in (B.same_samples_note(group_rows), B.half_batch_note(group_rows))
                 if n]
        sections.append({"title": _title("Batch size", group, sweep_id), "headers": headers,
                         "rows": cells, **({"notes": notes} if notes else {})})
    if sections:
        sections[-1]["notes"] = [*sections[-1].get("notes", []), *rec["text"].splitlines()]
    return sections, batch_csv(rows), _plain(rec)


def _grouped(title: str, sweep_id: str, rows: list[LoaderRow], headers: Any,
             cells: Any) -> list[dict[str, Any]]:
    """One table section per group of rows (the points that differ only on the table's axis)."""
    return [{"title": _title(title, group, sweep_id), "headers": list(headers),
             "rows": [cells(r) for r in group_rows]}
            for group, group_rows in _by_group(rows).items()]


def loader_sections(records: list[Record], sweep_id: str
                    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rows = W.loader_table(records)
    rec = W.recommend_workers(records)
    sections = _grouped("Input pipeline", sweep_id, rows, W.LOADER_HEADERS, W.loader_cells)
    picks = list((rec.get("by_group") or {}).values())
    for section, group in zip(sections, _by_group(rows), strict=True):
        # each group's comparison under its own table (every text names its group)
        section["notes"] = [r["text"] for r in picks if r.get("group") == group]
    if sections and not picks:
        sections[-1]["notes"] = [rec["text"]]
    return sections, _plain(rec)


def _plain(rec: Mapping[str, Any]) -> dict[str, Any]:
    """The recommendation without the full table rows it quotes (for the sweep record)."""
    keep = ("batch_size", "group", "samples_per_s", "epoch_time_s", "epoch_basis",
            "epoch_compared_s", "peak_mem_bytes", "memory_kind", "samples_per_s_per_gib")
    out: dict[str, Any] = {}
    for k, v in rec.items():
        if isinstance(v, dict) and "batch_size" in v:
            out[k] = {kk: v.get(kk) for kk in keep if kk in v}
        else:
            out[k] = v
    return out


def _has(spec: Spec, keys: tuple[str, ...]) -> bool:
    return any(a.key in keys for a in spec.axes)


def sweep_report(runs: list[RunResult], skipped: list[SkippedPoint],
                 searches: list[dict[str, Any]], spec: Spec) -> dict[str, Any]:
    """Tables (title, headers, rows, notes), the CSV text, and the recommendation;
    ``runs``: the sweep's run records."""
    labels = [a.label for a in spec.axes]
    sections: list[dict[str, Any]] = []
    recommendation: dict[str, Any] = {}
    csv_text = None
    if _has(spec, BATCH_KEYS) and (runs or skipped):
        batch, csv_text, recommendation["batch"] = batch_sections(
            with_skipped(runs, skipped, spec.sweep_id), spec.sweep_id)
        sections += batch
    if _has(spec, LOADER_KEYS) and runs:
        loader, recommendation["loader"] = loader_sections(list[Record](runs), spec.sweep_id)
        sections += loader
    if not sections:
        sections.append(points_table(runs, skipped, labels))
    notes = [f"batch size search, {', '.join(f'{k}={v}' for k, v in s['group'].items()) or 'all'}"
             f": {s['summary']}" for s in searches]
    loaded = under_load_line(runs)
    if loaded:
        notes.append(loaded)
    return {"id": spec.sweep_id, "sections": sections, "notes": notes,
            "csv": csv_text or points_csv(runs, skipped, labels),
            "recommendation": recommendation or None, "dropped": spec.dropped}


def render_markdown(report: dict[str, Any], partial: bool = False) -> str:
    lines = [f"# Sweep: {report['id']}", ""]
    if partial:
        lines += ["_Interrupted: the tables hold the points finished so far._", ""]
    for sec in report["sections"]:
        lines += [f"## {sec['title']}", "", fmt.md_table(sec["headers"], sec["rows"]), ""]
        lines += [f"  {n}" if n.startswith("- ") else f"- {n}" for n in sec.get("notes", [])]
        if sec.get("notes"):
            lines.append("")
    lines += [f"- {n}" for n in report["notes"]]
    lines += [f"- left out (invalid combination): {d}" for d in report.get("dropped") or []]
    return "\n".join(lines).rstrip() + "\n"


def write_report(out: Path, report: dict[str, Any], partial: bool = False) -> str:
    text = render_markdown(report, partial)
    (out / "sweep.md").write_text(text)
    (out / "sweep.csv").write_text(report["csv"])
    return text


def write_tables(out: Path, runs: list[RunResult], skipped: list[SkippedPoint],
                 searches: list[dict[str, Any]], spec: Spec, partial: bool = False
                 ) -> dict[str, Any]:
    """The sweep's tables from its run records, written as ``sweep.md`` and ``sweep.csv``
    into ``out`` (``partial``: the sweep was stopped; the tables say so); returns the report
    (its ``recommendation`` goes into the sweep record). What ``run_sweep`` takes as
    ``tables``."""
    report = sweep_report(runs, skipped, searches, spec)
    write_report(out, report, partial)
    return report
