"""Co-located jobs: per-job slowdown, totals, a verdict with the evidence behind it, and the
Markdown table (printed and written to ``colocate.md``).

Pure functions over plain numbers (no processes, no torch), so the rules are unit-tested with
hand-made figures. ``slowdown`` is a ratio: samples/s alone / samples/s together (1.35 means
the job ran 35% longer per step when it shared the machine).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scaleprobe.report.fmt import md_table, num, rate, ratio, seconds
from scaleprobe.report.thresholds import DEFAULT

NO_INTERFERENCE_BELOW = DEFAULT.colocate_slowdown  # every job within 10% of its speed alone
CPU_SATURATED_PCT = DEFAULT.colocate_cpu_pct  # machine-wide CPU use while together
GPU_BUSY_PCT = DEFAULT.colocate_gpu_pct  # GPU utilisation while together

VERDICTS = ("no interference", "CPU saturated", "device contention",
            "interference without saturation", "not measured")


@dataclass(frozen=True)
class JobFigures:
    name: str
    alone_samples_per_s: float | None
    together_samples_per_s: float | None
    alone_epoch_time_s: float | None = None
    together_epoch_time_s: float | None = None

    @property
    def slowdown(self) -> float | None:
        a, t = self.alone_samples_per_s, self.together_samples_per_s
        return a / t if a and t else None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "alone_samples_per_s": self.alone_samples_per_s,
                "together_samples_per_s": self.together_samples_per_s,
                "alone_epoch_time_s": self.alone_epoch_time_s,
                "together_epoch_time_s": self.together_epoch_time_s,
                "slowdown": self.slowdown}


def _slow_list(jobs: list[JobFigures]) -> str:
    return ", ".join(f"{j.name} {j.slowdown:.2f}x" for j in jobs if j.slowdown is not None)


def verdict(jobs: list[JobFigures], cpu_util_pct: float | None, gpu_util_pct: float | None,
            share_gpu: bool = False, cores: int | None = None,
            threads_total: int | None = None, placement: str = "shared") -> tuple[str, str]:
    """(verdict, evidence) from the jobs' slowdowns and the machine's use while together.

    - "no interference": every job within 10% of its speed alone.
    - "CPU saturated": the machine's CPUs were >= 90% busy while together, and jobs slowed.
    - "device contention": jobs slowed while the CPU was not saturated, and either the GPU
      was >= 90% busy or the jobs shared one GPU.
    - "interference without saturation": jobs slowed but neither the CPU nor a GPU was
      saturated: they compete for something not sampled (memory bandwidth, caches, disk).
    """
    slow = [j.slowdown for j in jobs if j.slowdown is not None]
    if not slow or len(slow) < len(jobs):
        missing = [j.name for j in jobs if j.slowdown is None]
        return "not measured", f"no samples/s alone and together for: {', '.join(missing)}"
    detail = _slow_list(jobs)
    if max(slow) < NO_INTERFERENCE_BELOW:
        return ("no interference", f"every job ran within {NO_INTERFERENCE_BELOW - 1:.0%} of its "
                f"speed alone ({detail})")
    cpu = "not sampled" if cpu_util_pct is None else f"{cpu_util_pct:.0f}% busy"
    gpu = "not sampled" if gpu_util_pct is None else f"{gpu_util_pct:.0f}% busy"
    if cpu_util_pct is not None and cpu_util_pct >= CPU_SATURATED_PCT:
        extra = ""
        if cores and threads_total and threads_total > cores:
            extra = f"; {threads_total} compute threads on {cores} cores"
            if placement == "shared":
                extra += " (placement = \"pinned\" gives each job its own cores)"
        return "CPU saturated", f"machine CPU {cpu} while together, jobs slower ({detail}){extra}"
    gpu_busy = gpu_util_pct is not None and gpu_util_pct >= GPU_BUSY_PCT
    if gpu_busy or share_gpu:
        why = "the GPU was saturated" if gpu_busy else "the jobs shared one GPU"
        return ("device contention", f"{why} (GPU {gpu}) while the CPU was not ({cpu}); "
                f"jobs slower together ({detail})")
    return ("interference without saturation",
            f"jobs slower together ({detail}) although neither the CPU ({cpu}) nor a GPU "
            f"({gpu}) was saturated: they compete for memory bandwidth, caches or I/O")


def totals(jobs: list[JobFigures]) -> dict[str, float | None]:
    alone = [j.alone_samples_per_s for j in jobs]
    together = [j.together_samples_per_s for j in jobs]
    return {
        "total_samples_per_s_alone_sum": sum(alone) if all(v is not None for v in alone)
        else None,
        "total_samples_per_s_together": sum(together) if all(v is not None for v in together)
        else None,
    }


def throughput_line(t: dict[str, float | None], n_jobs: int) -> str:
    """What running together bought, compared with running the jobs one after another."""
    a, b = t["total_samples_per_s_alone_sum"], t["total_samples_per_s_together"]
    if not a or b is None:
        return "total throughput: not measured"
    # the sum of the speeds alone is what perfect sharing would deliver
    return (f"total throughput together {rate(b)} samples/s = {b / a:.0%} of the {rate(a)} "
            f"samples/s the {n_jobs} jobs reach each on its own (100% = no interference)")


HEADERS = ("job", "samples/s alone", "samples/s together", "epoch time alone",
           "epoch time together", "slowdown")


def colocate_rows(rec: dict[str, Any]) -> list[list[str]]:
    rows = [[j["name"], rate(j["alone_samples_per_s"]), rate(j["together_samples_per_s"]),
             seconds(j["alone_epoch_time_s"]), seconds(j["together_epoch_time_s"]),
             ratio(j["slowdown"])] for j in rec["jobs"]]
    a, t = rec.get("total_samples_per_s_alone_sum"), rec.get("total_samples_per_s_together")
    rows.append(["**total**", rate(a) + " (sum)", rate(t), "", "",
                 ratio(a / t) if a and t else "n/a"])
    return rows


def render_colocate(rec: dict[str, Any]) -> str:
    cpu, gpu = rec.get("cpu_util_pct_together"), rec.get("gpu_util_pct_together")
    lines = [
        f"## Co-located jobs: {rec['experiment']['id']}",
        "",
        f"- placement: {rec.get('placement_note') or rec['placement']}",
        f"- machine while together: CPU {num(cpu, '.0f', '%')} (whole machine, sampled while "
        f"every job was running: {num(rec.get('overlap_s'), '.1f', ' s')}), "
        f"GPU {num(gpu, '.0f', '%')}",
        "",
        md_table(HEADERS, colocate_rows(rec)),
        "",
        f"- {rec.get('throughput', '')}",
        f"- **verdict: {rec['verdict']}** - {rec['evidence']}",
        "",
    ]
    return "\n".join(lines)
