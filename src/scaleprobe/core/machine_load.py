"""Was a run measured while other processes used the machine? Read from its record, as a
claim's source.

A run records the CPU time that processes outside its own process tree used during its
timed window (``metrics.outside_cpu_cores``) and other programs' compute processes on its
GPUs (``load.gpu_processes``). ``run_load`` judges those figures again with one set of
thresholds (``Thresholds.under_load``), so one rule applies to every run a verdict stands on;
a record that carries only the flag keeps it. A co-located job's run together holds its
partner jobs' CPU use by design: ``colocated_load`` works it out, and the load judged is net
of it.

Every producer of a claim judges its runs here: the report (``report/reading/machine_load.py``
re-exports these functions), ``scaleprobe colocate``'s colocate.md and terminal
(``colocate_sources``), ``compare``, ``plan``. Torch-free, I/O-free.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from scaleprobe.core import fmt
from scaleprobe.core.claim import Source
from scaleprobe.core.result_model import RunResult, point_key
from scaleprobe.core.run_parts import Load
from scaleprobe.core.thresholds import DEFAULT, Thresholds


def outside_cores(rec: RunResult) -> float | None:
    """Cores other processes kept busy during the run's timed window: the recorded figure,
    less what the run's co-located jobs used themselves (``colocated_load``), whose load a
    together run holds by design."""
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


def point_label(rec: RunResult) -> str:
    """A run as a point of its experiment: 'batch_size=64', with '(repeat 2)' for its second
    repeat (fmt.repeat_label: counted from 1, as the terminal counts)."""
    text = fmt.describe_point(rec.point) or rec.label
    rep = rec.repeat
    return f"{text} ({fmt.repeat_label(rep)})" if rep is not None else text


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
    """Every repeat of each point (a grouped point's ok runs, ``report.reading.repeats``,
    else the run itself) as a claim's sources."""
    out: list[Source] = []
    for p in points:
        reps = p.repeats if p.repeats is not None else [p]
        out.extend(source(r, th) for r in (reps or [p]))
    return tuple(out)


def colocated_load(recs: Sequence[RunResult]) -> None:
    """Each co-located job's together run gets ``load.colocated_cores``: the cores its
    co-located jobs used themselves in the same repeat (each partner's own ``cpu_util_pct``,
    a share of the cores it could run on, ``env.cores``), weighted by the share of the run's
    timed window that the partner's window covered. Its outside figure holds them by design,
    so the load ``run_load`` judges is net of them. Only finished partners with a known
    window count, one record per partner job (the most overlap): a failed or rerun attempt is
    not subtracted again. Worked out from the records alone, so calling it again changes
    nothing."""
    groups: dict[tuple[Any, ...], list[RunResult]] = {}
    for r in recs:
        if r.exp_kind != "colocate" or r.point.get("phase") != "together":
            continue
        groups.setdefault((r.source, r.exp_id, r.repeat), []).append(r)
    for group in groups.values():
        for r in group:
            best: dict[str, tuple[float, float]] = {}  # partner job -> (overlap share, cores)
            for o in group:
                pct = o.metrics.cpu_util_pct
                cores = o.env_number("cores") or (o.load.machine_cores if o.load else None)
                share = _overlap_share(r, o)
                if _job(o) == _job(r) or o.status != "ok" or pct is None or not cores \
                        or not share:
                    continue
                if share > best.get(_job(o), (0.0, 0.0))[0]:
                    best[_job(o)] = (share, pct / 100.0 * cores * share)
            if best:
                r.load = r.load or Load()
                r.load.colocated_cores = sum(c for _, c in best.values())
                r.load.colocated_jobs = sorted(best)


def colocate_sources(runs: Sequence[RunResult], job: str,
                     th: Thresholds = DEFAULT) -> tuple[Source, ...]:
    """A co-located job's slowdown claim's sources: its runs alone and together in every
    repeat (``runs``: the experiment's run records, in the order they ran), each judged by
    ``run_load``, a run together net of its partner jobs' own CPU use (``colocated_load``,
    worked out here over ``runs``). The report's Co-location section and ``scaleprobe
    colocate``'s colocate.md and terminal both call this, so they name the same runs."""
    colocated_load(runs)
    return sources([r for r in runs if _job(r) == job], th)


def _job(r: RunResult) -> str:
    return str(r.point.get("job"))


def _overlap_share(a: RunResult, b: RunResult) -> float:
    """The share of run ``a``'s timed window (wall clock) that ``b``'s covered; 0 when either
    window is unknown."""
    wa, wb = a.metrics.window_clock, b.metrics.window_clock
    if not (isinstance(wa, list) and isinstance(wb, list) and len(wa) == len(wb) == 2):
        return 0.0
    try:
        span = float(wa[1]) - float(wa[0])
        both = min(float(wa[1]), float(wb[1])) - max(float(wa[0]), float(wb[0]))
    except (TypeError, ValueError):
        return 0.0
    return max(0.0, min(1.0, both / span)) if span > 0 else 0.0
