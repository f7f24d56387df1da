"""Per-run findings that give the same advice, told once.

A sweep of 9 points x 3 repeats gave 36 per-run warnings, most of them the same verdict with
the same long next step. ``group_findings`` makes one finding per (severity, verdict, next
step): the runs it is about, listed; the evidence as the range of the verdict's key figure
over those runs, with the strongest case written out; the next step once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scaleprobe.core import fmt
from scaleprobe.core.invariants import uneven_steps
from scaleprobe.core.result_model import RunResult
from scaleprobe.report.findings.finding import Finding
from scaleprobe.report.reading.machine_load import outside_cores

MOST_NAMED = 8  # runs named in a group's About before "and N more"


def _compute_share(rec: RunResult) -> float | None:
    bd = rec.metrics.breakdown_s
    c, t = bd.compute_s(), bd.measured_total_s()
    return c / t if c is not None and t else None


def _window_ratio(rec: RunResult) -> float | None:
    gap = uneven_steps(rec)
    return gap[0] / gap[1] if gap else None


def device_peak(rec: RunResult) -> tuple[float, float] | None:
    """The run's device memory peak (the largest of its readings: allocated, reserved,
    NVML's) and the device's total; None where either is unknown."""
    pm = rec.metrics.peak_mem_bytes
    readings = [v for v in (pm.device_allocated, pm.device_reserved, pm.device_nvml)
                if v is not None]
    total = rec.gpu_total_bytes
    return (max(readings), total) if readings and total else None


def _device_share(rec: RunResult) -> float | None:
    got = device_peak(rec)
    return got[0] / got[1] if got else None


def _cores(v: float) -> str:
    return f"{v:.2f} cores"


def _faults(v: float) -> str:
    return f"{v:,.0f}"


# verdict -> (what the figure is, the figure of one run, its format, what follows the range)
KeyFigure = tuple[str, Callable[[RunResult], Any], Callable[[Any], str], str]
KEY_FIGURES: dict[str, KeyFigure] = {
    "input-bound": ("data wait", lambda r: r.metrics.data_wait_fraction, fmt.pct,
                    "of each step"),
    "input-bound at epoch starts": ("data wait at epoch starts",
                                    lambda r: r.metrics.epoch_start_data_share, fmt.pct,
                                    "of the data wait"),
    "communication-bound": ("exposed communication", lambda r: r.metrics.comm_fraction,
                            fmt.pct, "of each step"),
    "synchronisation overhead": ("exposed communication",
                                 lambda r: r.metrics.comm_fraction, fmt.pct,
                                 "of each step"),
    "CPU saturated": ("CPU use", lambda r: r.metrics.cpu_util_pct, fmt.pct_value,
                      "of all cores"),
    "measured under load": ("load from outside the run", outside_cores, _cores, "on average"),
    "straggler": ("slowest rank",
                  lambda r: r.straggler.slowest_vs_median if r.straggler else None,
                  fmt.ratio, "the median rank's step time"),
    "compute-bound": ("compute", _compute_share, fmt.pct, "of each step"),
    "steps vary widely": ("samples/s from the median step", _window_ratio, fmt.ratio,
                          "the whole window's"),
    "CPU-starved": ("CPU use", lambda r: r.metrics.cpu_util_pct, fmt.pct_value,
                    "of all cores by the run's processes"),
    "not compute-bound": ("MFU", lambda r: r.metrics.mfu, fmt.mfu, "of the peak"),
    "memory headroom": ("device peak", _device_share, fmt.pct, "of the device's memory"),
    "memory taken afresh every step": ("page faults", lambda r: r.metrics.page_faults_per_step,
                                       _faults, "a timed step"),
}
# verdicts whose lead cell is the count of runs, not a figure: each is an event (it
# happened to N runs), not a measurement with a spread
COUNTED: dict[str, str] = {
    "target not reached": "each ended before its target",
    "interrupted": "each was stopped before it finished",
    "shard audit failed": "replicas saw overlapping data in each",
    "out of memory": "each ran out of memory",
    "failed": "each failed",
    "invariant broken": "a recorded figure contradicts another in each",
}


def counted(verdict: str) -> str | None:
    """What a counted verdict says happened to each run (``invariant broken: NAME`` by its
    prefix), or None."""
    return COUNTED.get(verdict.split(":", 1)[0])


@dataclass
class Group:
    """One finding standing for several runs, with the runs and their key figures."""
    finding: Finding
    recs: list[RunResult] = field(default_factory=list)
    figures: list[float] = field(default_factory=list)  # the key figure of each run, if any

    def range_text(self) -> str | None:
        """``data wait 11%-19% of each step``; None when the verdict has no key figure."""
        key = KEY_FIGURES.get(self.finding.verdict)
        if key is None or not self.figures:
            return None
        what, _, form, tail = key
        lo, hi = min(self.figures), max(self.figures)
        a, b = form(lo), form(hi)
        unit = b.split(" ", 1)[1] if " " in b else ""
        if unit and a.endswith(" " + unit):  # '0.27-1.43 cores', not '0.27 cores-1.43 cores'
            a = a[: -len(unit) - 1]
        span = b if form(lo) == b else f"{a}-{b}"
        return f"{what} {span} {tail}"


def group_findings(pairs: list[tuple[RunResult, Finding]]) -> list[Group]:
    """``pairs``: (run record, one of its findings, subject = the run's label). One group per
    (severity, verdict, next step), in first-seen order."""
    groups: dict[tuple[str, str, str], list[tuple[RunResult, Finding]]] = {}
    for rec, f in pairs:
        groups.setdefault((f.severity, f.verdict, f.recommendation), []).append((rec, f))
    return [_group(members) for members in groups.values()]


def _group(members: list[tuple[RunResult, Finding]]) -> Group:
    first = members[0][1]
    if len(members) == 1:
        return Group(first, [members[0][0]], _figures(first.verdict, [members[0][0]]))
    recs = [m[0] for m in members]
    figs = _figures(first.verdict, recs)
    names = [m[1].subject for m in members]
    about = f"{len(names)} runs: " + "; ".join(names[:MOST_NAMED]) + (
        f" and {len(names) - MOST_NAMED} more" if len(names) > MOST_NAMED else "")
    group = Group(first, recs, figs)
    spread = group.range_text()
    evidences = list(dict.fromkeys(m[1].evidence for m in members))
    if len(evidences) == 1:
        evidence = evidences[0]
    elif spread is not None:
        strongest = _strongest(first.verdict, members)
        evidence = f"{spread} over these runs; the most: {strongest.subject}: {strongest.evidence}"
    else:
        shown = "; ".join(f"{m[1].subject}: {m[1].evidence}" for m in members[:3])
        evidence = shown + (f"; and {len(members) - 3} more" if len(members) > 3 else "")
    group.finding = Finding(first.verdict, evidence, first.recommendation, first.severity, about)
    return group


def _figures(verdict: str, recs: list[RunResult]) -> list[float]:
    key = KEY_FIGURES.get(verdict)
    if key is None:
        return []
    return [v for v in (key[1](r) for r in recs) if isinstance(v, (int, float))]


def _strongest(verdict: str, members: list[tuple[RunResult, Finding]]) -> Finding:
    fig = KEY_FIGURES[verdict][1]
    scored = [(fig(rec), f) for rec, f in members]
    known = [(v, f) for v, f in scored if isinstance(v, (int, float))]
    return max(known, key=lambda vf: vf[0])[1] if known else members[0][1]
