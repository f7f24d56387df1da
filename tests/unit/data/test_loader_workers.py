"""A pipelined loader's workers end with the process that started them."""

import subprocess
import sys
import time

import psutil
import pytest

pytestmark = pytest.mark.timeout(120)

CHILD = """
import time, torch
from torch.utils.data import TensorDataset
from scaleprobe.config.runconfig import DataConfig
from scaleprobe.data.loader import build_loader
ds = TensorDataset(torch.zeros(64, 4), torch.zeros(64, dtype=torch.long))
loader = build_loader(ds, DataConfig(loader="pipelined", workers=2), 8, sampler=None,
                      shuffle=False, device=torch.device("cpu"), seed=0,
                      collate=torch.utils.data.default_collate)
it = iter(loader)
next(it)
print("ready", flush=True)
time.sleep(120)
"""


def _running(p):  # a zombie has ended; only its reaper has not read its status yet
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_workers_die_with_a_killed_training_process():
    """SIGKILL of the process that iterates the loader: its two workers are gone within a
    second. Bug caught: workers reparented away from a killed rank kept running until their
    own watchdog noticed (it checks every 5 s), so a job's "nothing left running" check
    found them (a rank killed within 0.2 s of starting its workers, before the launcher's
    watch had seen them)."""
    parent = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().strip() == "ready"
        workers = psutil.Process(parent.pid).children()
        assert len(workers) == 2
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and any(_running(w) for w in workers):
            time.sleep(0.05)
        alive = [w for w in workers if _running(w)]
        assert not alive, f"still running 1 s after their parent was killed: {alive}"
    finally:
        if parent.poll() is None:
            parent.kill()
        for p in psutil.Process().children(recursive=True):
            p.kill()


def test_workers_started_by_a_forkserver_still_load():
    """Under "forkserver" (Python 3.14's default on Linux) a worker is the server's child, not
    the training process's: it cannot be tied to the training process, and it still loads.
    Bug caught: a worker that took its parent to be the training process killed itself at
    once ("DataLoader worker exited unexpectedly")."""
    code = "import multiprocessing; multiprocessing.set_start_method('forkserver')\n" + CHILD
    code = code.replace("time.sleep(120)", "print(sum(1 for _ in it) + 1, flush=True)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=100)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["ready", "8"]


def _init_in_a_child(parent: int) -> int:
    """``_worker_init(parent)`` in a child forked from this process, as a loader forks its
    workers; the child's exit code (-9: it killed itself)."""
    import os

    from scaleprobe.data.loader import _worker_init

    pid = os.fork()
    if pid == 0:  # pragma: no cover  (the child)
        code = 1
        try:
            _worker_init(parent, 0)
            code = 0
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_a_worker_whose_parent_died_before_it_began_ends_at_once():
    """The suite under load (2026-11-25): one of two workers outlived its killed parent by
    more than a second. It began after the kill, was already reparented, and took itself
    for a forkserver's worker (a parent pid that is not its own), so it was never tied.
    Bug caught: that worker left running until its watchdog noticed. A worker whose
    recorded parent is alive but not its parent (a forkserver's) still runs on."""
    import os

    gone = os.fork()
    if gone == 0:  # pragma: no cover
        os._exit(0)
    os.waitpid(gone, 0)  # a pid that no longer runs: the training process, already killed
    assert _init_in_a_child(gone) == -9
    assert _init_in_a_child(1) == 0  # pid 1: alive, and not this process's parent
