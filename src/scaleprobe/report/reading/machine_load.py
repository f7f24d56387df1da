"""Was a run measured while other processes used the machine? Read from its record.

A run records the CPU time that processes outside its own process tree used during its
timed window (``metrics.outside_cpu_cores``) and other programs' compute processes on its
GPUs (``load.gpu_processes``). The report judges those figures again with its own
thresholds (``Thresholds.under_load``), so one rule applies to every run it shows; a record
that carries only the flag keeps it. The judgement and a run as a claim's source are
``core/machine_load.py``'s (``scaleprobe colocate`` judges its runs there too), re-exported
here; this module adds the report's cells and lines.
"""

from __future__ import annotations

from scaleprobe.core import fmt
from scaleprobe.core.machine_load import (
    colocate_sources,
    colocated_load,
    outside_cores,
    point_label,
    run_load,
    source,
    sources,
)
from scaleprobe.core.result_model import RunResult
from scaleprobe.core.thresholds import DEFAULT, Thresholds

__all__ = ["colocate_sources", "colocated_load", "load_cell", "outside_cores", "point_label",
           "run_load", "source", "sources", "under_load_line"]


def load_cell(rec: RunResult, th: Thresholds = DEFAULT) -> str:
    """The runs table's cell: mean cores busy outside the run, marked when under load."""
    flag, _ = run_load(rec, th)
    cores = outside_cores(rec)
    text = f"{cores:.2f} cores" if cores is not None else fmt.NA
    if cores is not None and rec.load is not None and rec.load.colocated_cores:
        text += " net of co-located jobs"
    return f"under load ({text})" if flag else text


def under_load_line(recs: list[RunResult], th: Thresholds = DEFAULT,
                    note: str = "") -> str | None:
    """'Measured under load: batch_size=64 (1.70 cores outside), ...' or None when no run
    of ``recs`` was."""
    hits = [r for r in recs if run_load(r, th)[0]]
    if not hits:
        return None
    parts = []
    for r in hits:
        cores = outside_cores(r)
        gpus = r.metrics.outside_gpu_processes
        what = [f"{cores:.2f} cores outside" if cores is not None else "",
                f"{int(gpus)} other GPU process(es)" if gpus else ""]
        parts.append(f"{point_label(r)} ({', '.join(w for w in what if w) or 'flagged'})")
    limit = th.load_cores
    return (f"Measured under load ({len(hits)} of {len(recs)} points): " + "; ".join(parts)
            + f". Other processes used more than max({limit:g} cores, "
            f"{th.load_machine_fraction:.0%} of the machine) during these points' timed "
            "windows, so their figures may be slower than the machine allows." + note)

