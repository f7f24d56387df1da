"""The processes a launched job leaves running once it is over (``kill_strays``): ranks that
had not started their heartbeat yet and the processes they started; and whether a process
still runs, a zombie counting as ended (``is_alive``)."""

from __future__ import annotations

import contextlib
from typing import Any

import psutil


def is_alive(proc: Any) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def kill_strays(since: float, spare: set[int | None] | None = None) -> list[int]:
    """SIGKILL every process this one started (and theirs) since ``since`` that still runs
    once the job is over: ranks that had not written a heartbeat yet (a Ctrl+C while 64 ranks
    were still being started or importing torch left them running for minutes, waiting for a
    rendezvous that was gone) and their children. Multiprocessing's resource tracker, shared
    by whatever else this process starts, is left alone. Returns the pids killed."""
    killed: list[int] = []
    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return killed
    for child in children:
        with contextlib.suppress(psutil.Error):
            if child.create_time() < since - 1.0 or not is_alive(child):
                continue
            if child.pid in (spare or set()) or any("resource_tracker" in part
                                                    for part in child.cmdline()):
                continue
            child.kill()
            killed.append(child.pid)
    return killed
