"""Which workload a configuration names: the user's script (``script.path``) or the built-in
loop; and a run of it, by the one driver (``run/driver.py``)."""

from __future__ import annotations

from scaleprobe.config.sections import RunConfig
from scaleprobe.core.result_model import Experiment, RunResult
from scaleprobe.protocols import Workload
from scaleprobe.run.builtin import BuiltinTraining
from scaleprobe.run.driver import execute
from scaleprobe.run.script import UserScript


def workload_for(cfg: RunConfig) -> Workload:
    return UserScript(cfg) if cfg.script.path is not None else BuiltinTraining(cfg)


def run_config(cfg: RunConfig, experiment: Experiment | None = None) -> RunResult:
    """Run ``cfg`` (a sweep's point may name a script: a sweep over a script's own flags) and
    return its written result."""
    return execute(workload_for(cfg), experiment)


def preflight(cfg: RunConfig) -> None:
    """The workload's cheap checks (names, folders), before anything starts."""
    workload_for(cfg).preflight()
