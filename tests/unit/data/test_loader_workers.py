"""A pipelined loader's workers end with the process that started them."""

import time

import psutil
import pytest

pytestmark = pytest.mark.timeout(120)


def _loader_and_first_batch():
    """A pipelined loader of two workers over 64 samples, and its iterator past its first
    batch (the workers started)."""
    import torch
    from torch.utils.data import TensorDataset

    from scaleprobe.config.runconfig import DataConfig
    from scaleprobe.data.loader import build_loader

    ds = TensorDataset(torch.zeros(64, 4), torch.zeros(64, dtype=torch.long))
    loader = build_loader(ds, DataConfig(loader="pipelined", workers=2), 8, sampler=None,
                          shuffle=False, device=torch.device("cpu"), seed=0,
                          collate=torch.utils.data.default_collate)
    it = iter(loader)
    next(it)
    return it


def _running(p):  # a zombie has ended; only its reaper has not read its status yet
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _kill_a_trainer() -> int:
    """Forks a training process that starts its loader's workers, SIGKILLs it, and says
    whether its workers outlived it by a second (exit 1, with what was found)."""
    import os
    import signal

    ready, told = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover  (the training process)
        try:
            it = _loader_and_first_batch()  # held: the workers run while it does
            os.write(told, b"r")
            time.sleep(120)
            del it
        finally:
            os._exit(1)
    os.close(told)  # the child's end alone: a child that dies before it writes is EOF here
    try:
        if os.read(ready, 1) != b"r":
            print("the training process ended before its workers started")
            return 1
        workers = psutil.Process(pid).children()
        if len(workers) != 2:
            print(f"{len(workers)} workers, expected 2")
            return 1
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and any(_running(w) for w in workers):
            time.sleep(0.05)
        alive = [w for w in workers if _running(w)]
        print(f"still running 1 s after their parent was killed: {alive}" if alive else "ok")
        return 1 if alive else 0
    finally:
        for c in psutil.Process().children(recursive=True):
            c.kill()


def test_workers_die_with_a_killed_training_process():
    """SIGKILL of the process that iterates the loader: its two workers are gone within a
    second. Bug caught: workers reparented away from a killed rank kept running until their
    own watchdog noticed (it checks every 5 s), so a job's "nothing left running" check
    found them (a rank killed within 0.2 s of starting its workers, before the launcher's
    watch had seen them). The training process is a fork of one forked from the tests' CLI
    server, as a launched rank is a fork of its launcher."""
    from tests.conftest import run_forked

    p = run_forked(_kill_a_trainer, timeout=100)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr[-2000:]


def _under_a_forkserver() -> None:
    """Loads every batch with workers started by multiprocessing's forkserver; prints the
    batches seen."""
    import multiprocessing

    multiprocessing.set_start_method("forkserver", force=True)
    it = _loader_and_first_batch()
    print(sum(1 for _ in it) + 1)


def test_workers_started_by_a_forkserver_still_load():
    """Under "forkserver" (Python 3.14's default on Linux) a worker is the server's child, not
    the training process's: it cannot be tied to the training process, and it still loads.
    Bug caught: a worker that took its parent to be the training process killed itself at
    once ("DataLoader worker exited unexpectedly")."""
    from tests.conftest import run_forked

    done = run_forked(_under_a_forkserver, timeout=100)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["8"]


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


def _parent_died_cases() -> None:
    """Prints the exit codes of ``_worker_init`` for a parent already gone and for pid 1."""
    import os

    gone = os.fork()
    if gone == 0:  # pragma: no cover
        os._exit(0)
    os.waitpid(gone, 0)  # a pid that no longer runs: the training process, already killed
    print(_init_in_a_child(gone), _init_in_a_child(1))


def test_a_worker_whose_parent_died_before_it_began_ends_at_once():
    """The suite under load (2026-11-25): one of two workers outlived its killed parent by
    more than a second. It began after the kill, was already reparented, and took itself
    for a forkserver's worker (a parent pid that is not its own), so it was never tied.
    Bug caught: that worker left running until its watchdog noticed. A worker whose
    recorded parent is alive but not its parent (a forkserver's) still runs on. (Forked
    from the CLI server: forks of pytest's own process took 8-9 s in the whole suite, late
    in the session; from the server 0.5 s.)"""
    from tests.conftest import run_forked

    p = run_forked(_parent_died_cases, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    # -9: the worker of a parent already gone killed itself; pid 1: alive, and not this
    # process's parent, so the worker runs on
    assert p.stdout.split() == ["-9", "0"], p.stdout + p.stderr[-2000:]
