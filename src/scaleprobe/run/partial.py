"""What a run keeps when ranks die or hang: the timed steps each rank logged until it stopped
(``measure/steplog.py``), for every rank that returned no record, marked partial."""

from __future__ import annotations

from pathlib import Path

from scaleprobe.core.result_model import RunResult
from scaleprobe.measure.steplog import read_step_logs
from scaleprobe.protocols import Ending


def recover_steps(end: Ending, run_dir: Path) -> None:
    """``end`` completed with the logged steps of every rank that returned no record;
    ``end.logged`` names those ranks."""
    have = {r.rank for r in end.ranks or []}
    logged = [r for r in read_step_logs(run_dir) if r.rank not in have]
    if not logged:
        return
    end.ranks = sorted([*(end.ranks or []), *logged], key=lambda r: r.rank)
    end.logged = [r.rank for r in logged]


def mark_logged(result: RunResult, end: Ending) -> None:
    """A run whose figures came (in part) from its ranks' step logs: partial, with why."""
    head = next((r for r in end.ranks or [] if r.step_times_s), None)
    timed = head.steps_timed if head else 0
    who = ", ".join(str(r) for r in end.logged)
    result.partial = True
    how = ("interrupted" if result.status == "interrupted" else
           "ended by a failure" if result.status in ("failed", "oom") else "stopped")
    result.null_reasons["partial"] = (
        f"{how} after {timed} timed steps: the figures cover the steps each rank timed "
        f"before it stopped (rank {who}: read from the step log it wrote as it trained); "
        "communication calibration, evaluation and the shard audit did not run")
