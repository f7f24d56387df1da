"""Report sections about experiments: sweeps (batch size, loader settings), scaling,
co-location, accuracy parity and runs with a target (communication: ``sections_comm``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scaleprobe.core import claim as CL
from scaleprobe.core import claim_kinds as CK
from scaleprobe.core import fmt
from scaleprobe.core import metrics as M
from scaleprobe.core.experiment_records import (
    ColocateRecord,
    ParityRecord,
    SweepRecord,
)
from scaleprobe.core.record import Record
from scaleprobe.core.result_model import BATCH_AXES, RunResult, dict_of, dicts, num
from scaleprobe.core.run_parts import TimeToTarget
from scaleprobe.features.target import wide_bracket
from scaleprobe.report.findings import verdicts_experiments as VE
from scaleprobe.report.reading import machine_load as L
from scaleprobe.report.reading import records as R
from scaleprobe.report.reading.machine_load import under_load_line
from scaleprobe.report.reading.repeats import group_repeats
from scaleprobe.report.render import plots
from scaleprobe.report.render.colocate import job_rows
from scaleprobe.report.render.critical_plot import clipped_note, critical_plot
from scaleprobe.report.render.doc import Section, Sub, Table, Text
from scaleprobe.report.render.labels import distinct_labels
from scaleprobe.report.tables import batch as B
from scaleprobe.report.tables import batch_rule as BR
from scaleprobe.report.tables import scale as S
from scaleprobe.report.tables import time_to_target as T
from scaleprobe.report.tables import workers as W
from scaleprobe.report.tables.rows import ScaleRow


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower())[:48]


def _within(group: str, eid: str) -> str:
    """A group label without its sweep's id: 'sw workers=2' -> 'workers=2'."""
    return group[len(eid):].strip() if group.startswith(eid) else group


def sweeps_section(records: list[Record]) -> Section | None:
    s = Section("Sweeps", anchor="sweeps")
    for eid, runs in R.by_experiment(records, "sweep").items():
        recs: list[Record] = [*runs, *R.summaries(records, SweepRecord, eid)]
        axes = {k for r in runs for k in r.point}
        s.add(Sub(f"Sweep {eid}"))
        if axes & set(BATCH_AXES):
            _batch_blocks(s, eid, recs)
        if axes & set(R.LOADER_AXES):
            _loader_blocks(s, eid, recs)
        if not axes & (set(BATCH_AXES) | set(R.LOADER_AXES)):
            s.add(Text(f"Varied: {', '.join(sorted(axes)) or 'nothing'}; each point is a row "
                       "of the runs table."))
        if not axes & set(BATCH_AXES):  # a batch sweep draws its curves by batch size
            _target_curves(s, eid, group_repeats(runs), _point_label, "one line per point")
        _load_line(s, runs)
    return s if s.blocks else None


def _point_label(r: RunResult) -> str:
    return ", ".join(f"{k}={v}" for k, v in r.point.items()) or r.label


def _load_line(s: Section, runs: list[RunResult], note: str = "") -> None:
    """Which points of an experiment were measured while other processes used the machine."""
    line = under_load_line(R.latest_per_point(runs), note=note)
    if line:
        s.add(Text(line))


def _batch_blocks(s: Section, eid: str, recs: list[Record]) -> None:
    rows = B.batch_table(recs)
    groups = list(dict.fromkeys(r["group"] for r in rows))
    for g in groups:
        grows = [r for r in rows if r["group"] == g]
        label = _within(g, eid)
        hs, cells = B.batch_table_parts(grows)
        s.add(Table(hs, cells, caption=f"Batch size: {label}" if label else ""))
        s.add(plots.image(f"batch-{_slug(g)}", plots.batch_plot(grows, f"Batch size: {label or eid}"),
                          f"epoch time and peak memory vs batch size, {g}"))
        _target_curves(s, f"{eid}-{g}", [r["record"] for r in grows],
                       lambda r: f"batch {r.batch_size}", "one line per batch size")
        crit = critical_plot(grows, f"Critical batch: {label or eid}")
        s.add(plots.image(f"critical-{_slug(g)}", crit,
                          "samples against steps to the target with the fitted curve, and "
                          "B_noise over training"))
        cut = clipped_note(crit)
        if cut:
            s.add(Text(cut, note=True))
    kind = rows[0]["memory_kind"] if rows else "host"
    notes = [f"Peak memory: {B.MEMORY_WORDS.get(kind, kind + ' memory')}. Every figure of a "
             "row is the median over the "
             "point's repeats (with an even number, the mean of the middle two). Growth compares each point with the "
             "previous one that finished, paired over every repeat."]
    same = B.same_samples_note(rows)
    if same:
        notes.append(f"~ marks an epoch time projected from the timed window. {same}")
    elif any(r.get("epoch_basis") == "window" for r in rows if r["status"] == "ok"):
        notes.append("~ marks an epoch time projected from the timed window: samples per "
                     "epoch / the row's samples/s (not a median of epoch times), so the two "
                     "columns multiply out to the samples per epoch.")
    elif any(r["epoch_projected"] or r.get("epoch_basis") == "projected"
             for r in rows if r["status"] == "ok"):
        notes.append("~ marks an epoch time projected from the median step time.")
    half = B.half_batch_note(rows)
    if half:
        notes.append(half)
    s.add(Text("\n".join(notes), note=True))
    s.add(Text(BR.recommend_batch(recs)["text"]))


def _loader_blocks(s: Section, eid: str, recs: list[Record]) -> None:
    rows = W.loader_table(recs)
    if not rows:
        return
    groups = list(dict.fromkeys(r["group"] for r in rows))
    rec = W.recommend_workers(recs)
    picks = list((rec.get("by_group") or {"": rec}).values())
    for g in groups:
        grows = [r for r in rows if r["group"] == g]
        s.add(Table(list(W.LOADER_HEADERS), [W.loader_cells(r) for r in grows],
                    right=[False, True, True, True, True, True, True, False],
                    caption=" ".join(x for x in ("Loader settings:", _within(g, eid)) if x)
                    .rstrip(":")))
        for r in picks:  # each group's comparison under its own table, named
            if r.get("group") == g:
                s.add(Text(r["text"]))
    s.add(Text("Compute/step is compute (h2d + forward + backward + optimizer) per step: when more workers cut the data "
               "wait but compute per step grows, the workers are taking cores from compute.",
               note=True))
    for r in picks:  # nothing ran: the one text says so
        if r.get("group") not in groups:
            s.add(Text(r["text"]))
    s.add(plots.image(f"loader-{_slug(eid)}", plots.loader_plot(rows),
                      "data wait and compute per loader setting"))


def scaling_section(records: list[Record]) -> Section | None:
    rows = S.scale_table(records)
    if not rows:
        return None
    s = Section("Scaling", anchor="scaling")
    s.add(Text("Speedup = the Samples/s shown at N processes / the Samples/s shown at 1 "
               "(measured, not extrapolated). Samples/s is each point's median repeat "
               "(samples over its timed window). The paired speedup is the geometric mean of "
               "the repeats' paired ratios, with its interval: the figure every verdict uses; "
               "paired efficiency = paired speedup / N. Every "
               "point ran the same threads per rank unless the row says it is not like for "
               "like. 'Lost to' splits the gap (100% - the paired efficiency) into shares of "
               "the N-process step, from the breakdowns of the two points' median repeats; "
               "'other/unexplained' is what the listed shares leave of that gap (shares "
               "under 1%, phases that got faster, time outside the breakdown's phases, the "
               "median repeats against every repeat paired; negative where the shares exceed "
               "the gap), so the parts add up to it (no gap above 100% efficiency). A figure "
               "drawn from a run measured under load says 'under load' beside it."))
    runs = R.by_experiment(records, "scale")
    for eid in dict.fromkeys(r["experiment"] for r in rows):
        grows = [r for r in rows if r["experiment"] == eid]
        hs, cells = T.table_parts(S.SCALE_HEADERS, grows, S.scale_cells)
        s.add(Table(hs, cells, right=[True] * 9 + [False] + [True] * (len(hs) - 10),
                    caption=f"Scale experiment {eid}"))
        lines = [r["line"] for r in grows] + T.explain(grows, list(runs.get(eid, [])))
        s.add(Text("\n".join(f"- {x}" for x in lines)))
        _load_line(s, runs.get(eid, []))
        _target_plot(s, eid, grows)
    s.add(plots.image("scaling", plots.scale_plot(rows), "paired speedup vs processes with the ideal line"))
    return s


def job_claims(rec: ColocateRecord, runs: list[RunResult]) -> list[CL.Claim]:
    """Each job's slowdown as a claim (core/claim.py) whose sources are its runs alone and
    together, with their load (net of the co-located jobs' own): ``L.colocate_sources``, the
    one ``scaleprobe colocate`` gives colocate.md and the terminal. The caveat then rides on
    the job's reading itself."""
    return [CK.slowdown_claim(f"{j.get('name')}: slowdown alone / together",
                              num(j.get("slowdown")), M.interval_of(j.get("slowdown_interval")),
                              L.colocate_sources(runs, str(j.get("name"))))
            for j in dicts(rec.jobs)]


def _target_plot(s: Section, eid: str, rows: list[ScaleRow]) -> None:
    """--target: the metric against training time, one line per process count."""
    _target_curves(s, eid, [r["record"] for r in rows],
                   lambda r: f"{S.nproc(r)} process{'es' if S.nproc(r) != 1 else ''}",
                   "one line per process count")


def _target_curves(s: Section, eid: str, runs: list[RunResult],
                   label: Callable[[RunResult], str], lines: str) -> None:
    """With --target: the metric against training wall clock of each point's median repeat
    (``runs``), the target as a horizontal line (nothing without a target)."""
    series = T.curve_series([r for r in runs if r.status in ("ok", "target_not_reached")],
                            label)
    if not series:
        return
    tt = series[0][1]
    s.add(plots.image(f"target-{_slug(eid)}", plots.curve_plot(series, tt.target,
                                                           tt.metric or "metric"),
                      f"metric against training wall clock, {lines}, the target as a "
                      "horizontal line"))


def _interval_cell(iv: Any, spec: str = ".2f") -> str:
    iv = dict_of(iv)
    lo, hi = num(iv.get("lo")), num(iv.get("hi"))
    return fmt.NA if lo is None or hi is None else f"[{lo:{spec}}, {hi:{spec}}]"


def colocate_section(records: list[Record]) -> Section | None:
    recs = R.of_type(records, ColocateRecord)
    if not recs:
        return None
    s = Section("Co-location", anchor="colocation")
    headers = ["Job", "Alone samples/s", "Together samples/s", "Alone epoch", "Together epoch",
               "Slowdown", "95% interval", "Reading"]
    for rec in recs:
        label = R.exp_label(rec, R.shared_ids(records))
        runs = R.by_experiment(records, "colocate").get(label or "", [])
        claims = job_claims(rec, runs)
        # the caveat on the reading it concerns, judged by the report's own rule
        rows = job_rows(dicts(rec.jobs), [c.under_load for c in claims])
        reps = rec.repeats
        s.add(Table(headers, rows, right=[False] + [True] * 6 + [False],
                    caption=f"{rec.exp_id or 'co-location'}: placement "
                    f"{rec.placement or 'n/a'}, "
                    + (f"{int(reps)} repeats, interleaved" if reps else "one repeat, no interval")))
        alone, together = rec.total_samples_per_s_alone_sum, rec.total_samples_per_s_together
        lines = [f"Total: {fmt.rate(together)} samples/s together vs {fmt.rate(alone)} as the sum "
                 f"alone; CPU {fmt.pct_value(rec.cpu_util_pct_together)} (whole machine), "
                 f"GPU {fmt.pct_value(rec.gpu_util_pct_together)} while together."]
        if rec.verdict:
            lines.append(f"Verdict: {rec.verdict}" + (f" - {rec.evidence}"
                                                      if rec.evidence else ""))
        lines += [c.text() for c in claims if c.under_load]
        s.add(Text("\n".join(lines)))
        _load_line(s, runs,
                   " Jobs measured together share the machine by design; a job measured alone "
                   "under load makes its slowdown look smaller than it is.")
    s.add(Text("Slowdown = samples/s alone / samples/s together, geometric mean over the "
               "repeats; the interval pairs each repeat alone with the same repeat together. A "
               "job is slower (faster) together only when its interval lies above (below) 1.",
               note=True))
    s.add(plots.image("colocation", plots.colocate_plot(recs),
                      "slowdown of each job when co-located"))
    return s


def parity_section(records: list[Record]) -> Section | None:
    recs = R.of_type(records, ParityRecord)
    if not recs:
        return None
    by_id = {str(r.run_id): r for r in R.runs(records) if r.run_id}
    rows, lines = [], []
    for r in recs:
        # the means beside the difference are over the seeds it pairs (parity_means)
        a1, an, paired, _ = VE.parity_means(r)
        claim = VE.parity_claim(r, by_id)
        k, reps = len(paired), int(r.repeats or 1)
        diff = fmt.num(r.difference, "+.3f")
        rows.append([r.exp_id or "parity", fmt.num(a1, ".3f"), fmt.num(an, ".3f"),
                     fmt.num(r.nproc, "d"), f"{k} of {reps}" if k != reps else str(k),
                     f"{diff}, under load" if claim.under_load else diff,
                     _interval_cell(r.difference_interval, "+.3f"),
                     "+/-" + fmt.num(r.tolerance, ".3f"), _parity_verdict(r)])
        text = r.verdict_text or ""
        if claim.under_load and CL.UNDER_LOAD not in text:  # a record read from before
            text = "; ".join(x for x in (text, CL.load_caveat(claim.sources)) if x)
        lines.append(f"{r.exp_id or 'parity'}: {r.verdict or _parity_verdict(r)} - "
                     f"{VE.parity_pairs_text(r)}" + (f"; {text}" if text else ""))
    s = Section("Accuracy parity", anchor="parity").add(
        Table(["Experiment", "Accuracy (1 process)", "Accuracy (N)", "N", "Paired seeds",
               "Difference", "95% interval", "Tolerance", "Verdict"], rows,
              right=[False] + [True] * 7 + [False]))
    s.add(Text("Accuracies are means over the paired seeds: those with an accuracy on both "
               "sides after the same samples, the seeds the difference is taken over (Paired "
               "seeds: k of the repeats run; a seed without a partner is named below, left out "
               "of both means and the difference). The interval is a paired t interval on "
               "the difference (N - 1) seed by seed (both sides of a seed share its initial "
               "weights, data order and split). The tolerance is the user's "
               "(--parity-tolerance, default 0.01 absolute), never derived from the noise: "
               f"{CL.PARITY_HOLDS} when the whole interval lies inside it, "
               f"{CL.PARITY_BROKEN} when it lies entirely outside, else {CL.NOT_RESOLVED} "
               f"(the record's verdict: {CL.INCONCLUSIVE}). A difference drawn from a run "
               "measured under load says 'under load' beside it.", note=True))
    for line in lines:
        s.add(Text(line))
    return s


def _parity_verdict(r: ParityRecord) -> str:
    return r.verdict or "one seed, no interval"  # none: written before repeats


TARGET_RUNS_DRAWN = 8  # lines in one plot before it stops being readable


def _ttt_cell(tt: TimeToTarget) -> str:
    """A reached target's time, and where the evaluations leave it open by more than 10%
    the evaluation before the hit it was crossed after (features/target.wide_bracket)."""
    t, lo = tt.time_to_target_s, tt.time_to_target_lo_s
    text = fmt.duration(t)
    if not wide_bracket(t, lo):
        return text
    return f"{text} (crossed after {fmt.duration(lo) if lo else 'the start'})"


def target_runs_section(records: list[Record]) -> Section | None:
    """Runs with --target outside a scale or batch sweep (those draw their own): the metric
    against training wall clock, one line per run, the target as a horizontal line, and a
    row per run with its time, epochs and samples to the target (or its best value)."""
    runs = [r for r in R.runs(records) if r.target is not None
            and (r.exp_kind not in ("scale", "sweep"))]
    if not runs:
        return None
    s = Section("Time to target", anchor="time-to-target")
    labels = distinct_labels(runs)
    rows = []
    targets = [r.target for r in runs if r.target is not None]
    for r, tt, label in zip(runs, targets, labels, strict=True):
        reached = tt.time_to_target_s is not None
        # a time measured under load may be longer than the machine allows (its samples and
        # epochs are not): said beside it, as every figure of a loaded run is
        loaded = ", under load" if reached and L.run_load(r)[0] else ""
        rows.append([label, T.target_text(r),
                     _ttt_cell(tt) + loaded if reached else "not reached",
                     f"{tt.epochs_to_target:.2f}" if reached and tt.epochs_to_target
                     is not None else "-",
                     f"{tt.samples_to_target:,}" if reached and tt.samples_to_target
                     is not None else "-",
                     "-" if tt.best_value is None else f"{tt.best_value:.4g}"])
    s.add(Table(["Run", "Target", "Time to target", "Epochs", "Samples", "Best value"], rows,
                right=[False, False, True, True, True, True]))
    series = list(zip(labels, targets, strict=True))[:TARGET_RUNS_DRAWN]
    tt0 = targets[0]
    s.add(plots.image("target-runs", plots.curve_plot(series, tt0.target,
                                                  tt0.metric or "metric"),
                      "metric against training wall clock, one line per run, the target as a "
                      "horizontal line"))
    if len(runs) > TARGET_RUNS_DRAWN:
        s.add(Text(f"The plot draws the first {TARGET_RUNS_DRAWN} of {len(runs)} runs.",
                   note=True))
    return s
