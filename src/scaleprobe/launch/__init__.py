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

How a rank starts, forked from this process or spawned, and what a forked rank resets:
``launch/rankstart.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psutil

from scaleprobe.config.sections import DistConfig
from scaleprobe.core.errors import ConfigError
from scaleprobe.features.interrupt import Interrupted, signal_name
from scaleprobe.launch import guard
from scaleprobe.launch.failures import WorkerFailure
from scaleprobe.launch.rankstart import (
    START_ENV,
    STOP_SIGNALS,
    LeavesAfterReturn,
    armed,
    forking,
    fresh_launcher,
    guard_pipe,
    in_fork_hooks,
    is_fresh,
    rank_start_method,
    send_to_self,
)
from scaleprobe.launch.rankwatch import (
    INTERRUPT_GRACE_S,
    STOP_CEILING_S,
    STOP_STEPS,
    RankWatch,
)

__all__ = ["START_ENV", "Job", "WorkerFailure", "fresh_launcher", "is_fresh",
           "rank_start_method", "run_workers"]


@contextlib.contextmanager
def _guarded(run_dir: str | None) -> Iterator[int | None]:
    """The job's guard (``launch/guard.py``) while inside: when this process ends, however it
    ends, the guard kills what the ranks left in their process groups. Yields its pid (None:
    no guard, without a run folder or off Linux)."""
    if not run_dir or not sys.platform.startswith("linux"):
        yield None
        return
    since = guard.now_ticks() - 1  # a tick of margin: /proc counts starts in clock ticks
    r, w = os.pipe()
    try:
        proc = subprocess.Popen([sys.executable, "-I", guard.__file__, str(r), run_dir,
                                 repr(since)], pass_fds=(r,), start_new_session=True,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    except OSError:  # no guard: the watch still ends the ranks when this process ends well
        os.close(w)
        yield None
        return
    finally:
        os.close(r)
    try:
        with guard_pipe(w):
            yield proc.pid
    finally:
        os.close(w)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


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
    from torch.distributed import TCPStore  # heavy: torch

    host, port = sock.getsockname()[:2]
    return TCPStore(host, port, None, True, timedelta(seconds=max(60.0, timeout_s)),
                    wait_for_workers=False, multi_tenant=True, master_listen_fd=sock.detach())


def _interface_of(ip: str) -> str | None:
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


def _launch_config(job: Job, endpoint: str, run_id: str, log_dir: str | None,
                   start_method: str = "spawn", shutdown_s: float = INTERRUPT_GRACE_S,
                   own_stop_handler: bool = False):
    """torch's launch settings. ``own_stop_handler``: torch's launcher installs no handler
    of its own for the stop signals (``_stops_told_to`` keeps this module's; newer torch
    sets the launcher's from this field, and ignores the environment's)."""
    # heavy: torch: torch.distributed's launcher, only when ranks are launched
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.launcher.api import LaunchConfig

    logs = DefaultLogsSpecs(log_dir=log_dir)
    extra: dict[str, Any] = {}
    fields = {f.name for f in dataclasses.fields(LaunchConfig)}
    if "shutdown_timeout" in fields:
        extra["shutdown_timeout"] = int(shutdown_s)
    if own_stop_handler and "signals_to_handle" in fields:
        extra["signals_to_handle"] = ""
    return LaunchConfig(min_nodes=job.nnodes, max_nodes=job.nnodes, nproc_per_node=job.nproc,
                        run_id=run_id, max_restarts=0, monitor_interval=0.1,
                        start_method=start_method, logs_specs=logs, rdzv_backend="static",
                        rdzv_endpoint=endpoint,
                        rdzv_configs={"rank": job.node_rank,
                                      "timeout": int(max(60, job.timeout_s))},
                        rdzv_timeout=int(max(60, job.timeout_s)), **extra)


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


@dataclasses.dataclass(frozen=True)
class Job:
    """Where a job's ranks run: ``nproc`` processes on this host, host ``node_rank`` of
    ``nnodes``, meeting at ``rdzv_endpoint`` (several hosts) or on ``master_port`` (one; None:
    a free port); ``timeout_s`` bounds the rendezvous and every collective."""

    nproc: int
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    master_port: int | None = None
    timeout_s: float = 30.0

    @classmethod
    def of(cls, dist: DistConfig) -> Job:
        """A run's job from its ``dist`` section."""
        return cls(nproc=dist.nproc, nnodes=dist.nnodes, node_rank=dist.node_rank,
                   rdzv_endpoint=dist.rdzv_endpoint, master_port=dist.master_port,
                   timeout_s=dist.timeout_s)


@contextlib.contextmanager
def _stops_told_to(watch: RankWatch | None) -> Iterator[None]:
    """While inside (the launch, in the main thread): a stop signal to this process is told to
    the watch, which then gives the ranks a grace that follows their step time
    (``RankWatch.stop_grace_s``), and raised as torch's launcher's own handler raises it, so
    the launcher forwards it to the ranks. Its own handler is kept off
    (TORCHELASTIC_SIGNALS_TO_HANDLE and ``signals_to_handle`` empty): it would replace this
    one, and a stop it raised inside a finaliser was dropped (the job trained on)."""
    if watch is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    # heavy: torch: the launcher's exception, only when ranks are launched
    from torch.distributed.elastic.multiprocessing.api import SignalException

    def on_stop(signum: int, frame: Any) -> None:
        watch.asked_to_stop(signal_name(signum))
        # raised in a finaliser or in an at-fork hook, it is printed and dropped: the job ran on
        if _in_finaliser(frame) or in_fork_hooks():
            threading.Timer(0.05, send_to_self, args=([signum],)).start()
            return
        raise SignalException(f"Process {os.getpid()} got signal: {signal_name(signum)}",
                              sigval=signal.Signals(signum))

    saved = os.environ.get("TORCHELASTIC_SIGNALS_TO_HANDLE")
    os.environ["TORCHELASTIC_SIGNALS_TO_HANDLE"] = ""
    for sig in STOP_SIGNALS:
        signal.signal(sig, on_stop)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TORCHELASTIC_SIGNALS_TO_HANDLE", None)
        else:
            os.environ["TORCHELASTIC_SIGNALS_TO_HANDLE"] = saved


def _in_finaliser(frame: Any) -> bool:
    """Whether ``frame`` runs inside an object's ``__del__`` (a temporary file's closer, a
    socket's), where an exception is printed as "Exception ignored" and dropped."""
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def run_workers(entry: Callable[..., Any], args: tuple, job: Job, *, log_dir: str | None = None,
                run_dir: str | None = None, stall_after_s: float | None = None,
                stop_steps: int = STOP_STEPS, leave_after_return: bool = False
                ) -> dict[int, Any]:
    """Run ``entry(*args)`` in ``job.nproc`` processes on this host (of ``job.nnodes`` hosts).

    Returns ``{global_rank: return value}`` for this host's workers. Raises WorkerFailure,
    ``interrupt.Interrupted`` when this process was asked to stop (Ctrl+C, SIGTERM), and
    ConfigError for a rendezvous address it cannot listen on. With ``run_dir`` the ranks'
    heartbeats there name a rank that hung (``RankWatch``); with ``stall_after_s`` as well
    a job whose ranks make no progress for that long is ended as stalled. After a stop signal
    (to this process, or to one rank alone) the ranks get ``stop_steps`` of their slowest
    step, at least ``INTERRUPT_GRACE_S``, to stop together, before they are killed. With
    ``leave_after_return`` a spawned rank that returned ends without the interpreter's
    teardown (``rankstart.LeavesAfterReturn``): for scaleprobe's own ranks, whose objects need none.
    """
    # heavy: torch: torch.distributed's launcher, only when ranks are launched
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    if job.nproc < 1:
        raise ConfigError("nproc must be at least 1")
    # heavy: torch: torch.distributed's launcher, only when ranks are launched
    import torch.distributed.elastic.multiprocessing.api  # noqa: F401  (registers its loggers)

    _quiet_elastic_logs()
    host, port, env = _bind_plan(job.nnodes, job.node_rank, job.rdzv_endpoint, job.master_port)
    store = None
    if job.node_rank == 0:  # host 0 serves the rendezvous, on that one address
        one_host = job.nnodes == 1 and not job.rdzv_endpoint
        what = "--master-port" if one_host else "--rdzv-endpoint port"
        store = _serve_store(_listen(host, port, what), job.timeout_s)
        port = store.port
    run_id = (f"scaleprobe-{uuid.uuid4().hex[:12]}" if job.nnodes == 1 and not job.rdzv_endpoint
              else f"scaleprobe-{(job.rdzv_endpoint or '').replace(':', '-')}")
    start = rank_start_method()
    # without a folder for them, the launcher's per-rank folders go to one removed afterwards
    own_logs = None if log_dir else tempfile.TemporaryDirectory(prefix="scaleprobe-logs-")
    # with a watch, the watch ends the ranks at the grace; torch's launcher only backs it up
    cfg = _launch_config(job, f"{host}:{port}", run_id,
                         own_logs.name if own_logs else log_dir, start,
                         STOP_CEILING_S if run_dir else INTERRUPT_GRACE_S,
                         own_stop_handler=bool(run_dir))
    if start == "fork" and callable(entry):
        entry = armed(entry)
    elif leave_after_return and callable(entry):
        entry = LeavesAfterReturn(entry)
    handlers = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    env.update({"OMP_NUM_THREADS": None, "TORCHELASTIC_SIGNALS_TO_HANDLE": None})
    try:
        with forking(start == "fork"), _environ(env), _guarded(run_dir) as guard_pid, \
                RankWatch(run_dir, stall_after_s, spare={guard_pid}, stop_steps=stop_steps,
                          ranks=range(job.nproc) if job.nnodes == 1 else None) as watch, \
                _stops_told_to(watch if run_dir else None):
            try:
                return elastic_launch(cfg, entry)(*args)
            except ChildFailedError as e:
                watch.poll()  # a death the watch has not seen yet
                overdue = watch.overdue_ending()  # killed: they had not stopped in time
                if overdue is not None:
                    raise overdue from None
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
        if own_logs is not None:
            own_logs.cleanup()
