"""The gate where runs measured together start their timed windows together: set in this
process (``set_window_gate``), or told to a launched rank through the environment
(measure/outside.py); the training loop passes it once, just before its first timed step
(``pass_window_gate``), and a parameter server's rank, which takes no timed step, says it is
ready at once (``server_ready``)."""

from __future__ import annotations

from collections.abc import Callable

from scaleprobe.measure.outside import gate_from_env, say_ready, wait_at_gate

# Called once, just before the first timed step (then cleared), with a function that says
# whether the run was asked to stop: co-located jobs wait there for each other, so their timed
# windows start together whatever their set-up and warm-up took (``experiments.point``); a
# stop request ends the wait (the loop then stops at its next step). None: the window starts
# when the warm-up ends.
_window_gate: Callable[[Callable[[], bool]], None] | None = None


def set_window_gate(gate: Callable[[Callable[[], bool]], None] | None) -> None:
    global _window_gate
    _window_gate = gate


def pass_window_gate(stopping: Callable[[], bool]) -> None:
    """Wait, once, at the gate of runs measured together: the one set in this process, else
    the one a launched rank was told of (measure/outside.py)."""
    global _window_gate
    gate, _window_gate = _window_gate, None
    told = gate_from_env()
    if gate is not None:
        gate(stopping)
    elif told is not None:
        wait_at_gate(told, stopping)


def server_ready() -> None:
    """A parameter server's rank takes no timed step: at a launched job's gate it says it is
    ready at once (its job is ready once every rank is), and serves."""
    told = gate_from_env()
    if told is not None:
        say_ready(told)
