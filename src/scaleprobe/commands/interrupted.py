"""What an experiment interrupted by Ctrl+C (or SIGTERM) leaves: the runs it kept, how to
resume, and the report of what was measured. Used by ``demo``, ``sweep``, ``scale`` and
``colocate`` (which does not resume: its phases are compared only within one sitting).

Every finished run is already on disk when the interrupt comes (each point appends its record
as it ends); the point that was running is recorded "interrupted" and runs again on resume.
"""

from __future__ import annotations

import sys
from pathlib import Path

from scaleprobe.core.errors import ScaleprobeError
from scaleprobe.core.result_model import MEASURED
from scaleprobe.report.reading import records as R

KEPT = (*MEASURED, "oom")  # the statuses a resumed experiment reuses


def kept_runs(folder: Path, ids: tuple[str, ...] = ()) -> dict[str, int]:
    """Finished runs under ``folder`` by experiment id (or run name), only those of the
    experiments ``ids`` where given; {} when none."""
    try:
        runs = R.runs(R.load_records(folder))
    except (ScaleprobeError, OSError):
        return {}
    out: dict[str, int] = {}
    for r in runs:
        if r.status in KEPT and (not ids or r.exp_id in ids):
            key = r.exp_id or r.label
            out[key] = out.get(key, 0) + 1
    return out


def say_interrupted(folder: Path, again: str | None = None, report: bool = False,
                    ids: tuple[str, ...] = (), resumes: bool = True) -> int:
    """The lines on stderr after an interrupt: what was kept (of the experiments ``ids``
    where given: a folder shared with other runs held them all, and an interrupted scale
    said "Kept 16 finished runs" of the demo's and plain runs), that ``again`` resumes (or,
    ``resumes`` False, that running it again measures everything anew), and (``report``) the
    report of what was measured, written into ``folder``. Returns 130."""
    kept = kept_runs(folder, ids)
    n = sum(kept.values())
    each = ", ".join(f"{k}: {v}" for k, v in kept.items())
    what = f"`{again}`" if again else "the same command"
    if not resumes:
        _say(f"scaleprobe: interrupted. Kept {n} finished run{'s' if n != 1 else ''} in "
             f"{folder}" + (f" ({each})" if kept else "") + "; the run that was going is "
             "recorded as interrupted.")
        _say(f"Running {what} again measures every phase anew: runs alone and together are "
             "compared only within one sitting, so finished runs are not reused.")
        return 130
    _say(f"scaleprobe: interrupted. Kept {n} finished run{'s' if n != 1 else ''} in {folder}"
         + (f" ({each})" if kept else "") + "; a point that was running is recorded as "
         "interrupted and runs again.")
    _say(f"Running {what} again resumes: finished points are reused, not rerun.")
    if report and n:
        try:
            from scaleprobe.report import build_report  # optional: matplotlib (the plots)

            md, html = build_report(folder, folder)
            _say(f"report of what was measured: {md}\n        {html}")
        except ImportError:  # the report's plotting library is not installed
            pass
    return 130


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
