"""A launched job's failure (``WorkerFailure``: the rank to blame and its error line) and
the words for how a rank's process ended: the launcher's first failure read from its
records, an exit code or a killing signal as text, and how a child process ended, read
without collecting it."""

from __future__ import annotations

import os
from typing import Any

from scaleprobe.launch.lines import last_meaningful_line
from scaleprobe.measure.heartbeat import RankError

# a rank that ended without an error of its own, whose exit status was collected before the
# watch could read it (it is woken by the death where the platform has pidfds)
DIED_UNREAD = ("died without an error of its own (killed by a signal, most likely; its "
               "exit status was collected before it could be read)")


class WorkerFailure(RuntimeError):
    """A worker process raised or died. ``rank`` is the global rank to blame: the first that
    failed, or the one that had stopped making progress before it (``RankWatch.failure``)."""

    def __init__(self, rank: int, message: str, exitcode: int | None = None,
                 error: RankError | None = None) -> None:
        super().__init__(f"rank {rank} failed: {message}")
        self.rank = rank
        self.message = message
        self.exitcode = exitcode
        self.error = error  # the rank's own record of it, where it wrote one


def first_failure(err: Exception) -> WorkerFailure:
    """The launcher's first failure, by its timestamps (whole seconds), then rank."""
    failures = getattr(err, "failures", None) or {}
    if not failures:
        return WorkerFailure(-1, str(err).strip().splitlines()[-1] if str(err) else repr(err))
    rank, fail = min(failures.items(), key=lambda kv: (kv[1].timestamp, kv[0]))
    return WorkerFailure(rank, failure_line(fail), fail.exitcode)


def failure_line(fail: Any) -> str:
    msg = str(getattr(fail, "message", "") or "")
    if isinstance(getattr(fail, "error_file_data", None), dict):
        m = fail.error_file_data.get("message", {})
        if isinstance(m, dict):
            msg = m.get("message", msg)
    if fail.exitcode is not None and fail.exitcode < 0:
        return exit_text(fail.exitcode)
    return last_meaningful_line(msg) or exit_text(fail.exitcode)


def exit_text(exitcode: int | None) -> str:
    """A rank's end as the job's error names it; negative: the signal that killed it."""
    if exitcode is not None and exitcode < 0:
        return f"killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


def how_child_ended(pid: int) -> str | None:
    """How a child process of this one that has ended did ("killed by signal 9", "exited with
    code 1"), read without reaping it (``WNOWAIT``: the launcher still collects it); None
    when it is not this process's child, has not ended, or the platform cannot tell."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except (OSError, AttributeError):
        return None
    if info is None:
        return None
    if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED):
        return exit_text(-info.si_status)
    if info.si_code == os.CLD_EXITED:
        return exit_text(info.si_status)
    return None
