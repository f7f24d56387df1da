"""Start N workers through PyTorch's elastic launcher (the engine behind ``torchrun``).

The rendezvous is static, on a store this process serves itself, bound to one address: on one
host 127.0.0.1 (a free port picked by the OS, or ``--master-port``), so nothing listens on
the machine's other interfaces; with several hosts, host 0 listens on the address of
``--rdzv-endpoint HOST:PORT`` only, and ``--node-rank`` chooses each host's place, exactly as
``torchrun --nnodes M --node-rank R``. The workers' own sockets (gloo, NCCL's bootstrap) are
bound to the same interface through GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME, unless set.

A worker that raises or dies ends the whole job: the launcher stops the other workers and
``WorkerFailure`` names the first failed rank and its error, or, when the ranks' heartbeats
(``measure/heartbeat.py``) show that another rank had stopped making progress (a hung rank,
while the one that raised only waited for it), that rank. The ranks left and their loader
workers are killed at once, not after the launcher's 30 s grace. Ctrl+C or SIGTERM to this
process is forwarded to the workers, which stop together and keep their records
(``interrupt.py``); ``Interrupted`` then reports it.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

from scaleprobe.errors import ConfigError

# after Ctrl+C / SIGTERM: how long the workers get to stop together and hand over their records
# before they are killed (a scheduler's grace before SIGKILL is typically 30 s)
INTERRUPT_GRACE_S = 20
# after a rank failed or died: how long the launcher gets to see it before the ranks left are
# killed
KILL_AFTER_S = 1.0
# a rank is named as the one that stopped only when it had not moved for this long
MIN_STALL_S = 2.0


class WorkerFailure(RuntimeError):
    """A worker process raised or died. ``rank`` is the global rank to blame: the first that
    failed, or the one that had stopped making progress before it (``RankWatch.failure``)."""

    def __init__(self, rank: int, message: str, exitcode: int | None = None) -> None:
        super().__init__(f"rank {rank} failed: {message}")
        self.rank = rank
        self.message = message
        self.exitcode = exitcode


def _parse_endpoint(endpoint: str) -> tuple[str, int]:
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"rendezvous endpoint must be HOST:PORT, got '{endpoint}'")
    return host, int(port)


def _listen(host: str, port: int, what: str) -> socket.socket:
    """A listening socket on HOST:PORT only (port 0: one the OS picks)."""
    try:
        family, _, _, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except OSError as e:
        raise ConfigError(f"cannot resolve the rendezvous host '{host}': {e}") from None
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
        sock.listen(128)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise ConfigError(f"rendezvous port {port} on {host} is already in use; pick "
                              f"another {what}") from None
        if e.errno == errno.EADDRNOTAVAIL:
            raise ConfigError(f"cannot listen on {host}:{port}: not an address of this host "
                              "(host 0 of the job serves the rendezvous at --rdzv-endpoint)"
                              ) from None
        raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return sock


def _serve_store(sock: socket.socket, timeout_s: float) -> Any:
    """The job's TCPStore server on ``sock``. The launcher's own store for the same port is
    multi-tenant, so it shares this server instead of starting one on every interface."""
    from torch.distributed import TCPStore

    host, port = sock.getsockname()[:2]
    return TCPStore(host, port, None, True, timedelta(seconds=max(60.0, timeout_s)),
                    wait_for_workers=False, multi_tenant=True, master_listen_fd=sock.detach())


def _interface_of(ip: str) -> str | None:
    import psutil

    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address.split("%")[0] == ip for a in addrs):
            return name
    return None


def _route_interface(host: str, port: int) -> str | None:
    """The interface this host reaches HOST through (no packet is sent)."""
    try:
        family, _, _, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect(addr)
            return _interface_of(s.getsockname()[0])
    except OSError:
        return None


@contextlib.contextmanager
def _environ(values: dict[str, str | None]) -> Iterator[None]:
    """Set (or keep the user's) variables for the workers; restore them afterwards."""
    saved = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is not None and k not in os.environ:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _quiet_elastic_logs() -> None:
    """The launcher logs every worker's traceback; scaleprobe reports failures itself."""
    prefixes = ("torch.distributed.elastic", "torch.distributed.launcher",
                "torch.multiprocessing")
    names = [n for n in logging.root.manager.loggerDict if n.startswith(prefixes)]
    for name in list(prefixes) + names:
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _launch_config(nproc: int, nnodes: int, node_rank: int, endpoint: str, run_id: str,
                   timeout_s: float, log_dir: str | None):
    import dataclasses

    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.launcher.api import LaunchConfig

    logs = DefaultLogsSpecs(log_dir=log_dir or tempfile.mkdtemp(prefix="scaleprobe-logs-"))
    extra: dict[str, Any] = {}
    if "shutdown_timeout" in {f.name for f in dataclasses.fields(LaunchConfig)}:
        extra["shutdown_timeout"] = INTERRUPT_GRACE_S
    return LaunchConfig(min_nodes=nnodes, max_nodes=nnodes, nproc_per_node=nproc,
                        run_id=run_id, max_restarts=0, monitor_interval=0.1,
                        start_method="spawn", logs_specs=logs, rdzv_backend="static",
                        rdzv_endpoint=endpoint,
                        rdzv_configs={"rank": node_rank, "timeout": int(max(60, timeout_s))},
                        rdzv_timeout=int(max(60, timeout_s)), **extra)


def _first_failure(err: Exception) -> WorkerFailure:
    """The launcher's first failure, by its timestamps (whole seconds), then rank."""
    failures = getattr(err, "failures", None) or {}
    if not failures:
        return WorkerFailure(-1, str(err).strip().splitlines()[-1] if str(err) else repr(err))
    rank, fail = min(failures.items(), key=lambda kv: (kv[1].timestamp, kv[0]))
    return WorkerFailure(rank, _failure_line(fail), fail.exitcode)


def _failure_line(fail: Any) -> str:
    msg = str(getattr(fail, "message", "") or "")
    if isinstance(getattr(fail, "error_file_data", None), dict):
        m = fail.error_file_data.get("message", {})
        if isinstance(m, dict):
            msg = m.get("message", msg)
    if fail.exitcode is not None and fail.exitcode < 0:
        return _exit_text(fail.exitcode)
    return last_meaningful_line(msg) or _exit_text(fail.exitcode)


def _exit_text(exitcode: int | None) -> str:
    """A rank's end as the job's error names it; negative: the signal that killed it."""
    if exitcode is not None and exitcode < 0:
        return f"killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


def last_meaningful_line(msg: str) -> str:
    """The error line of a traceback: its last line that is not a frame or a marker."""
    lines = [ln.strip() for ln in msg.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln.startswith(("File ", "^", "~")) or ln.startswith("Traceback"):
            continue
        return ln[:400]
    return ""


def _how_child_ended(pid: int) -> str | None:
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
        return _exit_text(-info.si_status)
    if info.si_code == os.CLD_EXITED:
        return _exit_text(info.si_status)
    return None


def _alive(proc: Any) -> bool:
    import psutil

    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class RankWatch:
    """Follows a launched job's ranks through their heartbeats (``measure/heartbeat.py``):
    their pids and every process each one started (loader workers). When a rank fails (it
    raised: its heartbeat says so before its process has exited, which can take seconds) or
    dies without having finished, it notes the first such rank and which rank, if any, had
    stopped making progress before, and after ``KILL_AFTER_S`` kills every rank left with its
    process group: a rank waiting in a collective for a dead or stopped peer would otherwise
    wait for the collective timeout, and a stopped one (SIGSTOP) ignores the launcher's
    SIGTERM.
    On exit it kills whatever is left, including the loader workers of a killed rank, which
    outlive it by seconds otherwise (reparented, until their own watchdog notices)."""

    POLL_S = 0.2

    def __init__(self, run_dir: str | None) -> None:
        self.run_dir = run_dir
        self.procs: dict[int, Any] = {}  # rank -> its process (None: gone before first seen)
        self.family: dict[int, dict[int, Any]] = {}
        self.first: tuple[int, float, bool] | None = None  # (rank, when, raised: not killed)
        self.stalled: tuple[int, dict[str, Any]] | None = None
        self.exits: dict[int, str] = {}  # rank -> how its process ended, where it could be read
        self.killed: set[int] = set()  # ranks this watch killed (after another's failure)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> RankWatch:
        if self.run_dir:
            self._thread = threading.Thread(target=self._loop, name="scaleprobe-rank-watch",
                                            daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.kill_all()

    def _loop(self) -> None:
        while not self._stop.wait(self.POLL_S):
            try:
                self.poll()
            except Exception:  # noqa: BLE001  (the watch must never take the job down)
                continue

    def poll(self) -> None:
        with self._lock:
            self._poll()

    def _poll(self) -> None:
        import psutil

        from scaleprobe.measure.heartbeat import find_stalled, read_beats

        beats = read_beats(self.run_dir or "")
        ended: list[tuple[float, int, bool]] = []  # (when, rank, raised) of ranks that failed
        for rank, beat in beats.items():
            if rank not in self.procs:
                try:
                    self.procs[rank] = psutil.Process(int(beat["pid"]))
                except psutil.NoSuchProcess:  # died (and was reaped) before a poll saw it
                    self.procs[rank] = None
                except (psutil.Error, ValueError, KeyError, TypeError):
                    continue
                proc = self.procs[rank]
                self.family[rank] = {proc.pid: proc} if proc is not None else {}
            proc = self.procs[rank]
            alive = proc is not None and _alive(proc)
            if alive:
                with contextlib.suppress(psutil.Error):
                    for child in proc.children(recursive=True):
                        self.family[rank].setdefault(child.pid, child)
            if beat["state"] == "failed":  # raised: seen before its (slow) exit
                ended.append((beat["beat_wall"], rank, True))
            elif not alive:
                final = read_beats(self.run_dir or "").get(rank, beat)  # "done" just before exit?
                if final["state"] == "failed":
                    ended.append((final["beat_wall"], rank, True))
                elif final["state"] != "done":  # killed: alive at its last beat and move
                    ended.append((max(final["beat_wall"], final["progress_wall"]), rank, False))
                    if proc is not None and rank not in self.exits:
                        how = _how_child_ended(proc.pid)
                        if how is not None:
                            self.exits[rank] = how
        if self.first is None and ended:
            # the earliest; a rank that raised because a peer died (connection reset) raised
            # after the peer's last sign of life
            when, rank, raised = min(ended)
            self.first = (rank, when, raised)
            stalled = find_stalled(beats, time.time())
            if stalled is not None:
                self.stalled = (stalled, beats[stalled])
        if self.first is not None and time.time() - self.first[1] >= KILL_AFTER_S:
            self._kill_all()

    def kill_all(self) -> None:
        """SIGKILL every rank still running, its process group and every process it started."""
        with self._lock:
            self._kill_all()

    def _kill_all(self) -> None:
        import psutil

        for rank, members in self.family.items():
            leader = getattr(self.procs.get(rank), "pid", None)
            if self.procs.get(rank) is not None and _alive(self.procs[rank]):
                self.killed.add(rank)
            for proc in members.values():
                if not _alive(proc):
                    continue
                with contextlib.suppress(OSError):
                    if os.getpgid(proc.pid) == leader:  # the rank's group (env.own_process_group sets it)
                        os.killpg(leader, signal.SIGKILL)
                with contextlib.suppress(psutil.Error):
                    proc.kill()

    def failure(self, err: Exception) -> WorkerFailure:
        """The job's failure: the first rank that failed, with its own error line (or how it
        died), or, when another rank had stopped making progress before (it hung; the one that
        failed only waited for it), that rank, with the other's error after it."""
        from scaleprobe.measure.heartbeat import read_error, stall_text

        agent = _first_failure(err)
        if self.first is None:
            return agent
        rank, at, raised = self.first
        failures = getattr(err, "failures", None) or {}
        fail = failures.get(rank)
        if (not raised and fail is None and agent.rank in failures
                and agent.rank not in self.killed):
            # ordered by last beats alone (up to a beat interval apart), a rank the launcher
            # stopped after the failure can look first; the launcher lists the ranks that
            # failed on their own (and those this watch killed, which are no cause)
            return agent
        line = read_error(self.run_dir or "", rank) if raised else None
        if line is None:
            # the launcher may not list a rank it has not seen end: a loader worker forked
            # from it holds the pipe the launcher waits on until the worker ends too
            line = (_failure_line(fail) if fail is not None else self.exits.get(rank) or
                    (agent.message if agent.rank == rank else "exited"))
        first = WorkerFailure(rank, line, None if raised or fail is None else fail.exitcode)
        if self.stalled is None or not raised:
            return first
        stalled, beat = self.stalled
        if stalled == rank or at - beat["progress_wall"] < MIN_STALL_S:
            return first
        return WorkerFailure(stalled, f"{stall_text(beat, at)}; rank {rank} then failed: {line}")


def _bind_plan(nnodes: int, node_rank: int, rdzv_endpoint: str | None,
               master_port: int | None) -> tuple[str, int, dict[str, str | None]]:
    """(host, port, environment for the workers' sockets) of this job's rendezvous."""
    if nnodes == 1 and not rdzv_endpoint:
        lo = _interface_of("127.0.0.1")
        return "127.0.0.1", int(master_port or 0), {"GLOO_SOCKET_IFNAME": lo,
                                                     "NCCL_SOCKET_IFNAME": lo}
    host, port = _parse_endpoint(rdzv_endpoint or "")
    ifname = _route_interface(host, port)
    return host, port, {"GLOO_SOCKET_IFNAME": ifname, "NCCL_SOCKET_IFNAME": ifname}


def run_workers(entry: Callable[..., Any], args: tuple = (), *, nproc: int, nnodes: int = 1,
                node_rank: int = 0, rdzv_endpoint: str | None = None, timeout_s: float = 30.0,
                log_dir: str | None = None, run_dir: str | None = None,
                master_port: int | None = None) -> dict[int, Any]:
    """Run ``entry(*args)`` in ``nproc`` processes on this host (of ``nnodes`` hosts).

    Returns ``{global_rank: return value}`` for this host's workers. Raises WorkerFailure,
    ``interrupt.Interrupted`` when this process was asked to stop (Ctrl+C, SIGTERM), and
    ConfigError for a rendezvous address it cannot listen on. With ``run_dir`` the ranks'
    heartbeats there name a rank that hung (``RankWatch``).
    """
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    from scaleprobe.interrupt import Interrupted, signal_name

    if nproc < 1:
        raise ConfigError("nproc must be at least 1")
    import torch.distributed.elastic.multiprocessing.api  # noqa: F401  (registers its loggers)

    _quiet_elastic_logs()
    host, port, env = _bind_plan(nnodes, node_rank, rdzv_endpoint, master_port)
    store = None
    if node_rank == 0:  # host 0 serves the rendezvous, on that one address
        what = "--master-port" if nnodes == 1 and not rdzv_endpoint else "--rdzv-endpoint port"
        store = _serve_store(_listen(host, port, what), timeout_s)
        port = store.port
    run_id = (f"scaleprobe-{uuid.uuid4().hex[:12]}" if nnodes == 1 and not rdzv_endpoint
              else f"scaleprobe-{(rdzv_endpoint or '').replace(':', '-')}")
    cfg = _launch_config(nproc, nnodes, node_rank, f"{host}:{port}", run_id, timeout_s, log_dir)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP,
                                                 signal.SIGQUIT)}
    env.update({"OMP_NUM_THREADS": None, "TORCHELASTIC_SIGNALS_TO_HANDLE": None})
    try:
        with _environ(env), RankWatch(run_dir) as watch:
            try:
                return elastic_launch(cfg, entry)(*args)
            except ChildFailedError as e:
                watch.poll()  # a death the watch has not seen yet
                raise watch.failure(e) from None
            except SignalException as e:  # the launcher stopped the workers and handed it on
                raise Interrupted(signal_name(e.sigval)) from None
            except Exception as e:  # rendezvous errors, closed stores, ...
                if type(e).__name__ in ("RendezvousTimeoutError", "RendezvousClosedError",
                                        "RendezvousConnectionError", "DistNetworkError",
                                        "DistStoreError", "DistError"):
                    raise WorkerFailure(-1, f"rendezvous failed: {e}") from None
                raise
    finally:
        # the launcher's handlers raise its own exception type; they would outlive the job
        for s, h in handlers.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(s, h)
        del store
