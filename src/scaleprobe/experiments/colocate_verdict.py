"""Co-located jobs: per-job slowdown with its interval over repeats, totals, a verdict with the
evidence behind it (the Markdown table of the record is ``report/render/colocate.py``'s).

Pure functions over plain numbers (no processes, no torch), so the rules are unit-tested with
hand-made repeat figures. ``slowdown`` is ``metrics.slowdown``: samples/s alone / samples/s
together (1.35 means the job took 35% longer per sample when it shared the machine).

Every repeat runs the jobs alone (one after another) and then together, so repeat ``i`` alone
is paired with repeat ``i`` together; the slowdown's 95% interval is ``metrics.ratio_interval``
over those pairs. A job's figures are geometric means over the paired repeats, so its
``slowdown`` is exactly the interval's centre.

Each claim is made only when the intervals decide it: a job's reading is a
``core.claim.Claim`` of its slowdown against 1; the verdicts across jobs (no interference,
CPU saturated, device contention, interference without saturation, inconclusive) are
docs/EXPERIMENTS.md's table, with their bars.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scaleprobe.core import claim as CL
from scaleprobe.core import claim_kinds as CK
from scaleprobe.core import metrics
from scaleprobe.core.fmt import rate, ratio
from scaleprobe.core.thresholds import DEFAULT

NO_INTERFERENCE_BELOW = DEFAULT.colocate_slowdown  # every job within 10% of its speed alone
CPU_SATURATED_PCT = DEFAULT.colocate_cpu_pct  # machine-wide CPU use while together
GPU_BUSY_PCT = DEFAULT.colocate_gpu_pct  # GPU utilisation while together

INTERFERENCE = ("CPU saturated", "device contention", "interference without saturation")
VERDICTS = ("no interference", *INTERFERENCE, CL.INCONCLUSIVE, CL.NOT_MEASURED)
READINGS = (CL.SLOWER_TOGETHER, CL.FASTER_TOGETHER, CL.NOT_RESOLVED, CL.ONE_REPEAT,
            CL.NO_INTERVAL, CL.NOT_MEASURED)


Figures = Sequence[float | None]


def _ok(v: float | None) -> bool:
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v) and v > 0


def _gmean(vals: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def _at(seq: Figures, i: int) -> float | None:
    return seq[i] if i < len(seq) else None


@dataclass(frozen=True)
class JobFigures:
    """One job's figures, one entry per repeat (``None`` where a run gave none)."""

    name: str
    alone: tuple[float | None, ...]  # samples/s alone
    together: tuple[float | None, ...]  # samples/s together
    alone_epoch_s: tuple[float | None, ...] = ()
    together_epoch_s: tuple[float | None, ...] = ()
    # within-run spread: relative 95% CI half-width of each run's median step time
    alone_rel_ci: tuple[float | None, ...] = ()
    together_rel_ci: tuple[float | None, ...] = ()
    # the runs the slowdown stands on, alone and together, with their load as the report
    # judges it: a together run's net of its partners' own CPU use, which it holds by design
    # (core/machine_load.colocate_sources)
    sources: tuple[CL.Source, ...] = ()

    @property
    def paired(self) -> list[int]:
        """Repeats with samples/s both alone and together."""
        return [i for i in range(min(len(self.alone), len(self.together)))
                if _ok(self.alone[i]) and _ok(self.together[i])]

    def _mean(self, seq: Figures) -> float | None:
        return _gmean([v for i in self.paired if _ok(v := _at(seq, i))])  # type: ignore[misc]

    @property
    def alone_samples_per_s(self) -> float | None:
        return self._mean(self.alone)

    @property
    def together_samples_per_s(self) -> float | None:
        return self._mean(self.together)

    @property
    def slowdown(self) -> float | None:
        return metrics.slowdown(self.alone_samples_per_s, self.together_samples_per_s)

    @property
    def slowdowns(self) -> list[float | None]:
        """Per repeat: alone / together of that repeat."""
        return [metrics.slowdown(a, t) for a, t in zip(self.alone, self.together, strict=False)]

    @property
    def interval(self) -> metrics.Interval | None:
        """alone / together over the paired repeats (ratio_interval gives B / A)."""
        return metrics.ratio_interval(self.together, self.alone, self.together_rel_ci,
                                      self.alone_rel_ci)

    @property
    def claim(self) -> CL.Claim:
        return CK.slowdown_claim(self.name, self.slowdown, self.interval, self.sources)

    @property
    def reading(self) -> str:
        """``slower together``, ``faster together``, ``not resolved``, ``inconclusive (1
        repeat)`` (never "within noise": one repeat decides nothing), ``no interval``."""
        return self.claim.short_verdict

    def to_dict(self) -> dict[str, Any]:
        iv = self.interval
        return {"name": self.name, "alone_samples_per_s": self.alone_samples_per_s,
                "together_samples_per_s": self.together_samples_per_s,
                "alone_epoch_time_s": self._mean(self.alone_epoch_s),
                "together_epoch_time_s": self._mean(self.together_epoch_s),
                "slowdown": self.slowdown,
                "slowdown_interval": iv.to_dict() if iv is not None else None,
                "reading": self.reading, "under_load": self.claim.under_load,
                "load_caveat": CL.load_caveat(self.sources) or None,
                "alone_samples_per_s_repeats": list(self.alone),
                "together_samples_per_s_repeats": list(self.together),
                "slowdown_repeats": self.slowdowns}


def _iv_short(iv: metrics.Interval | None, est: float | None) -> str:
    if iv is None:
        return f"{ratio(est)} (no interval)"
    return iv.short()


def readings_text(jobs: list[JobFigures]) -> str:
    """``slower together: a 1.67x [1.50, 1.86]; faster together: b 0.78x [0.70, 0.87]``: each
    job under what its interval shows (a job faster together is never listed as slower)."""
    groups: dict[str, list[str]] = {}
    for j in jobs:
        groups.setdefault(j.reading, []).append(f"{j.name} {_iv_short(j.interval, j.slowdown)}")
    n = max((j.interval.n for j in jobs if j.interval is not None), default=0)
    text = "; ".join(f"{r}: {', '.join(groups[r])}" for r in READINGS if r in groups)
    return f"{text} (slowdown = alone / together, 95% interval over {n} repeat(s))"


def _machine(cpu_util_pct: float | None, gpu_util_pct: float | None) -> tuple[str, str]:
    cpu = "not sampled" if cpu_util_pct is None else f"{cpu_util_pct:.0f}% busy"
    gpu = "not sampled" if gpu_util_pct is None else f"{gpu_util_pct:.0f}% busy"
    return cpu, gpu


def verdict(jobs: list[JobFigures], cpu_util_pct: float | None, gpu_util_pct: float | None,
            share_gpu: bool = False, cores: int | None = None,
            threads_total: int | None = None, placement: str = "shared") -> tuple[str, str]:
    """(verdict, evidence) from the jobs' slowdown intervals and the machine's measured use
    while together (CPU: machine-wide, sampled by the parent; never counted from threads).

    ``threads_total`` and ``cores`` are context in the evidence of "CPU saturated", never the
    reason for it."""
    missing = [j.name for j in jobs if j.slowdown is None]
    if not jobs or missing:
        return CL.NOT_MEASURED, f"no samples/s alone and together for: {', '.join(missing)}"
    ref = NO_INTERFERENCE_BELOW
    detail = readings_text(jobs)
    cpu, gpu = _machine(cpu_util_pct, gpu_util_pct)
    hurt = [j for j in jobs if j.interval is not None and j.interval.above(ref)]
    if not hurt:
        if all(j.interval is not None and j.interval.below(ref) for j in jobs):
            return ("no interference", f"every job's slowdown interval lies below {ref:.2f}x "
                    f"(within {ref - 1:.0%} of its speed alone): {detail}")
        undecided = [j for j in jobs if j.interval is None or not j.interval.below(ref)]
        why = "; ".join(CL.undecided(j.interval, ref, f"{j.name}'s slowdown")
                        .removeprefix(CL.INCONCLUSIVE + ": ") for j in undecided)
        rest = [j for j in jobs if j not in undecided]
        others = f"; below {ref:.2f}x: {readings_text(rest)}" if rest else ""
        return (CL.INCONCLUSIVE, f"the intervals do not decide between no interference (every "
                f"job below {ref:.2f}x) and interference (one above it): {why}{others}; "
                f"machine CPU {cpu}, GPU {gpu} while together")
    slow = ", ".join(f"{j.name} {_iv_short(j.interval, j.slowdown)}" for j in hurt)
    slow = f"slowdown above {ref:.2f}x: {slow}"
    if cpu_util_pct is not None and cpu_util_pct >= CPU_SATURATED_PCT:
        extra = ""
        if cores and threads_total and threads_total > cores:
            extra = f"; context: {threads_total} compute threads on {cores} cores"
            if placement == "shared":
                extra += " (placement = \"pinned\" gives each job its own cores)"
        return ("CPU saturated", f"machine CPU {cpu} while together (threshold "
                f"{CPU_SATURATED_PCT:.0f}%), {slow}; {detail}{extra}")
    gpu_busy = gpu_util_pct is not None and gpu_util_pct >= GPU_BUSY_PCT
    if gpu_busy or share_gpu:
        why = "the GPU was saturated" if gpu_busy else "the jobs shared one GPU"
        return ("device contention", f"{why} (GPU {gpu}) while the CPU was not ({cpu}); "
                f"{slow}; {detail}")
    return ("interference without saturation",
            f"{slow}, although neither the CPU ({cpu}) nor a GPU ({gpu}) was saturated: they "
            f"compete for memory bandwidth, caches or I/O; {detail}")


def totals(jobs: list[JobFigures]) -> dict[str, float | None]:
    def total(vals: list[float | None]) -> float | None:
        return sum(v for v in vals if v is not None) if all(v is not None for v in vals) \
            else None

    return {"total_samples_per_s_alone_sum": total([j.alone_samples_per_s for j in jobs]),
            "total_samples_per_s_together": total([j.together_samples_per_s for j in jobs])}


def total_interval(jobs: list[JobFigures]) -> metrics.Interval | None:
    """Total samples/s together / the sum alone, paired by repeat (repeats where every job has
    both figures)."""
    n = min((min(len(j.alone), len(j.together)) for j in jobs), default=0)
    full = [i for i in range(n) if all(i in j.paired for j in jobs)]
    alone = [sum(j.alone[i] for j in jobs) for i in full]  # type: ignore[misc]
    together = [sum(j.together[i] for j in jobs) for i in full]  # type: ignore[misc]
    return metrics.ratio_interval(alone, together)


def throughput_line(t: dict[str, float | None], n_jobs: int,
                    iv: dict[str, Any] | None = None) -> str:
    """What running together bought, compared with running the jobs one after another."""
    a, b = t["total_samples_per_s_alone_sum"], t["total_samples_per_s_together"]
    if not a or b is None:
        return "total throughput: not measured"
    spread = ""
    interval = metrics.interval_of(iv)
    if interval is not None:
        spread = " " + interval.bounds("{:.0%}".format)
    # the sum of the speeds alone is what perfect sharing would deliver
    return (f"total throughput together {rate(b)} samples/s = {b / a:.0%}{spread} of the "
            f"{rate(a)} samples/s the {n_jobs} jobs reach each on its own (100% = no "
            "interference)")
