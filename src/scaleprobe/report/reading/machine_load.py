"""Was a run measured while other processes used the machine? Read from its record.

A run records the CPU time that processes outside its own process tree used during its
timed window (``metrics.outside_cpu_cores``) and other programs' compute processes on its
GPUs (``load.gpu_processes``). The report judges those figures again with its own
thresholds (``Thresholds.under_load``), so one rule applies to every run it shows; a record
that carries only the flag keeps it.
"""

from __future__ import annotations

from collections.abc import Iterable

from scaleprobe.core import fmt
from scaleprobe.core.claim import Source
from scaleprobe.core.result_model import RunResult, point_key
from scaleprobe.core.run_parts import Load
from scaleprobe.core.thresholds import DEFAULT, Thresholds


def outside_cores(rec: RunResult) -> float | None:
    """Cores other processes kept busy during the run's timed window: the recorded figure,
    less what the run's co-located jobs used themselves (``records.colocated_load``), whose
    load a together run holds by design."""
    cores = rec.metrics.outside_cpu_cores
    colo = rec.load.colocated_cores if rec.load is not None else None
    if cores is None or not colo:
        return cores
    return max(0.0, cores - colo)


def run_load(rec: RunResult, th: Thresholds = DEFAULT) -> tuple[bool | None, str]:
    """(flag, reason): True = measured under load, None = not measured."""
    load = rec.load or Load()
    cores = outside_cores(rec)
    gpu = load.gpu_processes
    if cores is None and gpu is None:
        return load.flag, str(load.reason or "not measured")
    machine = load.machine_cores or rec.env_number("cores")
    flag, reason = th.under_load(cores, int(machine) if machine else None, gpu)
    colo = load.colocated_cores
    if colo and cores is not None:
        jobs = ", ".join(str(j) for j in load.colocated_jobs or [])
        reason += (f" (net of the {colo:.2f} cores its co-located job(s) {jobs} used "
                   "themselves)")
    return flag, reason


def load_cell(rec: RunResult, th: Thresholds = DEFAULT) -> str:
    """The runs table's cell: mean cores busy outside the run, marked when under load."""
    flag, _ = run_load(rec, th)
    cores = outside_cores(rec)
    text = f"{cores:.2f} cores" if cores is not None else fmt.NA
    if cores is not None and rec.load is not None and rec.load.colocated_cores:
        text += " net of co-located jobs"
    return f"under load ({text})" if flag else text


def point_label(rec: RunResult) -> str:
    """A run as a point of its experiment: 'batch_size=64', with '(repeat 2)' for its second
    repeat (fmt.repeat_label: counted from 1, as the terminal counts)."""
    text = fmt.describe_point(rec.point) or rec.label
    rep = rec.repeat
    return f"{text} ({fmt.repeat_label(rep)})" if rep is not None else text


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


def source(rec: RunResult, th: Thresholds = DEFAULT) -> Source:
    """The run as a claim's source (core/claim.py): experiment id + point key + repeat, and
    whether it was measured under load, with the load in words."""
    flag, _ = run_load(rec, th)
    cores = outside_cores(rec)
    gpus = rec.metrics.outside_gpu_processes
    what = [f"{cores:.2f} cores outside" if cores is not None else "",
            f"{int(gpus)} other GPU process(es)" if gpus else ""]
    ident = " ".join(x for x in (rec.exp_id or "", point_key(rec.point) if rec.point
                                 else f"run:{rec.run_id}") if x)
    rep = rec.repeat
    if rep is not None:
        ident += f" #{rep}"
    return Source(ident, flag, ", ".join(w for w in what if w) if flag else "",
                  point_label(rec))


def sources(points: Iterable[RunResult], th: Thresholds = DEFAULT) -> tuple[Source, ...]:
    """Every repeat of each point (``repeats.repeats_of``: a grouped point's ok runs, else
    the run itself) as a claim's sources."""
    out: list[Source] = []
    for p in points:
        reps = p.repeats if p.repeats is not None else [p]
        out.extend(source(r, th) for r in (reps or [p]))
    return tuple(out)
