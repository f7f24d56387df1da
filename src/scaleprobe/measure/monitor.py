"""Background samplers: CPU use of the whole process tree (loader workers included), host
memory, GPU utilisation, memory and power through NVML, and what processes outside the tree
used meanwhile (``measure/outside.py``). ``Monitor`` is a context manager: it always stops,
also after an exception, Ctrl+C or an out-of-memory error."""

from __future__ import annotations

import csv
import os
import resource
import threading
import time
from pathlib import Path
from typing import IO, Any

import psutil

from scaleprobe.measure.env import cpu_count
from scaleprobe.measure.gpu import nvml_unavailable_reason, open_device
from scaleprobe.measure.outside import Companions, OutsideLoad, outside_s

COLUMNS = ("t_s", "cpu_util_pct", "host_mem_bytes", "gpu_util_pct", "gpu_mem_bytes", "gpu_power_w",
           "outside_cpu_pct")


class Monitor:
    THREAD_NAME = "scaleprobe-monitor"

    def __init__(self, interval_s: float = 0.5, csv_path: str | Path | None = None,
                 cuda_indices: list[int] | None = None, training_in_children: bool = False,
                 run_root_pid: int | None = None):
        self.interval_s = interval_s
        self.csv_path = Path(csv_path) if csv_path else None
        self.rows: list[dict[str, Any]] = []
        self.cores = cpu_count()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._procs: dict[int, psutil.Process] = {}
        self.training_in_children = training_in_children
        self._gpus = [g for g in (open_device(i) for i in (cuda_indices or [])) if g is not None]
        self.gpu_reason = (None if self._gpus else
                           ("no CUDA device" if not cuda_indices else nvml_unavailable_reason()))
        # the run's own processes, for what others used: this process's tree, or the
        # launcher's when ranks were started by someone else (torchrun) and are siblings
        self.run_root_pid = run_root_pid
        # and the runs started together with it for one measurement, told in the
        # environment (measure/outside.py): not outside load
        self.outside = OutsideLoad(self.gpu_reason if not self._gpus else None,
                                   Companions.from_env())
        self._last_tree: list[psutil.Process] = []
        self._t0 = time.time()
        self._fh: IO[str] | None = None
        self._writer: Any = None  # csv.writer over _fh

    def __enter__(self) -> Monitor:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> None:
        if self.csv_path:
            self.csv_path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = self.csv_path.open("w", newline="")
            self._writer = csv.writer(self._fh)
            self._writer.writerow(COLUMNS)
        self._last_tree = self._tree()  # prime cpu_percent counters
        self._sample_outside()  # the clocks at the start, so any window has a sample before it
        self._thread = threading.Thread(target=self._loop, name=self.THREAD_NAME, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            try:
                self._sample()  # a last sample, so even a short run has one
            except Exception:
                pass
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def now(self) -> float:
        return time.time() - self._t0

    def _tree(self, root_pid: int | None = None) -> list[psutil.Process]:
        try:
            me = self._procs.get(root_pid or os.getpid()) or psutil.Process(root_pid or os.getpid())
            procs = [me, *me.children(recursive=True)]
        except psutil.Error:
            procs = [psutil.Process(os.getpid())]
        out = []
        for p in procs:
            if p.pid not in self._procs:
                self._procs[p.pid] = p
                try:
                    p.cpu_percent(None)
                except psutil.Error:
                    continue
            out.append(self._procs[p.pid])
        return out

    def _sample_host(self) -> tuple[float, int]:
        """CPU of the whole tree; memory = resident set of each training process plus the
        unique pages of its loader workers (shared pages counted once)."""
        cpu, mem = 0.0, 0
        me = os.getpid()
        self._last_tree = self._tree()
        for p in self._last_tree:
            try:
                cpu += p.cpu_percent(None)
                if self.training_in_children:
                    is_trainer = p.pid != me and p.ppid() == me
                else:
                    is_trainer = p.pid == me
                if is_trainer:
                    mem += p.memory_info().rss
                elif p.pid != me:
                    mem += p.memory_full_info().uss
            except psutil.Error:
                continue
        return cpu / self.cores, mem

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._sample()
            except Exception:  # a sampler must never take the run down
                continue

    def _sample_outside(self) -> float | None:
        """Record the CPU clocks; the share of all cores used outside the tree (and its
        companions) since the previous sample, in percent (None for the first)."""
        prev = self.outside.clock[-1] if self.outside.clock else None
        tree = (self._tree(self.run_root_pid) if self.run_root_pid or not self._last_tree
                else self._last_tree)  # this sample's tree, enumerated once
        s = self.outside.sample(tree, self._gpus)
        if prev is None or s.t <= prev.t:
            return None
        used = outside_s(prev, s)[0]
        return round(100.0 * used / (s.t - prev.t) / self.outside.machine_cores, 1)

    def _sample(self) -> None:
        cpu, mem = self._sample_host()
        outside = self._sample_outside()
        g_util = g_mem = g_pow = g_energy = None
        if self._gpus:
            energies = [g.energy_mj() for g in self._gpus]
            known = [e for e in energies if e is not None]
            g_energy = sum(known) if len(known) == len(energies) else None
            got = [g.sample() for g in self._gpus]
            utils = [u for u, _, _ in got if u is not None]
            mems = [m for _, m, _ in got if m is not None]
            pows = [w for _, _, w in got if w is not None]
            g_util = sum(utils) / len(utils) if utils else None
            g_mem = sum(mems) if mems else None
            g_pow = sum(pows) if pows else None
        row = {"t_s": round(self.now(), 3), "cpu_util_pct": round(cpu, 1), "host_mem_bytes": mem,
               "gpu_util_pct": g_util, "gpu_mem_bytes": g_mem, "gpu_power_w": g_pow,
               "outside_cpu_pct": outside, "gpu_energy_mj": g_energy}
        self.rows.append(row)
        fh = self._fh
        if self._writer is not None and fh is not None:
            self._writer.writerow(["" if row[c] is None else row[c] for c in COLUMNS])
            fh.flush()

    def summary(self, t_from: float | None = None, t_to: float | None = None) -> dict[str, Any]:
        """Means over the window given in absolute ``time.time()`` seconds; peaks over all."""
        t_from = t_from - self._t0 if t_from is not None else None
        t_to = t_to - self._t0 if t_to is not None else None
        rows = [r for r in self.rows
                if (t_from is None or r["t_s"] >= t_from) and (t_to is None or r["t_s"] <= t_to)]
        rows = rows or self.rows

        def mean(key: str) -> float | None:
            vals = [r[key] for r in rows if r[key] is not None]
            return sum(vals) / len(vals) if vals else None

        def peak(key: str) -> Any:
            vals = [r[key] for r in self.rows if r[key] is not None]
            return max(vals) if vals else None

        return {"cpu_util_pct": mean("cpu_util_pct"), "gpu_util_pct": mean("gpu_util_pct"),
                "gpu_power_w": mean("gpu_power_w"), "host_mem_peak_bytes": peak("host_mem_bytes"),
                "gpu_mem_peak_bytes": peak("gpu_mem_bytes"), "samples": len(rows),
                **energy_rate(rows, mean("gpu_power_w"))}

    def outside_load(self, t_from: float | None = None,
                     t_to: float | None = None) -> dict[str, Any]:
        """CPU time (and GPU processes) of processes outside the run's tree over the window
        given in absolute ``time.time()`` seconds; see ``measure/outside.py``."""
        return self.outside.window(t_from, t_to)


def energy_rate(rows: list[dict[str, Any]], mean_power_w: float | None) -> dict[str, Any]:
    """The GPUs' mean draw over the window's samples, in watts: from NVML's energy counter
    (joules between the first and last sample / the seconds between them) where every GPU
    has one, else the mean of the sampled power; ``gpu_energy_method`` says which."""
    pts = [(r["t_s"], r["gpu_energy_mj"]) for r in rows if r.get("gpu_energy_mj") is not None]
    if len(pts) >= 2 and pts[-1][0] > pts[0][0] and pts[-1][1] >= pts[0][1]:
        watts = (pts[-1][1] - pts[0][1]) / 1000.0 / (pts[-1][0] - pts[0][0])
        return {"gpu_energy_w": watts, "gpu_energy_method": "NVML energy counter"}
    if mean_power_w is not None:
        return {"gpu_energy_w": mean_power_w, "gpu_energy_method": "sampled power (NVML)"}
    return {"gpu_energy_w": None, "gpu_energy_method": None}


def _status_bytes(field: str) -> int | None:
    """A ``kB`` line of ``/proc/self/status`` in bytes; None where there is none (not Linux)."""
    try:
        with open(f"/proc/{os.getpid()}/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def process_peak_rss_bytes() -> int | None:
    """VmHWM: the process's peak resident set, from the kernel."""
    peak = _status_bytes("VmHWM")
    if peak is not None:
        return peak

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def process_rss_bytes() -> int | None:
    """This process's resident set now (not its peak)."""
    try:
        return int(psutil.Process().memory_info().rss)
    except Exception:  # noqa: BLE001  (a missing figure, never a failed run)
        return None


def process_file_rss_bytes() -> int | None:
    """RssFile: the file-backed part of the resident set now (the code of the libraries
    loaded, memory-mapped files). A run touches library code it had not used before, and how
    much of it counts depends on how the process started: a process forked from one that
    had imported torch counts only the pages it touches itself, so its first training step
    adds about 70-100 MiB of torch's code where a fresh interpreter, which touched much of it
    while importing, adds about 40 (2-core CPU, 2026-11-25). ``host_net`` leaves this growth
    out (``assemble``)."""
    return _status_bytes("RssFile")


_FILE_RSS_HIGH: list[int] = []  # the highest RssFile this process noted (note_file_rss)


def note_file_rss() -> None:
    """Note the file-backed resident set now, once the run holds what it will hold (after
    its first full step). Under memory pressure the kernel takes library pages back out of
    the resident set; read only at the end, the growth since the baseline then read 0 while
    the peak had counted them, and ``host_net`` took them for the run's own memory (89 MiB
    apart between a forked and a fresh point on a loaded machine). ``host_mem_record``
    counts the higher of this and the reading at the end."""
    now = process_file_rss_bytes()
    if now is not None:
        _FILE_RSS_HIGH[:] = [max([now, *_FILE_RSS_HIGH])]


def host_mem_baseline() -> dict[str, int | None]:
    """What a rank holds before its model and data are built: its resident set and the
    file-backed part of it (``host_mem_record`` measures the run against this)."""
    return {"rss": process_rss_bytes(), "file_rss": process_file_rss_bytes()}


def host_mem_record(baseline: dict[str, int | None]) -> dict[str, int | None]:
    """A rank's host-memory fields of its ``RankMem``: its peak resident set, the baseline,
    and the file-backed pages it touched since the baseline (read with the peak)."""
    file_now, file_then = process_file_rss_bytes(), baseline.get("file_rss")
    if file_now is not None and _FILE_RSS_HIGH:
        file_now = max(file_now, _FILE_RSS_HIGH[0])
    growth = (max(0, file_now - file_then) if file_now is not None and file_then is not None
              else None)
    return {"host_peak_rss": process_peak_rss_bytes(), "host_baseline_rss": baseline.get("rss"),
            "host_file_growth": growth}
