"""Invariants every run result must hold, checked when the result is made and again by the
report (old files included). A violated invariant is never fixed up silently: the result
keeps its figures and lists what does not hold, and the summary line and the report say so.

The invariants (shares, no comm at 1, window, unique data, compile in window) are
docs/VERDICTS.md's table ("Invariants").

Not an invariant, and reported as a finding instead (``uneven_steps``): the median step's
rate against the window's; steps that vary widely (a loader that stalls every few steps,
epoch starts, preemption) make the median step flatter the run by more than
``WINDOW_TOLERANCE``.

Pure Python over the typed result (``results.RunResult``); no torch.
"""

from __future__ import annotations

from typing import Any

from scaleprobe.core import metrics as M
from scaleprobe.core.result_model import RunResult

# where a compile event fell against the timed window (measure/compiled.py classifies them)
WARMUP, WINDOW, AFTER = "warm-up", "window", "after"

# median-step samples/s vs whole-window samples/s: a run whose steps are stable agrees within
# a few percent; 25% is outside the 10-18% process noise of the reference machine
WINDOW_TOLERANCE = 0.25
# samples/s against global batch x steps / window: the same figure by construction; ranks'
# windows start and end a few milliseconds apart (each its own clock), well under 5%
WINDOW_CHECK_REL = 0.05
SHARES = ("data_wait_fraction", "comm_fraction")


def _num(v: Any) -> float | None:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def check_run(r: RunResult) -> list[dict[str, str]]:
    """The violated invariants of a run result (old files included): ``[{name, detail}]``,
    empty when all hold."""
    if r.status != "ok":
        return []
    m = r.metrics
    out: list[dict[str, str]] = []
    for k in SHARES:
        v = _num(getattr(m, k))
        if v is not None and not 0.0 <= v <= 1.0:
            out.append({"name": "shares", "detail": f"{k} is {v:.3f}, outside 0..1"})
    bd = m.breakdown_s.phases()
    neg = [p for p, v in bd.items() if (_num(v) or 0.0) < 0]
    if neg:
        out.append({"name": "shares", "detail": f"negative phase time: {', '.join(neg)}"})
    # processes, not training ranks: a parameter server with one worker is two processes,
    # and its push / pull is real communication
    procs = r.batch.world_size or r.batch.training_ranks
    comm = _num(bd.get("comm"))
    if procs == 1 and comm and comm > 0:
        out.append({"name": "no comm at 1",
                    "detail": f"{comm * 1000:.1f} ms of communication within one process"})
    window = window_samples_per_s(r)
    if (m.samples_per_s_median_step is not None and window and m.samples_per_s
            and abs(m.samples_per_s / window - 1.0) > window_tolerance(r)):
        out.append({"name": "window",
                    "detail": f"samples/s {m.samples_per_s:.1f} is not global batch x timed "
                              f"steps / timed window ({window:.1f})"})
    inside = _num(m.compiles_in_window)
    if inside:
        events = (r.compile or {}).get("events") or []
        out.append({"name": "compile in window",
                    "detail": (window_line(events) or f"{inside} compilations inside the timed "
                               "window (on another rank)") + ": those steps include compiling"})
    if r.audit is not None and r.audit.ok is False and m.unique_samples_per_s is None:
        out.append({"name": "unique data",
                    "detail": "the shard audit failed but no unique samples/s was given"})
    return out


def window_tolerance(r: RunResult) -> float:
    """How far samples/s (the sum of each training rank's rate over its own window) may stand
    from rank 0's window rate: ``WINDOW_CHECK_REL``, or, with several ranks, the skew their
    windows can have. Ranks in lockstep start and end their windows at the same collectives
    give or take the part of a step outside them, and a rank held up at its window's start
    (the machine's load, a descheduled thread) shows as a peer's longest step, which waited
    for it: so the windows differ by at most the longest step any rank took. On a 3-step run
    under load that is far above 5%; over a few hundred steps it is under."""
    w = _num(r.metrics.window_s)
    longest = [_num(x.step_time_s.max) for x in r.ranks if x.step_time_s is not None]
    skew = max((v for v in longest if v is not None), default=0.0)
    if len(r.ranks) < 2 or not w or not skew:
        return WINDOW_CHECK_REL
    return max(WINDOW_CHECK_REL, skew / max(w - skew, 1e-9))


def uneven_steps(r: RunResult) -> tuple[float, float] | None:
    """(samples/s from the median step, samples/s over the timed window) when the two differ
    by more than ``WINDOW_TOLERANCE``, else None. A record written before the throughput was
    the window's holds the median step's rate as its samples/s."""
    step = _num(r.metrics.samples_per_s_median_step)
    if step is None:  # an older record: its samples/s was the median step's
        step = _num(r.metrics.samples_per_s)
    window = window_samples_per_s(r)
    if window and step and abs(step / window - 1.0) > WINDOW_TOLERANCE:
        return step, window
    return None


def window_samples_per_s(r: RunResult) -> float | None:
    """Global batch x timed steps / timed window seconds (the first training rank's window).
    Only for lockstep strategies: an asynchronous parameter server's workers have their own,
    and so have the ranks of a script that never communicated (several ranks, no
    communication record): each ran at its own pace, and rank 0's window is not theirs."""
    if r.cfg("dist.ps_mode") == "async":
        return None
    if (r.batch.world_size or 1) > 1 and r.comm is None:
        return None
    return M.window_samples_per_s(r.batch.global_, r.metrics.steps_timed, r.metrics.window_s)


def window_line(events: list[dict[str, Any]]) -> str | None:
    """One line naming the compilations inside the timed window (None when there are none):
    how many, their time, the timed steps they fell in, and a recompile's reason."""
    inside = [e for e in events if e.get("phase") == WINDOW]
    if not inside:
        return None
    total = sum(e.get("duration_s") or 0.0 for e in inside)
    rc = [e for e in inside if e.get("recompile")]
    steps = sorted({e["timed_step"] for e in inside if e.get("timed_step") is not None})
    what = (f"{len(rc)} recompile{'s' if len(rc) != 1 else ''}" if rc and len(rc) == len(inside)
            else f"{len(inside)} compilation{'s' if len(inside) != 1 else ''}"
            + (f" ({len(rc)} recompile{'s' if len(rc) != 1 else ''})" if rc else ""))
    line = f"{what} inside the timed window, {total:.2f} s"
    if steps:
        line += " in timed step" + ("s " if len(steps) > 1 else " ") + ", ".join(
            str(s + 1) for s in steps[:5]) + (", ..." if len(steps) > 5 else "")
    why = next((e.get("reason") for e in rc if e.get("reason")), None)
    if why:
        line += f"; {why.strip().splitlines()[0]}"
    return line
