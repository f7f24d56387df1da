"""One rank of the built-in training loop, as a process: its device and strategy, a memory
cap around training, the gather of every rank's record to rank 0, and (launched ranks) a
heartbeat and a stop request that ends training at a step every rank agrees on.

``worker_main`` runs in the driver's own process for in-process strategies and under a
launcher you started yourself; ``launched_worker`` is the entry of each rank that
``launch.run_workers`` starts (``run/builtin.py``)."""

from __future__ import annotations

import os
import resource
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from scaleprobe.config.sections import RunConfig, parse_size
from scaleprobe.core.errors import ConfigError, DataError
from scaleprobe.core.rank_record import RankRecord
from scaleprobe.core.traits import traits_of
from scaleprobe.features.interrupt import StopRequest
from scaleprobe.launch import handoff
from scaleprobe.launch.lines import last_meaningful_line, loader_worker_exits, name_signal
from scaleprobe.measure import env as envmod
from scaleprobe.measure.heartbeat import Heartbeat, RankError, write_error
from scaleprobe.measure.progress import PROGRESS_ENV, FileProgress, StepProgress
from scaleprobe.netlab.ranknet import join
from scaleprobe.strategies import build_strategy

# a stopped rank's return value is in the launcher's pipe at once: then it leaves, whether the
# launcher reads it or not (``launched_worker``)
LEAVE_AFTER_S = 0.5


def apply_memory_limit(limit: str | None) -> tuple[int, int] | None:
    """Cap this process's heap (the soft RLIMIT_DATA) so a too-large batch fails like a full
    GPU; returns the limits before, for ``lift_memory_limit``. A limit at or below what the
    process already holds (Python, torch, the loaded modules) could only fail wherever the
    next allocation happens: a ConfigError says so instead."""
    if not limit:
        return None

    n = parse_size(limit)
    held = envmod.data_segment_bytes()
    if held is not None and n <= held:
        raise ConfigError(f"--memory-limit {limit} is below the {held >> 20} MiB this process "
                          "already holds (Python, torch and their modules, before any model "
                          f"or data); give it more than {held >> 20} MiB plus what the run needs")
    before = resource.getrlimit(resource.RLIMIT_DATA)
    hard = before[1]
    resource.setrlimit(resource.RLIMIT_DATA,
                       (n if hard == resource.RLIM_INFINITY else min(n, hard), hard))
    return before


def lift_memory_limit(before: tuple[int, int] | None) -> None:
    """Back to the limits before ``apply_memory_limit``: recording the result (environment,
    files) needs memory that a run which hit its limit no longer has."""
    if before is not None:
        resource.setrlimit(resource.RLIMIT_DATA, before)


@contextmanager
def memory_limit(limit: str | None) -> Iterator[None]:
    before = apply_memory_limit(limit)
    try:
        yield
    finally:
        lift_memory_limit(before)


def _local_device_and_strategy(cfg: RunConfig) -> tuple[Any, Any]:
    info = envmod.dist_info()
    tr = traits_of(cfg.dist.strategy)
    envmod.set_malloc(cfg.train.malloc)  # before the model and data allocate anything
    if tr.in_process:
        envmod.set_threads(1, cfg.dist.threads_per_rank)
    else:
        # a parameter server talks over gloo (TCP), as classic ones do, also on CUDA hosts
        backend = cfg.dist.backend or ("gloo" if tr.needs_any_source_recv else None)

        envmod.init_distributed(backend, cfg.dist.timeout_s, cfg.dist.threads_per_rank, join)
    device = envmod.pick_device(info.local_rank)
    strategy = build_strategy(cfg.dist.strategy, cfg.dist, device)
    # the threads of the groups made so far (a server's too); the engine sets any made later
    envmod.set_gloo_io(cfg.dist.gloo_io)
    return device, strategy


def worker_main(cfg: RunConfig, run_dir: str | None = None,
                progress: bool = True, beat: Any = None,
                stop: StopRequest | None = None) -> list[RankRecord] | None:
    """Train this rank and gather every rank's record to rank 0. Ctrl+C and SIGTERM are
    handled by ``stop`` (``interrupt.StopRequest``) until the records are gathered."""
    # the training loop's imports (torchvision, the models): not in a launcher that only
    # starts ranks, where this module is imported for ``launched_worker``
    from scaleprobe.train.engine import train  # heavy: torch

    stop = stop if stop is not None else StopRequest()
    with stop.handling():
        if beat is not None:
            beat.setup_passed("joining")
        device, strategy = _local_device_and_strategy(cfg)
        if beat is not None:
            beat.setup_passed("joined")
        prog = _progress(progress and strategy.rank == strategy.progress_rank, cfg)
        # the limit covers training, not the imports before it nor the recording after it
        with memory_limit(cfg.measure.memory_limit):
            raw = train(cfg, strategy, device, prog, clock=time.time, run_dir=run_dir,
                        beat=beat, stop=stop)
        gathered = strategy.gather(raw)
        # Only a rank that finished waits at the closing barrier: a failed rank exits at once
        # (the launcher then stops the others) instead of hiding its error behind a timeout.
        if strategy.distributed:
            envmod.shutdown_distributed()
    return gathered if strategy.rank == 0 else None


def _progress(shows: bool, cfg: Any) -> StepProgress:
    """The live bar; or, where an experiment shows this point's progress on its own bar
    (``PROGRESS_ENV``), the file it reads; else nothing."""
    path = os.environ.get(PROGRESS_ENV)
    if shows and not cfg.measure.progress and path:
        return FileProgress(path)
    return StepProgress(shows and cfg.measure.progress)


def launched_worker(cfg: RunConfig, run_dir: str,
                    progress: bool = True) -> list[RankRecord] | None:
    """Entry of each rank started by ``launch.run_workers``: a heartbeat for the launcher, a
    stop request that ends training at a step all ranks agree on, and, when the launcher was
    asked to stop (it then no longer collects return values), rank 0's records in a file."""
    envmod.own_process_group()
    envmod.use_platform_start_method()
    beat = Heartbeat(run_dir, int(os.environ.get("RANK", "0"))).start()
    stop = StopRequest(escape_on_second=False)  # the launcher ends a rank that does not stop
    try:
        out = worker_main(cfg, run_dir, progress, beat=beat, stop=stop)
        if out is not None and (stop.requested or any(r.interrupted for r in out)):
            handoff.leave(run_dir, out)
    except BaseException as e:
        line = name_signal(last_meaningful_line(traceback.format_exc()), loader_worker_exits(e))
        user = type(e).__name__ if isinstance(e, ConfigError | DataError) else None
        write_error(run_dir, beat.rank, RankError(line, user, str(e) if user else None))
        beat.finish("failed")
        raise
    beat.finish("done")
    if stop.requested:
        # stopped by a signal, this rank's, a peer's, or the launcher's: rank 0's records are
        # in the hand-off file. A launcher that was asked to stop no longer reads return
        # values, and a worker waits for it to (torch.distributed.elastic) until it is
        # killed; one whose rank alone was signalled reads them, and waits for each. So the
        # rank returns nothing (a few bytes, in the pipe at once) and leaves soon after.
        sys.stdout.flush()
        sys.stderr.flush()
        leave = threading.Timer(LEAVE_AFTER_S, os._exit, args=(0,))
        leave.daemon = True
        leave.start()
        return None
    return out
