"""The runs of sweeps as the batch and loader analyses read them: repeats grouped into one
point each, points a sweep skipped (a smaller batch already ran out of memory) as rows of
their own, and runs grouped by the sweep's axes other than the one analysed."""

from __future__ import annotations

from typing import Any

from scaleprobe.report import fmt
from scaleprobe.report import records as R
from scaleprobe.report import repeats as P


def sweep_runs(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    runs = [r for r in records if r.get("kind") == "run"]
    return P.group_repeats(runs) + _skipped_points(records, runs)


def _skipped_points(records: list[dict[str, Any]], runs: list[dict[str, Any]]) -> list[dict]:
    """Points a sweep did not run because a smaller batch already ran out of memory."""
    seen = {(R.exp_id(r), R.point_key(R.point(r))) for r in runs}
    out = []
    for s in R.of_kind(records, "sweep"):
        for sk in s.get("skipped") or []:
            exp = {"id": R.exp_id(s), "kind": "sweep", "point": sk.get("point") or {}}
            rec = {"kind": "run", "status": sk.get("status") or "oom", "experiment": exp,
                   "error": sk.get("reason"), "metrics": {}, "name": "(skipped)",
                   "repeats": []}
            if (exp["id"], R.point_key(R.point(rec))) not in seen:
                out.append(rec)
    return out


def point_groups(runs: list[dict[str, Any]], varied: tuple[str, ...]) -> dict[str, list[dict]]:
    """Runs by experiment and by the point's axes other than ``varied``."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        others = {k: v for k, v in R.point(r).items() if k not in varied}
        label = " ".join(x for x in (R.exp_id(r) or "", fmt.describe_point(others)) if x)
        out.setdefault(label, []).append(r)
    return out
