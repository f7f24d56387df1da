"""The report's opening section, "What this says": at most five verdicts, most important
first, each with its number, its interval and the command that would improve or decide it.

Where the verdicts come from (the details stay in the sections below):

    batch size        report/tables/batch_rule.py: the fastest batch size against every other of its
                      group, epoch-time ratios over the paired repeats
    loader workers    report/tables/workers.py: the fewest workers within reach of the best samples/s
    scaling           report/tables/scale.py: speedup and efficiency at the largest process count
    co-location       the colocate record's verdict and each job's slowdown interval
    accuracy parity   the parity record's verdict and the difference's interval
    loader contention more workers cut the data wait but slowed compute
    per-run findings  grouped by verdict and next step (report/findings/grouped.py)

Order: runs that failed; verdicts an experiment decided (warnings first); verdicts it could
not decide (each says how many repeats would); loader contention; per-run warnings, the one
about most runs first; then per-run notes. Runs measured under load are one caveat line, not
a verdict, because they weaken every verdict above.

The verdicts are built by family: a run's settings (batch size, loader workers, contention) in
report/findings/verdicts_settings.py, the experiments that compare runs (scaling,
co-location, parity) in report/findings/verdicts_experiments.py, the per-run findings' rows
here (``group_verdicts``); a ``Verdict``, its ranks and the command that would decide one are
report/findings/verdict.py's.
"""

from __future__ import annotations

from scaleprobe.core.experiment_records import ColocateRecord, ParityRecord, SweepRecord
from scaleprobe.core.record import Record
from scaleprobe.core.result_model import BATCH_AXES, RunResult
from scaleprobe.core.thresholds import DEFAULT, Thresholds
from scaleprobe.report.findings.grouped import Group, counted
from scaleprobe.report.findings.verdict import ERROR, NOTE, RUN_WARNING, Verdict
from scaleprobe.report.findings.verdicts_experiments import (
    colocate_verdict,
    parity_verdict,
    scale_verdicts,
)
from scaleprobe.report.findings.verdicts_settings import (
    batch_verdicts,
    contention_verdicts,
    worker_verdicts,
)
from scaleprobe.report.reading import records as R
from scaleprobe.report.reading.machine_load import run_load
from scaleprobe.report.render.doc import Section, Table, Text

TITLE = "What this says"
ANCHOR = "what-this-says"
MOST = 5
HEADERS = ["", "Verdict", "Number", "Interval (95%)", "To decide or improve it"]


def headline_section(records: list[Record], groups: list[Group],
                     th: Thresholds = DEFAULT) -> Section:
    """The section; ``groups``: the per-run findings, grouped."""
    found = collect(records, groups, th)
    s = Section(TITLE, anchor=ANCHOR, lead=True)
    if not found:
        s.add(Text("Nothing stands out: no run failed and no rule in docs/REPORTS.md fired. The "
                   "figures are in the sections below."))
        return s
    shown = found[:MOST]
    rows = [[str(i), v.claim, v.number, v.interval, v.command] for i, v in enumerate(shown, 1)]
    s.add(Table(HEADERS, rows, right=[True, False, False, False, False]))
    notes = [line for line in (_load_caveat(records, th), _more(found[MOST:])) if line]
    if notes:
        s.add(Text("\n".join(notes), note=True))
    return s


def collect(records: list[Record], groups: list[Group],
            th: Thresholds = DEFAULT) -> list[Verdict]:
    """Every verdict, most important first (the section shows the first ``MOST``)."""
    found: list[Verdict] = []
    for eid, runs in R.by_experiment(records, "sweep").items():
        recs: list[Record] = [*runs, *R.summaries(records, SweepRecord, eid)]
        axes = {k for r in runs for k in r.point}
        if axes & set(BATCH_AXES):
            found += batch_verdicts(eid, recs)
        if axes & set(R.LOADER_AXES):
            found += worker_verdicts(eid, recs, th)
    found += scale_verdicts(records, th)
    found += [colocate_verdict(r, th) for r in R.of_type(records, ColocateRecord)]
    by_id = {r.run_id: r for r in R.runs(records) if r.run_id}
    found += [parity_verdict(r, by_id) for r in R.of_type(records, ParityRecord)]
    found += contention_verdicts(R.runs(records), th)
    found += group_verdicts(groups)
    order = {id(v): i for i, v in enumerate(found)}
    return sorted(found, key=lambda v: (v.rank, not v.warning, -v.weight, order[id(v)]))


def group_verdicts(groups: list[Group]) -> list[Verdict]:
    """Per-run findings (grouped): failures, warnings by the number of runs, then notes.
    "Measured under load" is left to the caveat line."""
    out = []
    for g in groups:
        f = g.finding
        if f.verdict == "measured under load" or (f.verdict == "out of memory" and all(
                _batch_point(r) for r in g.recs)):
            continue  # the caveat line says the one; the batch-size verdict the other
        if f.severity == "error":
            rank = ERROR
        elif f.severity == "warning":
            rank = RUN_WARNING
        else:
            rank = NOTE
        n = len(g.recs)
        who = f"{n} runs" if n > 1 else (f.subject or "1 run")
        number = g.range_text() or (f.evidence if n == 1 else
                                    f"{n} runs: {counted(f.verdict) or 'its figure not measured'}")
        interval = ("-: per-run readings, no interval" if n > 1 else "-: one run, no interval")
        if f.severity == "error":
            interval = "-: a failure, not a measurement"
        out.append(Verdict(f"{f.verdict[:1].upper()}{f.verdict[1:]} ({who})", number, interval,
                           f.recommendation.split("; ")[0], rank, weight=n))
    return out


def _batch_point(rec: RunResult) -> bool:
    """A point of a sweep over batch size (running out of memory there finds the limit)."""
    return rec.exp_kind == "sweep" and bool(set(rec.point) & set(BATCH_AXES))


def _load_caveat(records: list[Record], th: Thresholds) -> str | None:
    runs = R.runs(records)
    loaded = [r for r in runs if run_load(r, th)[0]]
    if not loaded:
        return None
    return (f"Caveat: {len(loaded)} of {len(runs)} runs were measured under load (processes "
            "outside the run used the machine during its timed window); their figures may be "
            "slower than the machine allows and widen the intervals above. Measure again on a "
            "quiet machine; the runs are named under Findings.")


def _more(rest: list[Verdict]) -> str | None:
    if not rest:
        return None
    names = "; ".join(v.claim for v in rest[:4]) + ("; ..." if len(rest) > 4 else "")
    return f"{len(rest)} more below (Findings and the sections after it): {names}."
