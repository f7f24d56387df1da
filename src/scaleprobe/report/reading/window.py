"""How a run's timed window ended and how sure its headline step time is: the stop reason
(``metrics.stop_reason``, train/stopping.py) beside the median's 95% interval, for the run
summary and the report's runs table. Torch-free."""

from __future__ import annotations

import math

from scaleprobe.core.result_model import RunResult

# reason -> how the summary says it (the caps are named with their values where they have one)
ENDED = {
    "steps": "after the --steps count",
    "stable": "when the median step was stable",
    "max-steps": "at --max-steps ({max_steps}) before the median step was stable",
    "max-seconds": "at --max-seconds ({max_seconds:g} s) before the median step was stable",
    "peer": "when another rank's cap or stable median stopped every rank",
    "epochs": "after the --epochs",
    "target": "when the --target was reached",
    "max-epochs": "at --max-epochs without reaching the --target",
    "interrupted": "when the run was interrupted",
    "script": "when the script ended on its own",
    "failed": "when the run failed (a rank died, hung or exited with an error)",
}
UNSTABLE = ("max-steps", "max-seconds")
STEP_NOTE = ("Step median ±: half the median's 95% interval, relative to the median; "
             "(max-steps, not stable) or (max-seconds, not stable): --steps auto ended at that "
             "cap before the median was stable; (failed), (interrupted): the steps before the "
             "run stopped")


def step_note(rows: list[list[str]]) -> str:
    """The runs table's note on its step-median cells: the markers only where a cell has
    one."""
    marked = any("not stable)" in c or "(failed)" in c or "(interrupted)" in c or "(peer)" in c
                 for row in rows for c in row)
    return STEP_NOTE if marked else STEP_NOTE.split(";")[0]


def rel_ci_text(rel: float | None) -> str:
    """``±5.9%``: the median's 95% interval, half its width relative to the median."""
    if rel is None or not math.isfinite(rel):
        return "n/a"
    return f"±{rel * 100:.1f}%"


def window_line(r: RunResult) -> str | None:
    """``timed window: 57 steps, ended at --max-seconds (30 s) before the median step was
    stable; its 95% interval is ±5.9% of it (stable at ±2.0%)``; None when nothing was timed."""
    m = r.metrics
    st = m.step_time_s
    if st is None or not m.steps_timed:
        return None
    why = m.stop_reason
    ended = ENDED.get(why or "", "")
    if ended:
        ended = ", ended " + ended.format(max_steps=r.cfg("train.max_steps"),
                                          max_seconds=r.cfg("train.max_seconds") or 0)
    if st.rel_ci is not None and math.isfinite(st.rel_ci):
        spread = f"the median's 95% interval is {rel_ci_text(st.rel_ci)} of it"
    else:
        spread = "no interval for the median" + (
            " (it needs 3 timed steps or more)" if m.steps_timed < 3 else "")
    line = f"timed window: {m.steps_timed} steps{ended}; {spread}"
    target = r.cfg("measure.stable_rel_ci")
    if r.cfg("train.steps") == "auto" and target is not None:
        line += f" (stable at ±{float(target) * 100:g}%)"
    if r.partial:
        line += f"; partial: {r.null_reasons.get('partial') or 'the steps before it stopped'}"
    return line


def step_cell(r: RunResult, ms: str) -> str:
    """The runs table's step median: ``65.1 ms ±5.9%``, and how the window ended where that
    says more than the step count did (``max-seconds``: the median was not stable)."""
    st = r.metrics.step_time_s
    if st is None or st.median is None:
        return ms
    cell = f"{ms} {rel_ci_text(st.rel_ci)}" if st.rel_ci is not None else ms
    why = r.metrics.stop_reason
    if why in UNSTABLE or why in ("failed", "interrupted", "peer"):
        cell += f" ({why}{', not stable' if why in UNSTABLE else ''})"
    return cell
