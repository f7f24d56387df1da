"""Point processes: start one run in its own process (and its own process group), wait for it,
and stop it and everything it started, whatever happens to the parent.

A point process runs ``python -m scaleprobe.experiments.point POINT.json``; its output goes to
a log file, so the parent's progress bar stays readable and a failure can quote the log.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

GRACE_S = 3.0  # after SIGINT, how long a point may take to write its record before SIGKILL


def grace_for(payload: dict[str, Any]) -> float:
    """A launched point (ddp, ps, ...) forwards the stop to its ranks, which stop together
    and hand over their records within ``launch.INTERRUPT_GRACE_S``; then it writes its own."""
    from scaleprobe.launch import INTERRUPT_GRACE_S
    from scaleprobe.traits import known

    tr = known((payload.get("config") or {}).get("dist", {}).get("strategy"))
    return INTERRUPT_GRACE_S + 5.0 if tr is not None and tr.launched else GRACE_S


@dataclass
class PointProcess:
    popen: subprocess.Popen
    attempt: str  # token in experiment.attempt: finds the record this process wrote
    log_path: Path
    started_s: float  # time.monotonic() at start
    payload: dict[str, Any] | None = None  # what it runs: its config and experiment

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()


def write_payload(payload: dict[str, Any], work_dir: Path, label: str) -> Path:
    """``WORK_DIR/<label>-<attempt>.json``: what a point runs (read by experiments/point.py)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    path = work_dir / f"{label}-{payload['experiment']['attempt']}.json"
    path.write_text(json.dumps(payload, indent=1, default=str))
    return path


class ProcessSet:
    """Every point process still running; ``stop_all()`` ends them and their children."""

    def __init__(self) -> None:
        self.live: dict[int, PointProcess] = {}

    def start(self, payload: dict[str, Any], work_dir: Path, label: str,
              env: dict[str, str] | None = None) -> PointProcess:
        attempt = payload["experiment"]["attempt"]
        spec_path = write_payload(payload, work_dir, label)
        log_path = work_dir / f"{label}-{attempt}.log"
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env.setdefault("PYTHONUNBUFFERED", "1")
        with log_path.open("w") as log:
            popen = subprocess.Popen(
                [sys.executable, "-m", "scaleprobe.experiments.point", str(spec_path)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, env=full_env)
        proc = PointProcess(popen, attempt, log_path, time.monotonic(), payload)
        self.live[popen.pid] = proc
        return proc

    def wait(self, proc: PointProcess, poll_s: float = 0.2) -> int:
        """Wait for ``proc`` to end; Ctrl+C in the parent interrupts the wait at once."""
        while True:
            rc = proc.poll()
            if rc is not None:
                self.live.pop(proc.pid, None)
                return rc
            time.sleep(poll_s)

    def finished(self, proc: PointProcess) -> None:
        self.live.pop(proc.pid, None)

    def stop_all(self, grace_s: float | None = None) -> None:
        """Stop every point (``stop_groups``); a point that was ended before it recorded
        itself is recorded "interrupted" (it is run again on resume)."""
        procs = list(self.live.values())
        self.live.clear()
        if grace_s is None:
            grace_s = max([grace_for(p.payload or {}) for p in procs], default=GRACE_S)
        stop_groups([p.popen for p in procs], grace_s)
        for p in procs:
            _record_if_missing(p)


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_groups(popens: list[subprocess.Popen], grace_s: float = GRACE_S) -> None:
    """SIGINT each process group (a point records itself as interrupted), SIGKILL whatever is
    left after ``grace_s``, including descendants that left the group."""
    alive = [p for p in popens if p.poll() is None]
    if not alive:
        return
    family = {p.pid: _descendants(p.pid) for p in alive}
    for p in alive:
        _signal_group(p.pid, signal.SIGINT)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(p.poll() is None for p in alive):
        time.sleep(0.05)
    for p in alive:
        _signal_group(p.pid, signal.SIGKILL)
        for child in family[p.pid] + _descendants(p.pid):
            try:
                child.kill()
            except psutil.Error:
                pass
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover  (SIGKILL is not refused)
            pass
    for kids in family.values():
        psutil.wait_procs(kids, timeout=2)


def collect_record(proc: PointProcess, rc: int, cfg: Any, experiment: dict[str, Any],
                   results_path: Path) -> dict[str, Any]:
    """The record the point wrote, or (when it died before writing one) a failed record
    naming how it ended, appended to ``results_path`` so the failure is on disk too."""
    from scaleprobe import results as res
    from scaleprobe.experiments.point import failed_record, find_attempt
    from scaleprobe.runner import default_name

    rec = find_attempt(res.read_jsonl(results_path, warn=False), experiment["attempt"])
    if rec is None:
        tail = log_tail(proc.log_path)
        error = f"point process {describe_exit(rc)}" + (f": {tail}" if tail else "")
        rec = failed_record(cfg.to_dict(), cfg.key(), cfg.name or default_name(cfg),
                            experiment, error)
        res.append_jsonl(results_path, rec)
    return rec


def _record_if_missing(proc: PointProcess) -> None:
    from scaleprobe import results as res
    from scaleprobe.config import from_dict
    from scaleprobe.experiments.point import INTERRUPTED, failed_record, find_attempt
    from scaleprobe.runner import default_name

    if not proc.payload:
        return
    try:
        cfg = from_dict(proc.payload["config"])
        path = Path(cfg.out) / res.RESULTS_FILE
        if find_attempt(res.read_jsonl(path, warn=False), proc.attempt) is None:
            rec = failed_record(cfg.to_dict(), cfg.key(), cfg.name or default_name(cfg),
                                proc.payload["experiment"],
                                f"{INTERRUPTED}: stopped before it recorded itself",
                                status="interrupted")
            res.append_jsonl(path, rec)
    except Exception:  # noqa: BLE001  (stopping must go on; the point reruns on resume)
        pass


def new_attempt() -> str:
    return uuid.uuid4().hex[:12]


def log_tail(path: Path, max_lines: int = 40) -> str:
    """The last meaningful error line of a point's log (for a failure record)."""
    try:
        lines = path.read_text(errors="replace").splitlines()[-max_lines:]
    except OSError:
        return ""
    skip = ("File ", "Traceback", "^", "~", "During handling", "The above exception")
    meaningful = [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith(skip)]
    return meaningful[-1][:400] if meaningful else ""


def describe_exit(rc: int) -> str:
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"killed by {name}"
    return f"exited with code {rc}"
