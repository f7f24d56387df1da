"""Devices, rank and world from the environment, seeding, threads per process, environment facts."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import multiprocessing
import os
import platform
import random
import resource
import select
import shutil
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from importlib.metadata import PackageNotFoundError, version
from typing import Any, NoReturn

import psutil

from scaleprobe.config.sections import GLOO_IO_THREAD, STEADY_MMAP_BYTES, STEADY_TRIM_BYTES
from scaleprobe.core.errors import ConfigError
from scaleprobe.measure.gpu import nvml_info


@dataclass(frozen=True)
class DistInfo:
    """This process's place in the job, every field read from the launcher's environment by
    ``dist_info`` (a process started without a launcher is rank 0 of 1)."""

    rank: int
    local_rank: int
    world: int
    local_world: int
    node_rank: int


def dist_info() -> DistInfo:
    """Rank and world as set by PyTorch's launcher (RANK, LOCAL_RANK, WORLD_SIZE, ...)."""
    e = os.environ
    return DistInfo(
        rank=int(e.get("RANK", 0)),
        local_rank=int(e.get("LOCAL_RANK", 0)),
        world=int(e.get("WORLD_SIZE", 1)),
        local_world=int(e.get("LOCAL_WORLD_SIZE", 1)),
        node_rank=int(e.get("GROUP_RANK", e.get("NODE_RANK", 0))),
    )


def cuda_available() -> bool:
    import torch  # heavy: torch: env's facts are read without it; only a question about torch loads it

    return torch.cuda.is_available()


def pick_device(local_rank: int = 0):
    """cuda:<local_rank> when CUDA works, else the CPU."""
    import torch  # heavy: torch: env's facts are read without it; only a question about torch loads it

    if torch.cuda.is_available():
        idx = local_rank % max(1, torch.cuda.device_count())
        torch.cuda.set_device(idx)
        return torch.device("cuda", idx)
    return torch.device("cpu")


def cuda_device_count() -> int:
    """CUDA devices on this host; 0 without CUDA."""
    import torch  # heavy: torch: env's facts are read without it; only a question about torch loads it

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def cuda_indices(nproc: int, every_device: bool = False) -> list[int]:
    """The CUDA devices a run's ranks use on this host: one per process, or every one
    (``every_device``: one process feeds them all, DataParallel); [] without CUDA."""
    n = cuda_device_count()
    return list(range(n if every_device else min(n, nproc)))


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        return os.cpu_count() or 1


def threads_for(local_world: int = 1, per_rank: int | None = None) -> int:
    """Compute threads of each of ``local_world`` processes on this host: ``per_rank`` when
    given (``dist.threads_per_rank``), else an equal share of the cores."""
    return per_rank or max(1, cpu_count() // max(1, local_world))


def set_threads(local_world: int = 1, per_rank: int | None = None) -> int:
    """Set this process's compute threads (``threads_for``)."""
    import torch  # heavy: torch: env's facts are read without it; only a question about torch loads it

    n = threads_for(local_world, per_rank)
    torch.set_num_threads(n)
    return n


def seed_all(seed: int) -> None:
    # heavy: torch: env's facts are read without it; only a question about torch loads it
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def init_distributed(backend: str | None = None, timeout_s: float = 30.0,
                     threads_per_rank: int | None = None,
                     join: Any = None) -> tuple[int, int]:
    """Join the process group described by the launcher's environment; returns (rank, world).
    ``join(timeout)``: a store to build the group on instead (None: the launcher's own way),
    e.g. ``netlab.ranknet.join`` for ranks in network namespaces of their own."""
    # heavy: torch: env's facts are read without it; only a question about torch loads it
    import torch
    import torch.distributed as dist

    info = dist_info()
    set_threads(info.local_world, threads_per_rank)
    if info.world == 1 and not os.environ.get("MASTER_ADDR"):
        return 0, 1
    if not dist.is_initialized():
        backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        kwargs: dict[str, Any] = {"backend": backend, "timeout": timedelta(seconds=timeout_s)}
        if backend == "nccl":
            kwargs["device_id"] = pick_device(info.local_rank)
        store = join(kwargs["timeout"]) if join is not None else None
        if store is not None:
            kwargs.update(store=store, rank=info.rank, world_size=info.world)
        dist.init_process_group(**kwargs)
    return dist.get_rank(), dist.get_world_size()


def shutdown_distributed() -> None:
    """Barrier, then destroy: without the barrier a fast rank can abort the others at exit."""
    import torch.distributed as dist  # heavy: torch

    if dist.is_available() and dist.is_initialized():
        try:
            dist.barrier()
        finally:
            dist.destroy_process_group()


def leave_process(code: int) -> NoReturn:
    """End a rank's process as Python's own exit does, up to its teardown: wait for the
    threads that are not daemons, run the ``atexit`` functions, flush the standard streams,
    then ``os._exit``. A DDP model keeps its gloo process group alive after
    ``destroy_process_group`` (torch 2.14: its threads outlive the model), and a gloo thread
    still releasing a finished collective's tensors takes the GIL to drop their Python
    objects; if the interpreter is tearing down by then, the thread is ended inside C++ and
    the rank dies of SIGABRT ("terminate called without an active exception") after its
    result was written, and the launcher reports the job failed. Seen on rank 1, the one with
    nothing to write, 2 times in 150 runs under load."""
    me = threading.current_thread()
    for t in threading.enumerate():
        if t is not me and not t.daemon:
            t.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


# glibc's mallopt parameters (the values ``train.malloc=steady`` fixes: config/sections.py)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


def set_malloc(mode: str) -> None:
    """``train.malloc``: ``steady`` fixes glibc's mmap and trim thresholds in this process
    (``mallopt``, as MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ do at start), so the
    memory a step frees stays in the process for the next; ``default`` leaves glibc's own,
    which move as the process frees memory. Measured here (docs/REPORTS.md): six fresh
    one-rank runs of digits_cnn each way stepped in 29.9-39.5 ms with glibc's thresholds
    (1,338-5,839 page faults a step), and in 27.3-29.5 ms with fixed ones (11-42)."""
    if mode != "steady":
        return
    libc, _ = platform.libc_ver()
    if libc != "glibc":
        raise ConfigError(f"train.malloc=steady sets glibc's allocator; this Python runs on "
                          f"{libc or 'another C library'} (leave train.malloc at default)")
    mallopt = ctypes.CDLL(None).mallopt
    if not (mallopt(M_MMAP_THRESHOLD, STEADY_MMAP_BYTES)
            and mallopt(M_TRIM_THRESHOLD, STEADY_TRIM_BYTES)):
        raise ConfigError("train.malloc=steady: glibc refused mallopt's thresholds")


def threads_named(name: str) -> list[int]:
    """The ids of this process's threads named ``name`` (Linux; [] elsewhere)."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return []
    out = []
    for t in tids:
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                if f.read().strip() == name:
                    out.append(int(t))
        except OSError:  # the thread ended meanwhile
            continue
    return out


def set_gloo_io(mode: str) -> int:
    """``dist.gloo_io``: ``batch`` puts this process's gloo socket threads under SCHED_BATCH
    (the same share of the CPU as before; woken, they no longer take the core from the thread
    running): returns how many it set. gloo's socket thread polls a socket whose message has
    arrived before its receive was posted, and when it took the core from the very thread
    that posts it, neither moves until the kernel's next tick (docs/COMMUNICATION.md, "gloo's
    socket thread"). Threads that do not exist yet (a process group made later) keep the
    default."""
    if mode != "batch":
        return 0
    batch = getattr(os, "SCHED_BATCH", None)
    if batch is None:
        raise ConfigError("dist.gloo_io=batch sets a Linux scheduling policy (SCHED_BATCH), "
                          "which this system has not: leave dist.gloo_io at default")
    tids = threads_named(GLOO_IO_THREAD)
    for t in tids:
        with contextlib.suppress(ProcessLookupError):  # ended meanwhile
            os.sched_setscheduler(t, batch, os.sched_param(0))
    return len(tids)


def threads_cpu_s(tids: list[int]) -> float:
    """The CPU time these threads of this process have used (``schedstat``'s nanoseconds;
    the clock ticks of ``stat`` where the kernel keeps no schedstat). A thread that has ended
    counts nothing."""
    total = 0.0
    for t in tids:
        try:
            with open(f"/proc/self/task/{t}/schedstat") as f:
                total += int(f.read().split()[0]) / 1e9
            continue
        except (OSError, ValueError, IndexError):
            pass
        try:
            with open(f"/proc/self/task/{t}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            continue
    return total


def minor_faults() -> int:
    """This process's minor page faults so far (all its threads): a page it touched for the
    first time, or again after the allocator gave it back to the system."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)


def die_with_parent(sig: int, parent: int | None = None) -> None:
    """Ask Linux to send this process ``sig`` when its parent ends (``PR_SET_PDEATHSIG``), and
    send it now if the parent ended before the request took effect (``parent``: the pid it
    had, ``os.getppid()`` at the call if not given). Elsewhere nothing happens."""
    parent = os.getppid() if parent is None else parent
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, sig)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux
        return
    if os.getppid() != parent:
        os.kill(os.getpid(), sig)


def die_with(pid: int, sig: int) -> None:
    """Send this process ``sig`` when the process ``pid`` ends, however it ends (``kill -9``
    too), where ``pid`` is not this process's parent (``die_with_parent`` is for that): a
    daemon thread waits on a pidfd of it (Linux 5.3 and later; elsewhere it looks once a
    second). Sent at once where ``pid`` has already ended."""
    try:
        fd: int | None = os.pidfd_open(pid)
    except ProcessLookupError:
        os.kill(os.getpid(), sig)
        return
    except (OSError, AttributeError):  # an older kernel, or not Linux
        fd = None

    def watch() -> None:
        if fd is not None:
            select.select([fd], [], [])
        else:
            while True:
                time.sleep(1.0)
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                except PermissionError:  # alive, another user's
                    continue
        os.kill(os.getpid(), sig)

    threading.Thread(target=watch, name="scaleprobe-dies-with", daemon=True).start()


def own_process_group() -> None:
    """A launched rank leads its own process group, so its loader workers can be stopped with
    it (``launch.py``), and a terminal's Ctrl+C reaches only the launcher, which forwards it;
    and it dies with the launcher (Linux). Its loader workers' fd-sharing errors stay off
    the output (``quiet_fd_sharing``)."""
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    die_with_parent(signal.SIGKILL)
    quiet_fd_sharing()


_RESOURCE_SHARER = os.path.join("multiprocessing", "resource_sharer.py")


def quiet_fd_sharing() -> None:
    """A DataLoader worker hands each batch's tensors to its rank as file descriptors, through
    multiprocessing's resource sharer: a thread in the worker that the rank connects to. When
    the rank dies mid-handover (SIGKILL, the OOM killer) or its peer's failure ends it, that
    thread prints a 19-line traceback ending in ``ConnectionResetError`` on the job's stderr
    (``sys.excepthook``), though the run's record already names what happened. Installed in
    the rank, so the workers it forks inherit it: a connection error raised in the resource
    sharer is dropped, anything else is printed as before."""
    hook = sys.excepthook

    def excepthook(kind: type[BaseException], value: BaseException, tb: Any) -> None:
        if issubclass(kind, (ConnectionError, EOFError)) and _raised_in_sharer(tb):
            return
        hook(kind, value, tb)

    sys.excepthook = excepthook


def _raised_in_sharer(tb: Any) -> bool:
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.endswith(_RESOURCE_SHARER):
            return True
        tb = tb.tb_next
    return False


# a GPU's driver nodes: a process forked after CUDA (or ROCm) was initialised cannot use it
GPU_NODES = ("/proc/driver/nvidia", "/dev/kfd")


def gpu_machine() -> bool:
    """Whether this machine has an NVIDIA or AMD GPU driver (not whether torch can use it)."""
    return any(os.path.exists(p) for p in GPU_NODES)


def use_platform_start_method() -> None:
    """Start processes (loader workers) the platform's default way, fork on Linux before
    Python 3.14, as a process started by ``torchrun`` or from a shell does. A process started
    by multiprocessing's spawn or forkserver inherits that method as its default: with spawn
    each loader worker is a fresh interpreter importing torch again (seconds of CPU per
    worker on a 2-core machine); with forkserver the workers are the server's children, not
    the training process's, so its CPU and memory figures miss them and count them as load
    from outside the run."""
    multiprocessing.set_start_method(multiprocessing.get_all_start_methods()[0], force=True)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def shm_bytes() -> int | None:
    try:
        return shutil.disk_usage("/dev/shm").total
    except OSError:
        return None


def data_segment_bytes() -> int | None:
    """What this process holds against RLIMIT_DATA (VmData: heap and private writable
    mappings; Linux), or None where that is not readable."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _torchvision_version() -> str | None:
    """From the installed package's metadata: importing torchvision here could fail (or half
    import) after a run that hit its memory limit, and must not cost the result."""
    try:
        return version("torchvision")
    except PackageNotFoundError:
        return None


def _nvml() -> dict[str, Any]:
    try:
        return nvml_info()
    except Exception as e:  # noqa: BLE001  (an environment fact, never worth the result)
        return {"status": f"{type(e).__name__}: {e}", "driver": None}


def collect_env() -> dict[str, Any]:
    """Everything a figure depends on: host, CPU, versions, GPUs, driver, world."""
    import torch  # heavy: torch: env's facts are read without it; only a question about torch loads it

    info = dist_info()
    gpus: list[dict[str, Any]] = []
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            gpus.append({"index": i, "name": p.name, "memory_total_bytes": int(p.total_memory)})
    nv = _nvml()
    return {
        "host": socket.gethostname(),
        "cores": cpu_count(),
        "cpu_model": cpu_model(),
        "mem_total_bytes": psutil.virtual_memory().total,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torchvision": _torchvision_version(),
        "cuda": torch.version.cuda if torch.cuda.is_available() else None,
        "cuda_build": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.cuda.is_available() else None,
        "cuda_available": torch.cuda.is_available(),
        "gpus": gpus,
        "driver": nv.get("driver"),
        "nvml": nv.get("status"),
        "threads": torch.get_num_threads(),
        "shm_bytes": shm_bytes(),
        "world_size": info.world,
        "local_world_size": info.local_world,
        "rank": info.rank,
    }
