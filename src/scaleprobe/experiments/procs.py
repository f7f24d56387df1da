"""Point processes: start one run in its own process (and its own process group), wait for it,
and stop it and everything it started, whatever happens to the parent.

A point process runs ``scaleprobe.experiments.point`` on ``POINT.json``; its output goes to a
log file, so the parent's progress bar stays readable and a failure can quote the log.

How a point process starts: on a machine without an NVIDIA or AMD GPU it is forked from a
server process (multiprocessing's forkserver) that imported torch, its compiler front end
(which torch's optimizers and DDP import on first use) and the training engine once, so a
point does not spend about five seconds of a 2-core CPU importing them again. The server
imports nothing that touches a GPU, but a process forked after CUDA was initialised cannot use
CUDA, and the forked start has not been run on a GPU, so on a GPU machine every point is a
fresh interpreter (``python -m scaleprobe.experiments.point POINT.json``).
``SCALEPROBE_POINT_START=fork`` or ``=exec`` chooses either start explicitly. The server is
itself a fresh interpreter, or a fork of the command's own process where that has imported
all the server preloads and run nothing yet (``start_server``; in practice the test suite's
commands, forked from a process that imported torch once).
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import io
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from multiprocessing import forkserver
from multiprocessing import util as mp_util
from pathlib import Path
from typing import Any

import psutil

from scaleprobe.core import results as res
from scaleprobe.core.errors import ConfigError
from scaleprobe.core.result_model import Experiment, RunResult
from scaleprobe.core.traits import known
from scaleprobe.experiments import point
from scaleprobe.experiments.point import INTERRUPTED, PointPayload, find_attempt, record_once
from scaleprobe.launch import is_fresh
from scaleprobe.launch.rankwatch import INTERRUPT_GRACE_S
from scaleprobe.measure.env import die_with, gpu_machine, use_platform_start_method

GRACE_S = 3.0  # after SIGINT, how long a point may take to write its record before SIGKILL
START_ENV = "SCALEPROBE_POINT_START"  # fork | exec (see the module's docstring)

# what the server imports once, for every point it forks: a point that trains in its own process
# needs the engine (and torch's compiler front end, imported by the optimizer's first use); a
# launcher of ranks needs the launcher's imports
_PRELOAD = ["scaleprobe.experiments.point", "scaleprobe.run.assemble", "scaleprobe.measure.monitor",
            "scaleprobe.train.engine", "torch._dynamo", "torch.distributed.launcher.api",
            "scaleprobe.launch"]


def grace_for(payload: PointPayload) -> float:
    """A launched point (ddp, ps, ...) forwards the stop to its ranks, which stop together
    and hand over their records within ``launch.INTERRUPT_GRACE_S``; then it writes its own."""
    tr = known(payload.config.dist.strategy)
    return INTERRUPT_GRACE_S + 5.0 if tr is not None and tr.launched else GRACE_S


@dataclass
class PointProcess:
    popen: Any  # subprocess.Popen, or _Forked (the same calls)
    attempt: str  # token in experiment.attempt: finds the record this process wrote
    log_path: Path
    started_s: float  # time.monotonic() at start
    payload: PointPayload  # what it runs: its config and experiment

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()


def write_payload(payload: PointPayload, work_dir: Path, label: str) -> Path:
    """``WORK_DIR/<label>-<attempt>.json``: what a point runs (read by experiments/point.py)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    path = work_dir / f"{label}-{payload.attempt}.json"
    path.write_text(json.dumps(payload.to_dict(), indent=1, default=str))
    return path


def fork_points() -> bool:
    """Whether points are forked from the preloaded server (see the module's docstring)."""
    how = os.environ.get(START_ENV, "").strip().lower()
    if how in ("fork", "exec"):
        return how == "fork"
    if how:
        raise ConfigError(f"{START_ENV}={how!r}: expected fork or exec")
    return (sys.platform == "linux" and "forkserver" in multiprocessing.get_all_start_methods()
            and not gpu_machine())


_server: Any = None
_held = 0  # open ``one_server`` blocks: while any is open, a set's close keeps the server


@contextlib.contextmanager
def one_server() -> Iterator[None]:
    """The point sets run inside share one server, ended as the block ends: a command that
    runs several sets in turn (the demo's two sweeps) pays the server's start, torch's import,
    once, not once per set."""
    global _held
    _held += 1
    try:
        yield
    finally:
        _held -= 1
        if not _held:
            stop_server()


def _forkserver() -> Any:
    global _server
    if _server is None:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(_PRELOAD)
        _server = ctx
    return _server


def _can_fork_server() -> bool:
    """Whether the server may start as a fork of this process rather than a fresh
    interpreter: this process is scaleprobe's own command and has run no tensor operation
    (``launch.is_fresh``: the rule its forked ranks follow; torch's OpenMP pool, once used,
    deadlocks a forked child, even a child of a child), imported what the server preloads (so
    a fork saves its import), and runs no thread but its main one and the one torch's import
    starts."""
    if not is_fresh() or not all(m in sys.modules for m in _PRELOAD) \
            or threading.active_count() != 1:
        return False
    try:
        tasks = len(os.listdir("/proc/self/task"))
    except OSError:  # no /proc: not Linux, where the server is a fresh interpreter anyway
        return False
    return tasks <= 1 + ("torch" in sys.modules)


def start_server() -> None:
    """Start the server now, as a fork of this process where ``_can_fork_server``, while no
    thread runs yet (a set calls it as it is made); otherwise it starts as a fresh
    interpreter at the first point, as multiprocessing starts it."""
    if _server is not None or not fork_points() or not _can_fork_server():
        return
    _forkserver()
    real = mp_util.spawnv_passfds
    setattr(mp_util, "spawnv_passfds", _fork_passfds)  # noqa: B010 (typed apart from ours)
    try:
        forkserver.ensure_running()
    finally:
        setattr(mp_util, "spawnv_passfds", real)  # noqa: B010


def _fork_passfds(path: str, args: list[str], passfds: list[int]) -> int:
    """multiprocessing's ``spawnv_passfds`` (fork, then exec ``python -c CMD`` keeping
    ``passfds``) without the exec: the child runs CMD, the server's main loop, with what this
    process imported. It is made to look as a fresh interpreter would: every other file
    descriptor points at /dev/null (a lock or pipe end of this process is not held by the
    server, and no number an object of this process still names can be reused), the standard
    streams are new, the signal handlers and mask are Python's defaults."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()  # nothing buffered here is written twice
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        _as_fresh_interpreter(set(passfds))
        exec(args[-1], {"__name__": "__mp_forkserver__"})  # noqa: S102 (multiprocessing's own)
        code = 0
    except SystemExit as e:  # the server's loop ends so, once no client is left
        code = e.code if isinstance(e.code, int) else 0
    except BaseException:  # noqa: BLE001 - never back into the caller's stack
        code = 1
    finally:
        os._exit(code)


def _as_fresh_interpreter(keep: set[int]) -> None:
    """In the forked server, before its loop: what ``_fork_passfds`` says."""
    null = os.open(os.devnull, os.O_RDWR)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd != null and fd not in keep:
            with contextlib.suppress(OSError):
                os.dup2(null, fd)
    signal.set_wakeup_fd(-1)
    for sig in signal.valid_signals():
        with contextlib.suppress(OSError, ValueError, RuntimeError):
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT
                          else signal.SIG_IGN if sig in _IGNORED else signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    sys.stdout = io.TextIOWrapper(open(1, "wb", closefd=False), line_buffering=True)  # noqa: SIM115
    sys.stderr = io.TextIOWrapper(open(2, "wb", closefd=False), line_buffering=True)  # noqa: SIM115
    setattr(forkserver._forkserver, "_lock", threading.Lock())  # noqa: B010 (held as it forked)
    faulthandler.disable()
    global _name_before
    with contextlib.suppress(OSError):
        _name_before = Path("/proc/self/comm").read_text().strip()
    _set_name(SERVER_NAME)  # in ps and psutil: its command line is the caller's


SERVER_NAME = "sp-pointserver"  # a forked server's process name (15 characters at most)
_name_before: str | None = None  # the caller's, given back to each point the server forks


def _set_name(name: str) -> None:
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME


_IGNORED = {signal.SIGPIPE, signal.SIGXFSZ}  # what Python ignores at start-up


def stop_server() -> None:
    """End the forkserver this process started: idle, it still holds torch's memory. Its
    points are over by then (``stop_all``); a straggler forked from it gets SIGTERM as the
    server ends (``point._die_with_parent``)."""
    global _server
    if _server is None:
        return
    _server = None

    srv = getattr(forkserver, "_forkserver", None)
    pid = getattr(srv, "_forkserver_pid", None)
    if srv is None or pid is None:
        return
    try:
        os.kill(pid, signal.SIGTERM)  # it would wait for every holder of its pipe to end
    except ProcessLookupError:
        pass
    try:
        srv._stop()  # closes its pipe, reaps it
    except (OSError, AttributeError):  # pragma: no cover  (another Python's internals)
        pass


def _forked_point(spec_path: str, log_path: str, env: dict[str, str],
                  own_session: bool = True, caller: int | None = None) -> None:
    """The body of a forked point: its own session (or, ``own_session`` False, its own
    process group in the parent's session), output to its log, the parent's current
    environment, then the point (its exit status is the point's). It ends with ``caller``
    (the sweep that asked for it: SIGTERM, recorded interrupted), however the caller ends:
    its parent is the server, which lives on while any point it forked lives (each holds
    the server's alive pipe), so a ``kill -9`` of the sweep left the point training."""
    if caller is not None:
        die_with(caller, signal.SIGTERM)
    if _name_before is not None:  # forked from a server that was forked from the caller
        _set_name(_name_before)
    if own_session:
        os.setsid()
    else:
        os.setpgid(0, 0)
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):  # None under pythonw; lines reach the log as written
            stream.reconfigure(line_buffering=True)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = ["scaleprobe.experiments.point", spec_path]

    use_platform_start_method()  # else "forkserver": its loader workers would not be its own

    sys.exit(point.main([spec_path]))


class _Forked:
    """A forked point with the calls ``subprocess.Popen`` gives (pid, poll, wait)."""

    def __init__(self, proc: Any) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.proc.exitcode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self.proc.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(f"point {self.pid}", timeout or 0.0)
        return self.returncode  # type: ignore[return-value]


class ProcessSet:
    """Every point process still running; ``stop_all()`` ends them and their children."""

    def __init__(self) -> None:
        self.live: dict[int, PointProcess] = {}
        start_server()  # while the caller runs no thread yet (a progress bar starts one)

    def start(self, payload: PointPayload, work_dir: Path, label: str,
              env: dict[str, str] | None = None, own_session: bool = True) -> PointProcess:
        """Start a point in a process of its own, leading its own process group (stopped as
        one) and, unless ``own_session`` is False, its own session: on Linux with autogroup
        scheduling the CPU is shared between sessions, so points meant to share the CPU as
        the ranks of one job do (one session) are started with it False."""
        attempt = payload.attempt
        forked = fork_points()
        payload = replace(payload, experiment=replace(payload.experiment,
                                                      start="fork" if forked else "exec"))
        spec_path = write_payload(payload, work_dir, label)
        log_path = work_dir / f"{label}-{attempt}.log"
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env.setdefault("PYTHONUNBUFFERED", "1")
        if forked:
            log_path.write_text("")
            child = _forkserver().Process(target=_forked_point, name=f"point {label}",
                                          args=(str(spec_path), str(log_path), full_env,
                                                own_session, os.getpid()))
            child.start()
            popen: Any = _Forked(child)
        else:
            with log_path.open("w") as log:
                popen = subprocess.Popen(
                    [sys.executable, "-m", "scaleprobe.experiments.point", str(spec_path)],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=own_session,
                    process_group=None if own_session else 0, env=full_env)
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

    def close(self) -> None:
        """Once the set's points are over: end the server they were forked from (unless a
        ``one_server`` block keeps it for the next set)."""
        if not _held:
            stop_server()

    def stop_all(self, grace_s: float | None = None) -> None:
        """Stop every point (``stop_groups``); a point that was ended before it recorded
        itself is recorded "interrupted" (it is run again on resume)."""
        procs = list(self.live.values())
        self.live.clear()
        if grace_s is None:
            grace_s = max([grace_for(p.payload) for p in procs], default=GRACE_S)
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
        try:  # a forked point in its first instant, before it made its own group
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def stop_groups(popens: list[Any], grace_s: float = GRACE_S) -> None:
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


def collect_record(proc: Any, rc: int) -> RunResult:
    """The record the point (a ``PointProcess`` or ``SlurmPoint``) wrote to its output's
    results file, or (when it died before writing one) a failed record naming how it ended,
    appended there so the failure is on disk too."""
    p = proc.payload
    path = Path(p.config.out) / res.RESULTS_FILE
    rec = find_attempt(path, p.attempt)
    if rec is not None:
        return rec
    tail = log_tail(proc.log_path)
    return record_once(p.config, p.experiment, path,
                       f"point process {describe_exit(rc)}" + (f": {tail}" if tail else ""))


def run_in_process(procs: Any, payload: PointPayload, work_dir: Path, label: str,
                   env: dict[str, str] | None = None) -> RunResult:
    """Start the point (``ProcessSet`` or an executor's), wait for it: its record."""
    proc = procs.start(payload, work_dir, label, env)
    return collect_record(proc, procs.wait(proc))


def _record_if_missing(proc: PointProcess) -> None:
    try:
        cfg = proc.payload.config
        record_once(cfg, proc.payload.experiment, Path(cfg.out) / res.RESULTS_FILE,
                    f"{INTERRUPTED}: stopped before it recorded itself", "interrupted")
    except Exception:  # noqa: BLE001  (stopping must go on; the point reruns on resume)
        pass


def new_attempt() -> str:
    return uuid.uuid4().hex[:12]


def point_experiment(exp_id: str, kind: str, point: dict[str, Any],
                     repeat: int | None = None) -> Experiment:
    """A point process's experiment, with a new ``attempt`` token (finds the record it
    writes)."""
    return Experiment(id=exp_id, kind=kind, point=point, repeat=repeat,
                          extra={"attempt": new_attempt()})


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
