"""A job's guard: a small process that outlives the launcher and ends every process the job's
ranks left, however the launcher ended (its own end, Ctrl+C, SIGTERM, or SIGKILL, which
nothing in the launcher can catch).

``launch.run_workers`` starts it as ``python -I guard.py FD RUN_DIR SINCE``, by path (the
standard library only: it starts in tens of milliseconds, without torch), in a session of its
own (a terminal's Ctrl+C does not reach it), with the read end of a pipe whose write end only
the launcher holds. The pipe closes when the launcher ends; the guard then SIGKILLs every
process in the ranks' process groups (each rank leads its own: ``env.own_process_group``)
started since SINCE: the ranks, their loader workers, the processes a wrapped script started
(its own children, multiprocessing's resource tracker). The ranks are found by their
heartbeats (``RUN_DIR/heartbeat/rank-N.hb``: the pid is the second float64). A rank that has
ended normally leaves an empty group: nothing is killed.

Before it, a rank killed with the launcher (it dies with its parent) left its script's
children running, reparented to init, waiting for a store that was gone.
"""

from __future__ import annotations

import os
import signal
import struct
import sys
from pathlib import Path


def rank_groups(run_dir: str) -> set[int]:
    """The process groups of the job's ranks: each rank's pid, read from its heartbeat."""
    groups = set()
    for f in (Path(run_dir) / "heartbeat").glob("rank-*.hb"):
        try:
            pid = int(struct.unpack_from("<d", f.read_bytes(), 8)[0])
        except (OSError, struct.error, ValueError):
            continue
        if pid > 1:
            groups.add(pid)
    return groups


def _started_at(pid: int) -> float | None:
    """When ``pid`` started, in clock ticks since boot (/proc/PID/stat, field 22)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return float(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def end_groups(groups: set[int], since_ticks: float) -> list[int]:
    """SIGKILL every process whose group is one of ``groups`` and that started at or after
    ``since_ticks``; returns their pids."""
    killed = []
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        try:
            if os.getpgid(pid) not in groups:
                continue
        except OSError:
            continue
        started = _started_at(pid)
        if started is None or started < since_ticks:
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except OSError:
            pass
    return killed


def now_ticks() -> float:
    """This moment in the clock ticks /proc/PID/stat counts a start in."""
    return float(Path("/proc/uptime").read_text().split()[0]) * os.sysconf("SC_CLK_TCK")


def main(argv: list[str]) -> int:
    fd, run_dir, since = int(argv[0]), argv[1], float(argv[2])
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)
    while True:
        try:
            if not os.read(fd, 64):
                break
        except InterruptedError:
            continue
        except OSError:
            break
    end_groups(rank_groups(run_dir), since)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
