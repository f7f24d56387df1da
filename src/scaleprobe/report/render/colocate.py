"""A co-location record as Markdown: the jobs' table (samples/s and epoch time alone and
together, the slowdown with its interval, each job's reading), the machine while together,
the throughput line and the verdict with its evidence; printed by ``scaleprobe colocate`` and
written to ``colocate.md`` (``run_colocate(..., render=render_colocate)``). The verdict itself
is the experiment's (``experiments/colocate_verdict.py``); this module only lays it out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from scaleprobe.core import metrics
from scaleprobe.core.experiment_records import ColocateRecord
from scaleprobe.core.fmt import duration, md_table, num, rate, ratio

# epoch times on the timed window's basis (samples per epoch / the samples/s beside them):
# projected, and the slowdowns by samples/s and by epoch time agree
HEADERS = ("job", "samples/s alone", "samples/s together", "epoch time alone (projected)",
           "epoch time together (projected)", "slowdown", "95% interval", "reading")


def _interval_cell(j: Mapping[str, Any]) -> str:
    iv = metrics.interval_of(j.get("slowdown_interval"))
    return "n/a" if iv is None else iv.bounds()


def job_rows(jobs: Iterable[Mapping[str, Any]],
             loaded: list[bool] | None = None) -> list[list[str]]:
    """One row a job, in ``HEADERS``' order (colocate.md and the report's section). A
    reading whose runs were measured under load says so: as the record judged its runs
    alone, or (``loaded``, one per job) as the report judges them."""
    jobs = list(jobs)
    flags = loaded if loaded is not None else [bool(j.get("under_load")) for j in jobs]
    return [[str(j.get("name") or "n/a"), rate(j.get("alone_samples_per_s")),
             rate(j.get("together_samples_per_s")), duration(j.get("alone_epoch_time_s")),
             duration(j.get("together_epoch_time_s")), ratio(j.get("slowdown")),
             _interval_cell(j), str(j.get("reading") or "n/a")
             + (", under load" if flag else "")]
            for j, flag in zip(jobs, flags, strict=False)]


def colocate_rows(rec: ColocateRecord) -> list[list[str]]:
    rows = job_rows(rec.jobs)
    a, t = rec.total_samples_per_s_alone_sum, rec.total_samples_per_s_together
    rows.append(["**total**", rate(a) + " (sum)", rate(t), "", "",
                 ratio(metrics.slowdown(a, t)), "", ""])
    return rows


def _repeats_line(rec: ColocateRecord) -> str:
    n = rec.repeats or 1
    cpus = rec.cpu_util_pct_together_repeats or []
    per = ", ".join(num(c, ".0f", "%") for c in cpus)
    return (f"- repeats: {n}, interleaved (each job alone, then all together, per repeat; each "
            "run in its own process); figures are geometric means over the repeats, intervals "
            "a paired t on the log ratios" + (f"; machine CPU together per repeat: {per}"
                                              if len(cpus) > 1 else "")
            + _overlap_text(rec))


def _overlap_text(rec: ColocateRecord) -> str:
    """The jobs' timed windows, open together, per repeat (absent in older records)."""
    ov = rec.window_overlap_repeats
    if not isinstance(ov, list) or not any(isinstance(v, (int, float)) for v in ov):
        return ""
    return "; share of each job's timed window with every job running, smallest per repeat: " + ", ".join(
        num(v * 100 if isinstance(v, (int, float)) else None, ".0f", "%") for v in ov)


def render_colocate(rec: ColocateRecord) -> str:
    cpu, gpu = rec.cpu_util_pct_together, rec.gpu_util_pct_together
    lines = [
        f"## Co-located jobs: {rec.exp_id}",
        "",
        f"- placement: {rec.placement_note or rec.placement}",
        _repeats_line(rec),
        f"- machine while together: CPU {num(cpu, '.0f', '%')} (whole machine, sampled while "
        f"every job was running: {num(rec.overlap_s, '.1f', ' s')}), "
        f"GPU {num(gpu, '.0f', '%')}",
        "",
        md_table(HEADERS, colocate_rows(rec), right=[False] + [True] * 6 + [False]),
        "",
        f"- {rec.throughput or ''}",
        f"- **verdict: {rec.verdict}** - {rec.evidence}",
        *[f"- {j.get('name')}: {j['load_caveat']} (load on a run alone makes the job's "
          "slowdown look smaller than it is, on a run together larger)"
          for j in rec.jobs if j.get("load_caveat")],
        "",
    ]
    return "\n".join(lines)
