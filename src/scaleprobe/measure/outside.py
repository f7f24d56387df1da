"""What other processes did while the run was measured: CPU time used outside the run's own
process tree, and compute processes of others on the run's GPUs.

At every monitor sample two cumulative clocks are read, the machine's busy CPU time and the
run tree's (its exited children included, so a reaped worker still counts as the run's);
outside CPU seconds over a window are their difference between the samples that enclose it.
On the GPUs, NVML's compute processes whose pids are not in the tree are the run's
neighbours. docs/REPORTS.md ("Measured under load") gives what each clock counts and leaves
out, and when the GPU figure is null.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import psutil


def machine_busy_s() -> float:
    t = psutil.cpu_times()
    return float(t.user + t.nice + t.system)


def tree_cpu_s(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        try:
            c = p.cpu_times()
        except psutil.Error:
            continue  # gone: its time moved into its parent's children_* on reaping
        total += c.user + c.system + c.children_user + c.children_system
    return total


@dataclass
class ClockSample:
    t: float  # time.time()
    machine_s: float
    tree_s: float


class OutsideLoad:
    """Samples for the outside-the-tree figures; ``window(t0, t1)`` gives them."""

    def __init__(self, gpu_reason: str | None = None) -> None:
        self.clock: list[ClockSample] = []
        self.machine_cores = psutil.cpu_count() or 1
        self.gpu_reason = gpu_reason  # why GPU neighbours cannot be seen, or None
        self.gpu_seen: dict[tuple[int, int], dict[str, Any]] = {}  # (device, pid) -> entry
        self._gpu_ours_seen = False

    def sample(self, procs: list[psutil.Process], gpus: list[Any] | None = None) -> ClockSample:
        s = ClockSample(time.time(), machine_busy_s(), tree_cpu_s(procs))
        self.clock.append(s)
        if gpus:
            self._sample_gpus(gpus, {p.pid for p in procs}, s.t)
        return s

    def _sample_gpus(self, gpus: list[Any], tree: set[int], t: float) -> None:
        for dev in gpus:
            procs = dev.compute_processes()
            if procs is None:
                continue
            for pid, used in procs:
                if pid in tree:
                    self._gpu_ours_seen = True
                    continue
                e = self.gpu_seen.setdefault((dev.index, pid), {
                    "device": dev.index, "pid": pid, "name": _proc_name(pid),
                    "used_memory_bytes": used, "first_t": t, "last_t": t})
                e["last_t"] = t
                if used is not None:
                    e["used_memory_bytes"] = max(e["used_memory_bytes"] or 0, used)

    def window(self, t0: float | None, t1: float | None) -> dict[str, Any]:
        """Outside figures over [t0, t1] (``time.time()``; None = from the first / to the
        last sample), with a reason for each figure that is null."""
        out: dict[str, Any] = {"outside_cpu_s": None, "outside_cpu_cores": None,
                               "outside_window_s": None, "machine_cores": self.machine_cores,
                               "outside_gpu_processes": None, "reasons": {}}
        a, b = self._enclosing(t0, t1)
        if a is None or b is None or b.t - a.t <= 0:
            out["reasons"]["outside_cpu_s"] = "fewer than two monitor samples around the window"
        else:
            span = b.t - a.t
            used = max(0.0, (b.machine_s - a.machine_s) - (b.tree_s - a.tree_s))
            out.update(outside_cpu_s=round(used, 3), outside_cpu_cores=round(used / span, 3),
                       outside_window_s=round(span, 3))
        gpu_reason = self.gpu_reason
        if gpu_reason is None and self.gpu_seen and not self._gpu_ours_seen:
            gpu_reason = ("NVML's process ids belong to another pid namespace (a container): "
                          "this run's processes cannot be told from others'")
        if gpu_reason is None:
            lo = t0 if t0 is not None else float("-inf")
            hi = t1 if t1 is not None else float("inf")
            out["outside_gpu_processes"] = [
                {k: v for k, v in e.items() if k not in ("first_t", "last_t")}
                for e in self.gpu_seen.values() if e["last_t"] >= lo and e["first_t"] <= hi]
        else:
            out["reasons"]["outside_gpu_processes"] = gpu_reason
        return out

    def _enclosing(self, t0: float | None,
                   t1: float | None) -> tuple[ClockSample | None, ClockSample | None]:
        """The last sample at or before t0 and the first at or after t1 (else the nearest)."""
        if len(self.clock) < 2:
            return None, None
        before = [s for s in self.clock if t0 is not None and s.t <= t0]
        after = [s for s in self.clock if t1 is not None and s.t >= t1]
        return (before[-1] if before else self.clock[0]), (after[0] if after else self.clock[-1])


def result_fields(window: dict[str, Any], th: Any) -> tuple[dict, dict, dict]:
    """(metrics, null_reasons, load block) of a run record from ``OutsideLoad.window``.
    ``th`` judges the load: ``under_load`` and ``load_limit_cores`` (core/thresholds.py)."""
    gpu = window["outside_gpu_processes"]
    metrics = {"outside_cpu_s": window["outside_cpu_s"],
               "outside_cpu_cores": window["outside_cpu_cores"],
               "outside_gpu_processes": len(gpu) if gpu is not None else None}
    reasons = {}
    for key, why in window["reasons"].items():
        for k in ((key, "outside_cpu_cores") if key == "outside_cpu_s" else (key,)):
            reasons[k] = why
    cores = window["machine_cores"]
    flag, reason = th.under_load(metrics["outside_cpu_cores"], cores, gpu)
    load = {"flag": flag, "reason": reason, "outside_cpu_cores": metrics["outside_cpu_cores"],
            "limit_cores": th.load_limit_cores(cores), "machine_cores": cores,
            "window_s": window["outside_window_s"], "gpu_processes": gpu}
    return metrics, reasons, load


def _proc_name(pid: int) -> str | None:
    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return None
