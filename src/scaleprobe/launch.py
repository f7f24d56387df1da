"""Start N workers through PyTorch's elastic launcher (the engine behind ``torchrun``).

One host: a c10d rendezvous on 127.0.0.1 with a free port picked by the OS, so two jobs never
fight over a port. Several hosts: a static rendezvous at ``--rdzv-endpoint HOST:PORT`` with
``--node-rank`` choosing this host's place, exactly as ``torchrun --nnodes M --node-rank R``.
A worker that raises or dies ends the whole job: the agent stops the other workers and
``WorkerFailure`` names the first failed rank and its error.
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import uuid
from collections.abc import Callable
from typing import Any

from scaleprobe.errors import ConfigError


class WorkerFailure(RuntimeError):
    """A worker process raised or died. ``rank`` is the first failed global rank."""

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


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def _quiet_elastic_logs() -> None:
    """The launcher logs every worker's traceback; scaleprobe reports failures itself."""
    prefixes = ("torch.distributed.elastic", "torch.distributed.launcher",
                "torch.multiprocessing")
    names = [n for n in logging.root.manager.loggerDict if n.startswith(prefixes)]
    for name in list(prefixes) + names:
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _launch_config(nproc: int, nnodes: int, node_rank: int, rdzv_endpoint: str | None,
                   timeout_s: float, log_dir: str | None):
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.launcher.api import LaunchConfig

    logs = DefaultLogsSpecs(log_dir=log_dir or tempfile.mkdtemp(prefix="scaleprobe-logs-"))
    # every host of one job must use the same run id: the rendezvous store keys start with it
    run_id = (f"scaleprobe-{uuid.uuid4().hex[:12]}" if nnodes == 1 and not rdzv_endpoint
              else f"scaleprobe-{rdzv_endpoint.replace(':', '-')}")
    common = dict(
        nproc_per_node=nproc,
        run_id=run_id,
        max_restarts=0,
        monitor_interval=0.1,
        start_method="spawn",
        logs_specs=logs,
    )
    if nnodes == 1 and not rdzv_endpoint:
        return LaunchConfig(min_nodes=1, max_nodes=1, rdzv_backend="c10d",
                            rdzv_endpoint="127.0.0.1:0", rdzv_timeout=int(max(60, timeout_s)),
                            local_addr="127.0.0.1", **common)
    host, port = _parse_endpoint(rdzv_endpoint or "")
    if node_rank == 0 and host in ("127.0.0.1", "localhost") and port_in_use(host, port):
        raise ConfigError(f"rendezvous port {port} on {host} is already in use; pick another")
    return LaunchConfig(min_nodes=nnodes, max_nodes=nnodes, rdzv_backend="static",
                        rdzv_endpoint=f"{host}:{port}",
                        rdzv_configs={"rank": node_rank, "timeout": int(max(60, timeout_s))},
                        rdzv_timeout=int(max(60, timeout_s)), **common)


def _first_failure(err: Exception) -> WorkerFailure:
    failures = getattr(err, "failures", None) or {}
    if not failures:
        return WorkerFailure(-1, str(err).strip().splitlines()[-1] if str(err) else repr(err))
    rank, fail = min(failures.items(), key=lambda kv: (kv[1].timestamp, kv[0]))
    msg = str(getattr(fail, "message", "") or "")
    if isinstance(getattr(fail, "error_file_data", None), dict):
        m = fail.error_file_data.get("message", {})
        if isinstance(m, dict):
            msg = m.get("message", msg)
    line = _last_meaningful_line(msg) or f"exited with code {fail.exitcode}"
    if fail.exitcode is not None and fail.exitcode < 0:
        line = f"killed by signal {-fail.exitcode}"
    return WorkerFailure(rank, line, fail.exitcode)


def _last_meaningful_line(msg: str) -> str:
    lines = [ln.strip() for ln in msg.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln.startswith(("File ", "^", "~")) or ln.startswith("Traceback"):
            continue
        return ln[:400]
    return ""


def run_workers(entry: Callable[..., Any], args: tuple = (), *, nproc: int, nnodes: int = 1,
                node_rank: int = 0, rdzv_endpoint: str | None = None, timeout_s: float = 30.0,
                log_dir: str | None = None) -> dict[int, Any]:
    """Run ``entry(*args)`` in ``nproc`` processes on this host (of ``nnodes`` hosts).

    Returns ``{global_rank: return value}`` for this host's workers. Raises WorkerFailure.
    """
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import elastic_launch

    if nproc < 1:
        raise ConfigError("nproc must be at least 1")
    import torch.distributed.elastic.multiprocessing.api  # noqa: F401  (registers its loggers)

    _quiet_elastic_logs()
    cfg = _launch_config(nproc, nnodes, node_rank, rdzv_endpoint, timeout_s, log_dir)
    saved = os.environ.get("OMP_NUM_THREADS")
    try:
        return elastic_launch(cfg, entry)(*args)
    except ChildFailedError as e:
        raise _first_failure(e) from None
    except Exception as e:  # rendezvous errors, closed stores, ...
        if type(e).__name__ in ("RendezvousTimeoutError", "RendezvousClosedError",
                                "RendezvousConnectionError", "DistNetworkError",
                                "DistStoreError", "DistError"):
            raise WorkerFailure(-1, f"rendezvous failed: {e}") from None
        raise
    finally:
        if saved is None:
            os.environ.pop("OMP_NUM_THREADS", None)
