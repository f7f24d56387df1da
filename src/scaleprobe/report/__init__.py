"""Reports from results files: tables, plots, diagnosis, Markdown and HTML. No torch import:
a report can be built on any machine that has the results.

    reading/    the records loaded and grouped, a point's repeats, like-for-like pairing,
                the machine's load, how a timed window ended
    tables/     the analyses as typed rows: batch size, loader workers, scaling, time to
                target, the critical batch
    findings/   verdicts with their numbers and next steps: per run, across runs, the headline
    render/     the document and its Markdown and HTML writers, figures, sections, the report

    build_report(src, out_dir)      -> (report.md, report.html)
    batch_table / recommend_batch   batch-size sweeps (also printed by the sweep command)
    loader_table / recommend_workers
    scale_table                     speedup, efficiency and what the gap was lost to
    diagnose_run / diagnose_experiment / format_findings
    compare_paths                   two runs or two sweeps side by side
"""

from scaleprobe.core.thresholds import Thresholds
from scaleprobe.report.findings.diagnose import (
    diagnose_all,
    diagnose_experiment,
    diagnose_run,
    format_findings,
)
from scaleprobe.report.findings.finding import Finding
from scaleprobe.report.render.build_report import build_report
from scaleprobe.report.tables.batch import batch_table
from scaleprobe.report.tables.batch_rule import recommend_batch
from scaleprobe.report.tables.scale import scale_table
from scaleprobe.report.tables.workers import loader_table, recommend_workers

__all__ = [
    "Finding", "Thresholds", "batch_table", "build_report", "diagnose_all", "diagnose_experiment",
    "diagnose_run", "format_findings", "loader_table", "recommend_batch", "recommend_workers",
    "scale_table",
]
