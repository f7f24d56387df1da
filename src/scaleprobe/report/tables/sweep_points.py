"""The runs of sweeps as the batch and loader analyses read them: repeats grouped into one
point each, points a sweep skipped (a smaller batch already ran out of memory) as rows of
their own, and runs grouped by the sweep's axes other than the one analysed."""

from __future__ import annotations

from collections.abc import Sequence

from scaleprobe.core import fmt
from scaleprobe.core.record import Record
from scaleprobe.core.result_model import Experiment, RunResult, point_key
from scaleprobe.report.reading import records as R
from scaleprobe.report.reading import repeats as P


def sweep_runs(records: Sequence[Record]) -> list[RunResult]:
    runs = R.runs(records)
    return P.group_repeats(runs) + _skipped_points(records, runs)


def _skipped_points(records: Sequence[Record], runs: list[RunResult]) -> list[RunResult]:
    """Points a sweep did not run because a smaller batch already ran out of memory."""
    seen = {(r.exp_id, point_key(r.point)) for r in runs}
    out = []
    for s in R.sweeps(records):
        for sk in s.skipped:
            exp = Experiment(id=s.exp_id, kind="sweep", point=dict(sk.point))
            rec = RunResult(status=sk.status or "oom", experiment=exp, error=sk.reason,
                            name="(skipped)", repeats=[])
            rec.source = s.source
            if (s.exp_id, point_key(rec.point)) not in seen:
                out.append(rec)
    return out


def point_groups(runs: list[RunResult], varied: tuple[str, ...]) -> dict[str, list[RunResult]]:
    """Runs by experiment and by the point's axes other than ``varied``."""
    out: dict[str, list[RunResult]] = {}
    for r in runs:
        others = {k: v for k, v in r.point.items() if k not in varied}
        label = " ".join(x for x in (r.exp_id or "", fmt.describe_point(others)) if x)
        out.setdefault(label, []).append(r)
    return out
