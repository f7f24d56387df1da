"""What other processes did while the run was measured: CPU time used outside the run's own
process tree, and compute processes of others on the run's GPUs.

At every monitor sample two cumulative clocks are read, the machine's busy CPU time and the
run tree's (its exited children included, so a reaped worker still counts as the run's);
outside CPU seconds over a window are their difference between the samples that enclose it.
On the GPUs, NVML's compute processes whose pids are not in the tree are the run's
neighbours.

A run started together with others for one measurement (``plan --verify``'s one-rank copies,
which share the machine as a job's ranks will) is told who they are: the starter writes their
pids to a file named by ``COMPANIONS_ENV`` (``write_companions``). Each sample then also reads
each companion's tree clock (``Companions``), and the outside figure leaves it out: their CPU
is part of the measurement, not load on it. Runs measured together also start their timed
windows together: each waits at a gate (``wait_at_gate``: it says it is ready, then waits for
the starter's go, ``open_gate``) just before its first timed step, in whichever process runs
the training loop (a launched rank is told where by ``WINDOW_GATE_ENV``). docs/REPORTS.md ("Measured under load") gives what each clock counts and leaves
out, and when the GPU figure is null.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
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


COMPANIONS_ENV = "SCALEPROBE_COMPANIONS"  # a file of the pids started together with this run
WINDOW_GATE_ENV = "SCALEPROBE_WINDOW_GATE"  # {"ready": path, "go": path}, JSON: a rank's gate
GATE_TIMEOUT_S = 300.0


def wait_at_gate(gate: dict[str, str], stopping: Callable[[], bool] | None = None) -> None:
    """Say this run is ready to start its timed window, then wait for the go file. Ends early,
    without error, when ``stopping()`` says the run was asked to stop (its loop then stops at
    the next step); a parent that is gone, or no go within ``GATE_TIMEOUT_S``, is an error.
    The ranks of a launched job (``gate["ranks"]``, this host's) each say so in a file of
    their own, and the job is ready once all have (``say_ready``)."""
    parent = os.getppid()
    say_ready(gate)
    deadline = time.monotonic() + GATE_TIMEOUT_S
    go = Path(gate["go"])
    while not go.exists():
        if stopping is not None and stopping():
            return
        if os.getppid() != parent:
            raise RuntimeError("the start signal never came: the starting process is gone")
        if time.monotonic() > deadline:
            raise RuntimeError("the start signal never came (the starting process is gone?)")
        time.sleep(0.005)


def say_ready(gate: dict[str, str]) -> None:
    """Touch the job's ready file; for one of a launched job's ranks, its own file first, and
    the job's once every rank of this host has its own: one file for all of them let the go
    come when the first rank was ready, the others' windows opening up to their set-up
    later. Each rank counts after writing its own, so the last to arrive sees them all. A
    rank that takes no timed step (a parameter server's) says it at once, and waits for
    nothing."""
    ready = Path(gate["ready"])
    rank, ranks = (int(x) for x in gate.get("ranks", "0/1").split("/"))
    if ranks > 1:
        Path(f"{ready}.rank{rank}").touch()
        if not all(Path(f"{ready}.rank{r}").exists() for r in range(ranks)):
            return
    ready.touch()


def gate_from_env() -> dict[str, str] | None:
    """The gate a launched rank's timed window waits at (``WINDOW_GATE_ENV``), once: read and
    removed, so that nothing this process starts waits at it again; with this rank's place
    among its host's ranks (torch's launcher's ``LOCAL_RANK`` / ``LOCAL_WORLD_SIZE``)."""
    text = os.environ.pop(WINDOW_GATE_ENV, None)
    if not text:
        return None
    gate = json.loads(text)
    rank, ranks = os.environ.get("LOCAL_RANK", "0"), os.environ.get("LOCAL_WORLD_SIZE", "1")
    return {"ready": str(gate["ready"]), "go": str(gate["go"]), "ranks": f"{rank}/{ranks}"}


def open_gate(ready: Sequence[Path], go: Path, procs: Sequence[Any],
              timeout_s: float = GATE_TIMEOUT_S) -> None:
    """Write the go file once every run has said it is ready; at once where one of ``procs``
    (``poll()``-able) has ended first, or after ``timeout_s``: the others start anyway, and
    the one that ended says why in its record."""
    deadline = time.monotonic() + timeout_s
    while not all(p.exists() for p in ready):
        if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
            break
        time.sleep(0.005)
    go.touch()


def write_companions(path: Path, pids: list[int]) -> None:
    """Name the processes started together for one measurement (each reads the others'
    pids from ``path``; ``COMPANIONS_ENV`` tells them where): written whole or not at all."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(f"{pid}\n" for pid in pids))
    os.replace(tmp, path)


def _end_path(path: Path | str, pid: int) -> Path:
    return Path(f"{path}.{pid}.end")


def note_companion_end() -> None:
    """A companion's last act (``experiments/point.main``): its own CPU clock, its reaped
    children's included, beside the companions file, for the runs still measuring once its
    process is gone and can no longer be read."""
    path = os.environ.get(COMPANIONS_ENV)
    if not path:
        return
    t = os.times()
    end = _end_path(path, os.getpid())
    try:
        tmp = end.with_name(end.name + ".tmp")
        tmp.write_text(repr(t.user + t.system + t.children_user + t.children_system))
        os.replace(tmp, end)
    except OSError:
        pass  # the others keep their last reading of it


class Companions:
    """The runs started together with this one (``write_companions``), each read as a tree
    clock like the run's own: its root's CPU time and its reaped children's, plus its live
    descendants'. A companion that has ended is read from the clock it left at its end
    (``note_companion_end``); without one, its last reading stands, and its time after the
    last sample that saw it is counted as outside (at most one monitor interval)."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None
        self.roots: dict[int, psutil.Process] | None = None  # None until the file is read
        self.last: dict[int, float] = {}

    @classmethod
    def from_env(cls) -> Companions:
        return cls(os.environ.get(COMPANIONS_ENV) or None)

    def _read(self, own: set[int]) -> None:
        if self.path is None or self.roots is not None:
            return
        try:
            pids = [int(x) for x in self.path.read_text().split()]
        except (OSError, ValueError):
            return  # not written yet: asked again at the next sample
        self.roots = {}
        for pid in pids:
            if pid in own:
                continue
            try:
                self.roots[pid] = psutil.Process(pid)
            except psutil.Error:
                continue  # ended before it was seen: nothing of it to leave out

    def cpu_s(self, own: set[int]) -> dict[int, float]:
        """Each companion's tree clock now, by its root's pid ({} until the file is read)."""
        self._read(own)
        for pid, root in (self.roots or {}).items():
            try:
                c = root.cpu_times()
                kids = root.children(recursive=True)
            except psutil.Error:
                self._ended(pid)
                continue
            now = (c.user + c.system + c.children_user + c.children_system
                   + tree_cpu_s([k for k in kids if k.pid not in own]))
            self.last[pid] = max(now, self.last.get(pid, 0.0))  # never backwards (sample)
        return dict(self.last)

    def _ended(self, pid: int) -> None:
        """A companion whose process is gone: the clock it left at its end, if it did."""
        assert self.path is not None
        try:
            final = float(_end_path(self.path, pid).read_text())
        except (OSError, ValueError):
            return  # its last reading stands
        self.last[pid] = max(final, self.last.get(pid, 0.0))

    def pids(self) -> set[int]:
        """The companions' processes now (for telling GPU neighbours from them)."""
        out = set()
        for root in (self.roots or {}).values():
            try:
                out |= {root.pid, *(p.pid for p in root.children(recursive=True))}
            except psutil.Error:
                continue
        return out


@dataclass
class ClockSample:
    t: float  # time.time()
    machine_s: float
    tree_s: float
    companions_s: dict[int, float] = field(default_factory=dict)  # root pid -> tree clock


def outside_s(a: ClockSample, b: ClockSample) -> tuple[float, float, int]:
    """(outside CPU seconds, companions' CPU seconds, companions counted) between two
    samples: the machine's busy time less the tree's and the companions' (those read at
    both samples, so a companion first seen late is not charged its time before it)."""
    both = [pid for pid in b.companions_s if pid in a.companions_s]
    comp = sum(b.companions_s[pid] - a.companions_s[pid] for pid in both)
    used = (b.machine_s - a.machine_s) - (b.tree_s - a.tree_s) - comp
    return max(0.0, used), comp, len(both)


class OutsideLoad:
    """Samples for the outside-the-tree figures; ``window(t0, t1)`` gives them."""

    def __init__(self, gpu_reason: str | None = None,
                 companions: Companions | None = None) -> None:
        self.clock: list[ClockSample] = []
        self.companions = companions or Companions(None)
        self.machine_cores = psutil.cpu_count() or 1
        self.gpu_reason = gpu_reason  # why GPU neighbours cannot be seen, or None
        self.gpu_seen: dict[tuple[int, int], dict[str, Any]] = {}  # (device, pid) -> entry
        self._gpu_ours_seen = False

    def sample(self, procs: list[psutil.Process], gpus: list[Any] | None = None) -> ClockSample:
        own = {p.pid for p in procs}
        # a tree's clock never runs backwards: a process that ended after the tree was
        # listed and before it was read, not yet reaped into its parent's children_*, takes
        # its whole CPU time out of the reading (a run's last sample, its rank just gone,
        # read 447% of a 2-core machine's CPU as used outside it)
        tree = max(tree_cpu_s(procs), self.clock[-1].tree_s if self.clock else 0.0)
        s = ClockSample(time.time(), machine_busy_s(), tree, self.companions.cpu_s(own))
        self.clock.append(s)
        if gpus:
            self._sample_gpus(gpus, own | self.companions.pids(), s.t)
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
                               "outside_gpu_processes": None, "companion_runs": None,
                               "companion_cpu_s": None, "reasons": {}}
        a, b = self._enclosing(t0, t1)
        if a is None or b is None or b.t - a.t <= 0:
            out["reasons"]["outside_cpu_s"] = "fewer than two monitor samples around the window"
        else:
            span = b.t - a.t
            used, comp, n = outside_s(a, b)
            out.update(outside_cpu_s=round(used, 3), outside_cpu_cores=round(used / span, 3),
                       outside_window_s=round(span, 3))
            if self.companions.path is not None:
                out.update(companion_runs=n, companion_cpu_s=round(comp, 3))
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
    runs = window.get("companion_runs")
    if runs is not None:  # told of companions: how many were left out, and what they used
        span = window["outside_window_s"]
        comp = window["companion_cpu_s"]
        load["companion_runs"] = runs
        load["companion_cpu_cores"] = round(comp / span, 3) if span else None
        what = "1 run" if runs == 1 else f"{runs} runs"
        load["reason"] = f"{reason} (leaving out {what} started with it for the same measurement)"
    return metrics, reasons, load


def _proc_name(pid: int) -> str | None:
    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return None
