"""CPU time outside the run's process tree, GPU neighbours, and the under-load rule.

The CPU tests spin real processes. The machine may be shared, so they assert only what other
processes cannot undo: a spinning process outside the tree is counted as outside (at least its
own CPU time), and the tree's own processes, live or already reaped, are counted as the run's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from scaleprobe.core.thresholds import DEFAULT, Thresholds
from scaleprobe.measure.monitor import Monitor
from scaleprobe.measure.outside import (
    COMPANIONS_ENV,
    Companions,
    OutsideLoad,
    result_fields,
    write_companions,
)

pytestmark = pytest.mark.timeout(60)

SPIN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"


def _spinner(seconds: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", SPIN.format(s=seconds)])


def _cpu(p: psutil.Process) -> float:
    c = p.cpu_times()
    return c.user + c.system


def test_a_spinning_process_outside_the_tree_is_counted_as_outside():
    """Catches outside CPU time that misses other processes (e.g. machine time read per
    process of the tree only, or the subtraction done the wrong way round)."""
    hog = _spinner(30)
    try:
        hp = psutil.Process(hog.pid)
        time.sleep(0.3)
        me = [psutil.Process(os.getpid())]  # the "run" is this process alone; the hog is not in it
        out = OutsideLoad()
        out.sample(me)
        h0 = _cpu(hp)
        t0 = time.time()
        time.sleep(2.0)
        t1 = time.time()
        h1 = _cpu(hp)
        out.sample(me)
        win = out.window(t0, t1)
    finally:
        hog.kill()
        hog.wait()
    hog_s = h1 - h0
    assert hog_s > 0.2, f"the hog barely ran ({hog_s:.2f} s): machine too busy to test"
    assert win["outside_cpu_s"] >= 0.9 * hog_s - 0.05, (win, hog_s)
    assert win["outside_cpu_cores"] == pytest.approx(win["outside_cpu_s"] / win["outside_window_s"],
                                                     rel=0.01)
    assert 0 <= win["outside_cpu_cores"] <= out.machine_cores + 0.05


def test_the_runs_own_children_are_not_outside_even_after_they_exit():
    """Catches a tree clock that forgets loader workers or ranks once they exit (their time
    would then show up as load from other processes)."""
    me = psutil.Process(os.getpid())
    out = OutsideLoad()
    out.sample([me])
    child = _spinner(1.0)  # spins 1 s of CPU time, exits, and is reaped below
    child.wait(timeout=30)
    out.sample([me])
    a, b = out.clock
    assert b.tree_s - a.tree_s >= 0.9, "the reaped child's CPU time is the run's own"


def test_outside_cpu_needs_two_samples():
    """Catches a figure made up from a single sample (it must be null with a reason)."""
    out = OutsideLoad()
    win = out.window(None, None)
    assert win["outside_cpu_s"] is None and "fewer than two" in win["reasons"]["outside_cpu_s"]


class FakeGpu:
    def __init__(self, index: int, procs: list[tuple[int, int | None]] | None) -> None:
        self.index, self.procs = index, procs

    def compute_processes(self):
        return self.procs


def test_gpu_neighbours_are_processes_not_in_the_tree():
    """Catches the run's own CUDA processes reported as neighbours, or neighbours missed."""
    me = psutil.Process(os.getpid())
    other = 4_000_000  # no such pid here: NVML sees pids this sandbox cannot name
    out = OutsideLoad()
    out.sample([me], [FakeGpu(0, [(me.pid, 1 << 30), (other, 2 << 30)])])
    out.sample([me], [FakeGpu(0, [(me.pid, 1 << 30), (other, 3 << 30)])])
    win = out.window(None, None)
    assert win["outside_gpu_processes"] == [
        {"device": 0, "pid": other, "name": None, "used_memory_bytes": 3 << 30}]
    metrics, _, load = result_fields(win, DEFAULT)
    assert metrics["outside_gpu_processes"] == 1
    assert load["flag"] is True and "1 other compute process" in load["reason"]


def test_gpu_pids_from_another_namespace_are_not_guessed():
    """Catches every GPU run in a container flagged as shared: NVML's host pids never match
    the run's own, so the figure must be null with the reason instead."""
    me = psutil.Process(os.getpid())
    out = OutsideLoad()
    out.sample([me], [FakeGpu(0, [(4_000_001, None)])])
    win = out.window(None, None)
    assert win["outside_gpu_processes"] is None
    assert "pid namespace" in win["reasons"]["outside_gpu_processes"]


def test_without_nvml_the_gpu_figure_is_null_with_the_reason():
    """Catches a GPU neighbour count of 0 when NVML could not be asked (here: no library)."""
    mon = Monitor(0.05, cuda_indices=[0])
    with mon:
        time.sleep(0.2)
    win = mon.outside_load()
    assert win["outside_gpu_processes"] is None
    assert win["reasons"]["outside_gpu_processes"] == mon.gpu_reason
    assert win["outside_cpu_s"] is not None  # the CPU part stands on its own


def test_under_load_rule_and_its_limit():
    """Catches a limit that ignores the machine's size or a flag set without a measurement."""
    th = Thresholds()
    assert th.load_limit_cores(2) == 0.25 and th.load_limit_cores(64) == pytest.approx(6.4)
    assert th.under_load(0.30, 2)[0] is True
    assert th.under_load(0.20, 2)[0] is False
    assert th.under_load(3.0, 64)[0] is False
    assert th.under_load(None, 2, [{"pid": 7, "device": 0}])[0] is True
    assert th.under_load(None, 2, None) == (None, "not measured")
    flag, reason = th.under_load(0.9, 2)
    assert flag and "0.90 cores" in reason and "limit 0.25" in reason


def test_a_companion_run_is_left_out_and_another_busy_process_still_counts(tmp_path):
    """Catches runs started together for one measurement (plan --verify's one-rank copies)
    counting each other as outside load, and a leaving-out so broad that a busy process
    that is no companion is dropped too. ``naive`` is the figure without companions."""
    comp, hog = _spinner(30), _spinner(30)
    path = tmp_path / "companions"
    write_companions(path, [os.getpid(), comp.pid])  # the file names every copy, this one too
    try:
        cp, hp = psutil.Process(comp.pid), psutil.Process(hog.pid)
        me = [psutil.Process(os.getpid())]
        naive, told = OutsideLoad(), OutsideLoad(companions=Companions(path))
        c0, h0 = _cpu(cp), _cpu(hp)
        naive.sample(me), told.sample(me)
        t0 = time.time()
        while _cpu(cp) - c0 < 0.5 or _cpu(hp) - h0 < 0.5:  # each spins half a CPU-second
            time.sleep(0.05)
        t1 = time.time()
        naive.sample(me), told.sample(me)
        c1, h1 = _cpu(cp), _cpu(hp)
    finally:
        for p in (comp, hog):
            p.kill()
            p.wait()
    a, b = naive.window(t0, t1), told.window(t0, t1)
    assert a["companion_runs"] is None and b["companion_runs"] == 1
    assert b["companion_cpu_s"] == pytest.approx(c1 - c0, abs=0.1)
    assert a["outside_cpu_s"] - b["outside_cpu_s"] >= 0.9 * (c1 - c0) - 0.1, (a, b)
    assert b["outside_cpu_s"] >= 0.9 * (h1 - h0) - 0.05, (b, h1 - h0)  # the hog still counts
    _, _, load = result_fields(b, DEFAULT)
    assert load["companion_runs"] == 1 and "leaving out 1 run started with it" in load["reason"]
    assert load["companion_cpu_cores"] > 0


COMPANION = ("import subprocess, sys\n"
             "sys.stdin.readline()\n"
             f"subprocess.run([sys.executable, '-c', {SPIN.format(s=0.8)!r}])\n"
             "print('done', flush=True)\n"
             "sys.stdin.readline()\n")


def test_a_companions_exited_children_count_as_the_companions(tmp_path, monkeypatch):
    """Catches a companion clock that loses a companion's worker once it exits (its time
    would come back as outside load), and a monitor not told through the environment."""
    comp = subprocess.Popen([sys.executable, "-c", COMPANION], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    path = tmp_path / "companions"
    write_companions(path, [comp.pid])
    monkeypatch.setenv(COMPANIONS_ENV, str(path))
    assert Monitor(0.05).outside.companions.path == path
    # its child spins 0.8 s of CPU, exits, is reaped
    _companion_window(comp, path, lambda: comp.stdout.readline().strip() == "done")


ENDING = ("import sys\n"
          "sys.stdin.readline()\n"
          + SPIN.format(s=0.8)
          + "from scaleprobe.measure.outside import note_companion_end\n"
          "note_companion_end()\n")


def test_a_companion_that_ended_in_the_window_counts_up_to_its_end(tmp_path):
    """Catches a companion that finished before the window's last sample (copies side by
    side end a little apart) charged as outside load for what it did after the last sample
    that saw it alive: its process is gone then, and the clock it left at its end is read."""
    path = tmp_path / "companions"
    comp = subprocess.Popen([sys.executable, "-c", ENDING], stdin=subprocess.PIPE, text=True,
                            env={**os.environ, COMPANIONS_ENV: str(path)})
    write_companions(path, [comp.pid])
    # it spins 0.8 s of CPU, leaves its clock, exits; reaped: gone, no longer readable
    _companion_window(comp, path, lambda: comp.wait(timeout=30) == 0)


def _companion_window(comp, path, finished):
    """A window from one sample of this process to the next, told ``path``'s companions,
    around the companion ``comp`` spinning 0.8 s of CPU once told "go" (``finished()``: it
    is done); its companion CPU counts all of it."""
    me = [psutil.Process(os.getpid())]  # the companion is this process's child: not its tree
    told = OutsideLoad(companions=Companions(path))
    try:
        told.sample(me)
        comp.stdin.write("go\n")
        comp.stdin.flush()
        assert finished()
        told.sample(me)
    finally:
        comp.kill()
        comp.wait()
    win = told.window(None, None)
    assert win["companion_runs"] == 1
    assert win["companion_cpu_s"] >= 0.75, win


class _Times:
    def __init__(self, s: float) -> None:
        self.user, self.system, self.children_user, self.children_system = s, 0.0, 0.0, 0.0


class _Proc:
    """A process whose CPU clock reads what ``readings`` says, one reading per call."""

    def __init__(self, pid: int, readings: list[float]) -> None:
        self.pid, self.readings = pid, list(readings)

    def cpu_times(self) -> _Times:
        return _Times(self.readings.pop(0))

    def children(self, recursive: bool = False) -> list:
        return []


def test_a_tree_clock_that_drops_does_not_turn_into_outside_load(tmp_path, monkeypatch):
    """Catches a rank that ended between the tree's listing and its reading, not yet reaped,
    taking its whole CPU time out of the tree's clock: the machine was busy 1.5 s over the
    window, the run's tree read 10 s then 2 s, a companion's 4 s then 1 s. A run's last sample
    once read 447% of a 2-core machine's CPU as outside; with clocks that never run backwards,
    outside is at most what the machine did."""
    import scaleprobe.measure.outside as O

    busy = iter([100.0, 101.5])
    monkeypatch.setattr(O, "machine_busy_s", lambda: next(busy))
    path = tmp_path / "companions"
    path.write_text("4242\n")
    comps = Companions(path)
    comps.roots = {4242: _Proc(4242, [4.0, 1.0])}
    out = OutsideLoad(companions=comps)
    me = _Proc(1, [10.0, 2.0])
    out.sample([me])
    out.sample([me])
    a, b = out.clock
    assert (a.tree_s, b.tree_s) == (10.0, 10.0)
    assert b.companions_s == {4242: 4.0}
    win = out.window(None, None)
    assert win["outside_cpu_s"] == pytest.approx(1.5)  # none of it the tree's or companion's
    assert win["companion_cpu_s"] == 0.0
