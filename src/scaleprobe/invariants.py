"""Invariants every run result must hold, checked when the result is made and again by the
report (old files included). A violated invariant is never fixed up silently: the result
keeps its figures and lists what does not hold, and the summary line and the report say so.

    shares          data wait, communication (and every breakdown phase) within 0..100% of
                    the step
    no comm at 1    one training process has nothing to communicate: a comm phase there is
                    a wrapper's own cost mislabelled
    window          samples/s from the median step agrees with global batch x timed steps /
                    timed window within WINDOW_TOLERANCE (steps that vary widely, e.g. a
                    loader that stalls every few steps, make the median flatter the run)
    unique data     with a failing shard audit, samples/s counts samples read twice: the
                    result also gives unique samples/s (``metrics.unique_samples_per_s``)
    compile in window  torch.compile compiles in the untimed warm-up: a compilation (a
                    recompile, a first compile of a new frame, a CUDA graph recording) inside
                    the timed window is time the steady state does not spend
                    (``metrics.compiles_in_window``; measure/compiled.py)

Pure Python over the typed result (``results.RunResult``); no torch.
"""

from __future__ import annotations

from typing import Any

from scaleprobe.measure.compiled import window_line
from scaleprobe.results import RunResult

# median-step samples/s vs whole-window samples/s: a run whose steps are stable agrees within
# a few percent; 25% is outside the 10-18% process noise of the reference machine
WINDOW_TOLERANCE = 0.25
SHARES = ("data_wait_fraction", "comm_fraction")


def _num(v: Any) -> float | None:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def check_run(rec: RunResult | dict[str, Any]) -> list[dict[str, str]]:
    """The violated invariants of a run result (or its JSON record, old files included):
    ``[{name, detail}]``, empty when all hold."""
    r = RunResult.from_dict(rec)
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
    trainers = r.batch.training_ranks or r.batch.world_size
    comm = _num(bd.get("comm"))
    if trainers == 1 and comm and comm > 0:
        out.append({"name": "no comm at 1",
                    "detail": f"{comm * 1000:.1f} ms of communication with one training process"})
    gap = window_gap(r)
    if gap is not None:
        sps, window = gap
        out.append({"name": "window",
                    "detail": f"{sps:.1f} samples/s from the median step vs {window:.1f} over the "
                              f"timed window ({sps / window:.2f}x): step times vary widely"})
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


def window_gap(rec: RunResult | dict[str, Any]) -> tuple[float, float] | None:
    """(samples/s from the median step, samples/s over the timed window) when the two differ
    by more than ``WINDOW_TOLERANCE`` (the window invariant), else None."""
    r = rec if isinstance(rec, RunResult) else RunResult.from_dict(rec)
    window, sps = window_samples_per_s(r), _num(r.metrics.samples_per_s)
    if window and sps and abs(sps / window - 1.0) > WINDOW_TOLERANCE:
        return sps, window
    return None


def window_samples_per_s(rec: RunResult | dict[str, Any]) -> float | None:
    """Global batch x timed steps / timed window seconds (the first training rank's window).
    Only for lockstep strategies: an asynchronous parameter server's workers have their own."""
    r = RunResult.from_dict(rec)
    batch = r.batch.global_
    steps, window = _num(r.metrics.steps_timed), _num(r.metrics.window_s)
    if not batch or not steps or not window:
        return None
    if r.cfg("dist.ps_mode") == "async":
        return None
    return batch * steps / window
