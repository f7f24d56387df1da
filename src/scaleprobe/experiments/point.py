"""One experiment point in its own process: fresh memory accounting, and a crash or an
out-of-memory error cannot take the sweep down.

    python -m scaleprobe.experiments.point POINT.json

``POINT.json`` is a ``PointPayload``: ``config`` (``RunConfig.to_dict()``), ``experiment``
(``{id, kind, point, repeat, start, attempt}``), ``cpus`` (a CPU set to pin to, or null) and
``barrier`` (null, or ``{ready, go}`` file paths: announce that the timed window is about to
start, then wait for the start signal, so runs measured together start their windows
together: measure/outside.py's gate). The run appends its record to ``OUT/results.jsonl``; the exit
status is the run's (0 ok, 3 out of memory, 130 interrupted, 1 failed, 2 user error).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scaleprobe.config.runconfig import from_dict
from scaleprobe.config.sections import RunConfig
from scaleprobe.core import results as res
from scaleprobe.core.errors import ScaleprobeError
from scaleprobe.core.result_model import Experiment, RunResult
from scaleprobe.core.traits import traits_of
from scaleprobe.features.interrupt import Interrupted, describe
from scaleprobe.launch import fresh_launcher
from scaleprobe.measure.env import die_with_parent
from scaleprobe.measure.outside import WINDOW_GATE_ENV, note_companion_end, wait_at_gate
from scaleprobe.run.failure import exit_code
from scaleprobe.train.window_gate import set_window_gate

INTERRUPTED = "interrupted by the user (Ctrl+C)"


@dataclass(frozen=True)
class PointPayload:
    """What a point process runs (``POINT.json``, written by the parent, read here)."""

    config: RunConfig
    experiment: Experiment  # its extras hold ``attempt``: finds the record it writes
    cpus: list[int] | None = None  # a CPU set to pin to
    barrier: dict[str, str] | None = None  # {ready, go}: file paths (co-located jobs)

    @property
    def attempt(self) -> str:
        return str(self.experiment.extra["attempt"])

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config.to_dict(), "experiment": self.experiment.to_dict(),
                "cpus": self.cpus, "barrier": self.barrier}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PointPayload:
        return cls(from_dict(d["config"]), Experiment.from_dict(d["experiment"]),
                   d.get("cpus"), d.get("barrier"))


def failed_record(cfg: RunConfig, experiment: Experiment, error: str,
                  status: str = "failed") -> RunResult:
    """A run record for a point that never produced one of its own."""
    name = cfg.name or cfg.default_name()
    return RunResult(run_id=res.make_run_id(name), name=name, key=cfg.key(), status=status,
                     error=error[:1000], started_at=res.utc_now(), finished_at=res.utc_now(),
                     config=cfg, experiment=experiment)


def find_attempt(results: Path, attempt: str | None) -> RunResult | None:
    """The run record in ``results`` whose point process had token ``attempt``."""
    for rec in reversed(res.runs(res.read_jsonl(results, warn=False)) if attempt else []):
        if (rec.get("experiment") or {}).get("attempt") == attempt:
            return RunResult.from_dict(rec)
    return None


def record_once(cfg: RunConfig, exp: Experiment, results: Path, error: str,
                status: str = "failed") -> RunResult:
    """The record the point of ``exp`` (its attempt) wrote to ``results``; else a record of
    its failure, appended there so that the failure is on disk too."""
    rec = find_attempt(results, exp.extra.get("attempt"))
    if rec is None:
        rec = failed_record(cfg, exp, error, status)
        res.append_jsonl(results, rec.to_dict())
    return rec


def _die_with_parent() -> None:
    """Ask Linux to SIGTERM this process when the sweep that started it dies."""
    die_with_parent(signal.SIGTERM)


def _sigterm_as_interrupt() -> None:
    def handler(signum: int, frame: Any) -> None:
        raise Interrupted("SIGTERM")

    signal.signal(signal.SIGTERM, handler)


def _import_or_stop(cfg: RunConfig, exp: Experiment) -> None:
    """The slow imports of a run (torch, torchvision, the engine), with Ctrl+C and SIGTERM
    recording the point interrupted and ending the process at once. A KeyboardInterrupt
    raised inside an import cannot be caught safely: it leaves numpy or torch half-imported
    (their next import fails with an unrelated error, and the interrupted run was recorded
    failed), is thrown through C++ code (std::terminate), or is swallowed by the library being
    imported (and the point starts training)."""
    def stop(signum: int, frame: Any) -> None:
        _record(cfg, exp, INTERRUPTED, "interrupted")
        os._exit(130)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
    # heavy: torch: loaded in a point's own process, never the sweep's
    import scaleprobe.run.workloads  # noqa: F401  (the driver, the launcher, torch)

    if _trains_here(cfg):
        # heavy: torch: loaded in a point's own process, never the sweep's
        import scaleprobe.train.engine  # noqa: F401  (torch, torchvision, the training loop)
    else:  # the ranks train in processes of their own: this one launches them and assembles
        # heavy: torch: loaded in a point's own process, never the sweep's
        import torch.distributed.launcher.api  # noqa: F401

    signal.signal(signal.SIGINT, signal.default_int_handler)
    _sigterm_as_interrupt()


def _trains_here(cfg: Any) -> bool:
    """The point's training runs in this process (one process, the built-in loop): it then
    needs the engine's imports; a launcher of ranks or of a script needs only the launcher's
    (about 1.4 s less of every such point's start on a 2-core CPU)."""
    return cfg.script.path is None and traits_of(cfg.dist.strategy).in_process


def _barrier(cfg: Any, barrier: dict[str, str]) -> bool:
    """Where the co-located jobs wait for each other: just before the first timed step
    (set-up, FLOP count and warm-up take each job its own time: waiting after the imports
    let a fast job's window pass half alone in a 1-second window), in this process when the
    training runs here, else in the launched ranks of the built-in loop (told by
    ``WINDOW_GATE_ENV``); a script's ranks wait here, after the imports. True when the
    loop's window gate was set (the caller clears it, however the run ends)."""
    if _trains_here(cfg):
        set_window_gate(lambda stopping: wait_at_gate(barrier, stopping))
        return True
    if cfg.script.path is None:
        os.environ[WINDOW_GATE_ENV] = json.dumps(barrier)
        return False
    wait_at_gate(barrier)
    return False


def run_point(payload: PointPayload) -> int:
    fresh_launcher()  # a point's own process: its ranks may be forked from it
    exp, cfg = payload.experiment, payload.config
    if payload.cpus and hasattr(os, "sched_setaffinity"):  # Linux; elsewhere unpinned
        os.sched_setaffinity(0, set(payload.cpus))
    _import_or_stop(cfg, exp)
    gated = False
    try:
        # heavy: torch: loaded in a point's own process, never the sweep's
        from scaleprobe.run.workloads import run_config  # imported by _import_or_stop

        if payload.barrier:
            gated = _barrier(cfg, payload.barrier)
        result = run_config(cfg, experiment=exp)
    except KeyboardInterrupt as e:
        _record(cfg, exp, describe(getattr(e, "signame", None)), "interrupted")
        return 130
    except ScaleprobeError as e:
        print(f"scaleprobe: error: {e}", file=sys.stderr)
        _record(cfg, exp, str(e))
        return e.exit_code
    except Exception as e:  # noqa: BLE001  (recorded, never lost)
        traceback.print_exc()
        _record(cfg, exp, f"{type(e).__name__}: {e}")
        return 1
    finally:
        if gated:  # a run that ended before its first timed step never passed it
            set_window_gate(None)
    print(f"point {exp.point}: {result.status}"
          + (f" ({result.error})" if result.error else ""))
    return exit_code(result.status)


def _record(cfg: RunConfig, exp: Experiment, error: str, status: str = "failed") -> None:
    # kept: the run's own record of its ending (a data error met while training)
    record_once(cfg, exp, res.results_file(cfg.out), error, status)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m scaleprobe.experiments.point POINT.json", file=sys.stderr)
        return 2
    _die_with_parent()
    _sigterm_as_interrupt()
    try:
        return run_point(PointPayload.from_dict(json.loads(Path(argv[0]).read_text())))
    finally:
        note_companion_end()  # runs started with it read its CPU clock once it is gone


if __name__ == "__main__":
    sys.exit(main())
