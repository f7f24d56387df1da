"""The host's side of a run's result: memory (the peaks, the net of what the ranks held
before, the training state), page faults a step, gloo's socket threads' CPU a step, and the
energy per sample. Part of ``build_result`` (run/assemble.py): pure functions of the ranks'
records and the monitor's summaries."""

from __future__ import annotations

from typing import Any

from scaleprobe.core import metrics as M
from scaleprobe.core.rank_record import RankRecord
from scaleprobe.core.result_model import RunResult
from scaleprobe.core.run_metrics import PeakMem, StateBytes
from scaleprobe.measure.held import summarize_held


def memory(result: RunResult, ranks: list[RankRecord], mon: dict[str, Any]) -> None:
    """The peaks (the host's: the process tree's sampled peak or the ranks' own, whichever
    is larger; the device's), the host peak net of what the ranks held before, the training
    state each rank holds and what a memory prediction reads (the first rank's facts)."""
    m, why = result.metrics.peak_mem_bytes, result.null_reasons
    rss = [r.mem.host_peak_rss for r in ranks if r.mem.host_peak_rss]
    cand = [v for v in (mon.get("host_mem_peak_bytes"), sum(rss) if rss else None) if v]
    m.host = max(cand) if cand else None
    _host_net(m, why, ranks)
    alloc = [r.mem.device_allocated for r in ranks if r.mem.device_allocated is not None]
    resv = [r.mem.device_reserved for r in ranks if r.mem.device_reserved is not None]
    m.device_allocated = max(alloc) if alloc else None
    m.device_reserved = max(resv) if resv else None
    m.device_nvml = mon.get("gpu_mem_peak_bytes")
    if not alloc:
        why["peak_mem_bytes.device_allocated"] = "no CUDA device: ran on the CPU"
        why["peak_mem_bytes.device_reserved"] = "no CUDA device: ran on the CPU"
    if m.device_nvml is None:
        why["peak_mem_bytes.device_nvml"] = mon.get("gpu_reason") or "no NVML reading"
    held = summarize_held(ranks)
    result.metrics.state_bytes = StateBytes.from_dict(held) if held else None
    if held is None:
        why["state_bytes"] = "no training rank read its state (no step ran)"
    facts = [r.memory_facts for r in ranks if r.memory_facts is not None]
    result.metrics.memory_facts = facts[0] if facts else None
    if not facts:
        why["memory_facts"] = ("no training rank recorded them (interrupted, no step ran, or "
                               "a user's script under wrap, which owns its step)")


def _host_net(m: PeakMem, why: dict[str, str], ranks: list[RankRecord]) -> None:
    """Host peak net of what every rank held before its model and data were built (torch
    itself, about 750 MiB on the CPU) and of the library code the ranks first touched since
    (``host_file_growth``): the part of the peak that the run's settings move, the same
    whether a process started fresh or was forked from one that had imported torch. Net of
    the training processes' own peaks: loader workers' memory counts in ``host`` only."""
    base = [r.mem.host_baseline_rss for r in ranks]
    m.host_baseline = sum(b for b in base if b) if base and all(base) else None
    grown = [r.mem.host_file_growth for r in ranks if r.mem.host_file_growth is not None]
    m.host_file_growth = sum(grown) if ranks and len(grown) == len(ranks) else None
    m.host_net = None
    if m.host_file_growth is None:
        why["peak_mem_bytes.host_file_growth"] = ("no file-backed resident-memory reading "
                                                  "(Linux's RssFile)")
    if m.host_baseline is None:
        why["peak_mem_bytes.host_baseline"] = "no resident-memory reading before the model was built"
        why["peak_mem_bytes.host_net"] = why["peak_mem_bytes.host_baseline"]
        return
    # the ranks' own peaks (the kernel's, exact), not the sampled figure of the process tree:
    # a sample can catch library pages the kernel then takes back under memory pressure, which
    # the peak never counted and the growth cannot subtract (136 MiB "net" for a 16 MiB run)
    peaks = [r.mem.host_peak_rss for r in ranks]
    own = sum(p for p in peaks if p) if peaks and all(peaks) else None
    if own is None:
        why["peak_mem_bytes.host_net"] = "no host peak reading"
    elif own - (m.host_file_growth or 0) < m.host_baseline:
        why["peak_mem_bytes.host_net"] = "host peak below the baseline: inconsistent readings"
    else:
        m.host_net = own - m.host_baseline - (m.host_file_growth or 0)


def page_faults(result: RunResult, ranks: list[RankRecord]) -> None:
    """Page faults a timed step: the most of any training rank (the slowest sets the pace)."""
    per = [r.page_faults / r.steps_timed for r in ranks
           if not r.is_server and r.page_faults is not None and r.steps_timed > 0]
    if per:
        result.metrics.page_faults_per_step = round(max(per), 1)
    else:
        result.null_reasons.setdefault("page_faults_per_step", "no timed step counted them")


def gloo_io(result: RunResult, ranks: list[RankRecord]) -> None:
    """gloo's socket threads' CPU a timed step: the most of any training rank (None where no
    rank has a gloo process group: one process, or NCCL)."""
    per = [r.gloo_io_cpu_s / r.steps_timed for r in ranks
           if not r.is_server and r.gloo_io_cpu_s is not None and r.steps_timed > 0]
    if per:
        result.metrics.gloo_io_cpu_per_step_s = round(max(per), 6)


def energy(result: RunResult, mon: dict[str, Any]) -> None:
    """Joules per sample and per token over the timed window; to the target, where one was
    reached, the window's draw x the time to it. Null with the reason without a GPU."""
    m, why = result.metrics, result.null_reasons
    watts = mon.get("gpu_energy_w")
    m.joules_per_sample = M.joules_per_sample(watts, m.samples_per_s)
    m.energy_method = mon.get("gpu_energy_method") if m.joules_per_sample is not None else None
    tps = result.batch.tokens_per_sample
    m.joules_per_token = m.joules_per_sample / tps if m.joules_per_sample and tps else None
    if m.joules_per_sample is None:
        why["joules_per_sample"] = (mon.get("gpu_reason") or "no NVML power or energy reading"
                                    if watts is None else why.get("samples_per_s", "no rate"))
        if tps:
            why["joules_per_token"] = why["joules_per_sample"]
