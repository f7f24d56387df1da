"""Which rank a failed job names, and the line that says why: the part of ``RankWatch`` that
reads what the watch saw once the launcher reports a failure (``NamesTheFailure``). The first
rank that failed, with its own error line or how it died; a rank that had stopped making
progress before it (it hung, the one that failed only waited for it); a rank that never
started; a rank killed by SIGKILL before one that raised; a job the watch ended as stalled."""

from __future__ import annotations

import signal

from scaleprobe.launch.failures import (
    DIED_UNREAD,
    WorkerFailure,
    exit_text,
    failure_line,
    first_failure,
)
from scaleprobe.launch.lines import (
    gave_up_waiting,
    never_started_text,
    plain_error,
    waited_text,
)
from scaleprobe.measure.heartbeat import Beat, read_beats, read_error, setup_doing, stall_text

# a rank is named as the one that stopped only when it had not moved for this long
MIN_STALL_S = 2.0


class NamesTheFailure:
    """The failure-naming calls of ``RankWatch``, on the state its watch keeps."""

    run_dir: str | None
    expected: set[int] | None  # the ranks this host starts, where known
    started_at: float
    first: tuple[int, float, bool] | None  # (rank, when, raised: not killed)
    stalled: tuple[int, Beat] | None
    stall: tuple[int, Beat, float] | None  # (rank, beat, seen at)
    stall_behind: bool  # named as behind the others' places (``RankWatch._check_start``)
    stall_after_s: float | None
    exits: dict[int, str]
    killed: set[int]

    def stall_line(self) -> str | None:
        """``stalled: no progress for 30.2 s at step 7 (no step ended, no batch was taken and
        no forward pass ran; --timeout 30)``, or None when the job did not stall."""
        if self.stall is None:
            return None
        _, beat, seen = self.stall
        since = seen - beat.progress_wall
        if not beat.moved:
            behind = (f"; this rank was behind the others, {setup_doing(beat)}"
                      if self.stall_behind else "")
            return (f"stalled before the first step: for {since:.1f} s no rank took a batch, "
                    f"ran a forward pass, compiled or used the CPU{behind} (the script waits "
                    "for something that never comes: a process group of its own, a lock, a "
                    f"child process; --timeout {self.stall_after_s:g})")
        return (f"stalled: no progress for {since:.1f} s at step {beat.step} (no step "
                "ended, no batch was taken and no forward pass ran; "
                f"--timeout {self.stall_after_s:g})")

    def _never_started(self) -> list[int]:
        """The ranks of this host that wrote no heartbeat while others did: their processes
        never reached scaleprobe's code in the rank (stuck as they started: an import, a
        lock held when they were forked, a site hook). Empty where the ranks are not known
        or no rank has a heartbeat (a folder the heartbeats could not be written to)."""
        if self.expected is None:
            return []
        seen = read_beats(self.run_dir or "")
        return sorted(self.expected - set(seen)) if seen else []

    def _own_line(self, agent: WorkerFailure) -> WorkerFailure:
        """The launcher's failure with the rank's own error line where it wrote one: a rank
        that raised exits with code 1, which is all the launcher can tell (it may see the
        exit before this watch has read the rank's last beat)."""
        own = read_error(self.run_dir or "", agent.rank) if agent.rank >= 0 else None
        return agent if own is None else WorkerFailure(agent.rank, own.line, error=own)

    def failure(self, err: Exception) -> WorkerFailure:
        """The job's failure: the first rank that failed, with its own error line (or how it
        died), or, when another rank had stopped making progress before (it hung; the one that
        failed only waited for it), that rank, with the other's error after it; a rank killed
        by SIGKILL goes before a rank that raised (``_killed_first``)."""
        return self._killed_first(self._failure(err))

    def _killed_first(self, found: WorkerFailure) -> WorkerFailure:
        """A rank that raised while another was killed by SIGKILL that this watch did not send
        (``kill -9``, the OOM killer): the killed one is the cause, whatever order the two ends
        were seen in. Its peers fail in the collective after it ("connection reset", an error
        raised in DDP's comm hook), and can end first: named first, the run blamed rank 0's
        hook for a SIGKILL of rank 1."""
        if found.rank < 0 or read_error(self.run_dir or "", found.rank) is None:
            return found
        sigkill = exit_text(-signal.SIGKILL)
        killed = [r for r, how in sorted(self.exits.items())
                  if how == sigkill and r not in self.killed and r != found.rank]
        if len(killed) != 1:
            return found
        return WorkerFailure(killed[0], f"{sigkill}; rank {found.rank} then failed: "
                                        f"{plain_error(found.message)}", -signal.SIGKILL)

    def _failure(self, err: Exception) -> WorkerFailure:
        agent = self._own_line(first_failure(err))
        if self.first is None:
            return agent
        rank, at, raised = self.first
        stalled_line = self.stall_line()
        if stalled_line is not None:  # this watch killed it: SIGKILL, as the shell says 137
            return WorkerFailure(rank, stalled_line, -signal.SIGKILL)
        failures = getattr(err, "failures", None) or {}
        fail = failures.get(rank)
        if (not raised and fail is None and agent.rank in failures
                and agent.rank not in self.killed):
            # ordered by last beats alone (up to a beat interval apart), a rank the launcher
            # stopped after the failure can look first; the launcher lists the ranks that
            # failed on their own (and those this watch killed, which are no cause)
            return agent
        own = read_error(self.run_dir or "", rank) if raised else None
        line = own.line if own is not None else None
        if line is None:
            # the launcher may not list a rank it has not seen end: a loader worker forked
            # from it holds the pipe the launcher waits on until the worker ends too
            line = (failure_line(fail) if fail is not None else self.exits.get(rank) or
                    (agent.message if agent.rank == rank else DIED_UNREAD))
        first = WorkerFailure(rank, line, None if raised or fail is None else fail.exitcode,
                              error=own)
        missing = self._never_started() if raised and gave_up_waiting(line) else []
        if missing:  # the rank that failed waited for one that never came
            return WorkerFailure(missing[0], f"{never_started_text(at - self.started_at)}; "
                                             f"{waited_text(rank, line)}")
        if self.stalled is None or not raised:
            return first
        stalled, beat = self.stalled
        if stalled == rank or at - beat.progress_wall < MIN_STALL_S:
            return first
        if beat.state != "training" and not gave_up_waiting(line):
            # before training, a frozen peer is named only where the rank that failed says it
            # waited (the rendezvous, a first collective): an error of its own comes first
            return first
        return WorkerFailure(stalled, f"{stall_text(beat, at)}; {waited_text(rank, line)}")
