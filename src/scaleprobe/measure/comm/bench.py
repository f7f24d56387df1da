"""Collective benchmark: time each operation at each message size inside a process group.

The operations (float32 tensors; ``size_bytes`` is the message size, as in nccl-tests), the
timing (a barrier before every iteration, the slowest rank's time, the median over the timed
iterations, each of which is kept as ``times_s``, warm-up not timed) and the bus bandwidth each operation's factor gives
(``algbw = size_bytes / time_s``, ``busbw = algbw * factor``) are docs/COMMUNICATION.md's
(``scaleprobe comm``). On the CPU each point up to ``WAKE_MAX_BYTES`` is also timed as a
training step issues it, right after ``WAKE_COMPUTE_S`` of compute on every rank
(``after_compute_s``): gloo's threads have slept meanwhile, and waking them costs the first
collective of a step more than a call that follows a barrier.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from scaleprobe.core.errors import ConfigError
from scaleprobe.core.registry import suggest
from scaleprobe.measure.env import (
    dist_info,
    init_distributed,
    pick_device,
    set_gloo_io,
    shutdown_distributed,
)

OPS = ("all_reduce", "broadcast", "reduce", "all_gather", "ps_push_pull", "reduce_scatter",
       "fsdp_step", "all_gather_flat")
DEFAULT_OPS = OPS[:5]  # `scaleprobe comm` by default; the FSDP ones on request (--ops)
DEFAULT_SIZES = "1K,64K,1M,16M,256M"
FLOAT32_BYTES = 4
# Large messages get fewer iterations: at most this many bytes are moved per (op, size).
BYTES_BUDGET_PER_POINT = 1 << 30
MIN_TIMED_ITERS = 3
# The CPU's second timing of small points: after this much compute on every rank
WAKE_MAX_BYTES = 1 << 20
WAKE_COMPUTE_S = 0.010

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_sizes(text: str) -> list[int]:
    """``"1K,1M,16M,256M"`` -> bytes (powers of 1024; ``KiB``/``KB``/``B`` suffixes accepted)."""
    sizes: list[int] = []
    for item in str(text).split(","):
        raw = item.strip()
        t = raw.upper().removesuffix("B").removesuffix("I")
        unit = t[-1:] if t[-1:] in ("K", "M", "G") else ""
        number = t[: len(t) - len(unit)]
        try:
            value = float(number)
        except ValueError:
            raise ConfigError(f"cannot read message size '{raw}' (e.g. 1K,1M,16M,256M)") from None
        size_bytes = int(value * _UNITS[unit])
        if size_bytes < FLOAT32_BYTES:
            raise ConfigError(f"message size '{raw}' is below one float32 ({FLOAT32_BYTES} bytes)")
        sizes.append(size_bytes)
    return sorted(set(sizes))


def parse_ops(text: str) -> list[str]:
    """``"all_reduce,broadcast"`` -> a validated list in the order given."""
    ops = [o.strip() for o in str(text).split(",") if o.strip()]
    if not ops:
        raise ConfigError("no operations given (choices: " + ", ".join(OPS) + ")")
    for op in ops:
        if op not in OPS:
            near = suggest(op, OPS)
            hint = f"; did you mean {', '.join(near)}?" if near else f" (choices: {', '.join(OPS)})"
            raise ConfigError(f"unknown operation '{op}'{hint}")
    return list(dict.fromkeys(ops))


def busbw_factor(op: str, world: int) -> float:
    """algbw -> busbw multiplier (nccl-tests' definitions; ps_push_pull: rank 0's link carries
    ``(n-1) x size`` in, then as much out, so ``2(n-1)``)."""
    n = world
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_gather_flat"):
        return (n - 1) / n
    if op == "fsdp_step":
        return 3 * (n - 1) / n
    if op in ("broadcast", "reduce"):
        return 1.0
    if op == "ps_push_pull":
        return 2.0 * (n - 1)
    raise ConfigError(f"unknown operation '{op}'")


def plan_iters(size_bytes: int, iters: int, warmup: int) -> tuple[int, int]:
    """Fewer (timed, warm-up) iterations for big messages, so one point stays bounded.

    Deterministic in its arguments: every rank must run the same number of collectives."""
    cap = max(MIN_TIMED_ITERS, BYTES_BUDGET_PER_POINT // max(1, size_bytes))
    timed = max(1, min(iters, cap))
    warm = min(warmup, max(1, cap // 4)) if warmup > 0 else 0
    return timed, warm


def make_row(op: str, size_bytes: int, time_s: float, world: int) -> dict[str, Any]:
    algbw = size_bytes / time_s / 1e9 if time_s > 0 else None
    busbw = algbw * busbw_factor(op, world) if algbw is not None else None
    return {"op": op, "size_bytes": size_bytes, "time_s": time_s,
            "algbw_gbyte_s": algbw, "busbw_gbyte_s": busbw}


def _op_fn(op: str, size_bytes: int, world: int, device: Any):
    """A closure running one ``op`` on preallocated tensors of ``size_bytes``."""
    # heavy: torch: torch.distributed, in the benchmark's own rank processes
    import torch
    import torch.distributed as dist

    numel = max(1, size_bytes // FLOAT32_BYTES)
    if op == "all_gather":
        part = max(1, numel // world)
        src = torch.ones(part, dtype=torch.float32, device=device)
        outs = [torch.empty_like(src) for _ in range(world)]
        return lambda: dist.all_gather(outs, src)
    if op in ("reduce_scatter", "fsdp_step", "all_gather_flat"):
        return _sharded_fn(op, numel, world, device)
    buf = torch.ones(numel, dtype=torch.float32, device=device)
    if op == "all_reduce":
        return lambda: dist.all_reduce(buf)
    if op == "broadcast":
        return lambda: dist.broadcast(buf, src=0)
    if op == "reduce":
        return lambda: dist.reduce(buf, dst=0)

    rank = dist.get_rank()
    back = torch.ones(numel, dtype=torch.float32, device=device)

    def push_pull() -> None:
        """As strategies/ps.py exchanges a step: each worker sends its tensor to the server
        (rank 0) and waits for the reply; the server takes the pushes in the order they come
        (a receive from any rank), then replies to each worker in turn."""
        if rank == 0:
            for _ in range(1, world):
                dist.recv(buf)
            for w in range(1, world):
                dist.send(back, dst=w)
        else:
            dist.send(buf, dst=0)
            dist.recv(back, src=0)

    return push_pull


def _sharded_fn(op: str, numel: int, world: int, device: Any):
    """reduce_scatter, all_gather_flat or fsdp_step on flat tensors of ``numel`` (rounded down to a multiple
    of the world size) and their ``numel / world`` shards."""
    # heavy: torch: torch.distributed, in the benchmark's own rank processes
    import torch
    import torch.distributed as dist

    # the names FSDP calls (torch 2.14); the older names of the same collectives before
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    part = max(1, numel // world)
    full = torch.ones(part * world, dtype=torch.float32, device=device)
    shard = torch.ones(part, dtype=torch.float32, device=device)
    if op == "reduce_scatter":
        return lambda: scatter(shard, full)
    if op == "all_gather_flat":
        return lambda: gather(full, shard)

    def step() -> None:
        gather(full, shard)  # forward: gather the parameters
        gather(full, shard)  # backward: gather them again
        scatter(shard, full)  # gradients: reduce, keep this rank's shard

    return step


def _time_iters(fn, iters: int, warmup: int, device: Any) -> list[float]:
    """Per-iteration seconds on this rank; a barrier precedes every iteration."""
    # heavy: torch: torch.distributed, in the benchmark's own rank processes
    import torch
    import torch.distributed as dist

    cuda = device.type == "cuda"
    for _ in range(warmup):
        fn()
    if cuda:
        torch.cuda.synchronize(device)
        events = []
        for _ in range(iters):
            dist.barrier()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            events.append((start, end))
        torch.cuda.synchronize(device)
        return [s.elapsed_time(e) / 1e3 for s, e in events]
    times: list[float] = []
    for _ in range(iters):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def _compute(seconds: float) -> None:
    """Keep this rank's thread busy with arithmetic for ``seconds`` (a step's compute)."""
    import torch  # heavy: torch, in the benchmark's own rank processes

    a = torch.full((64, 64), 0.01)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        a = torch.tanh(a @ a)


def _time_after_compute(fn, iters: int) -> list[float]:
    """Per-iteration seconds of ``fn`` right after ``WAKE_COMPUTE_S`` of compute on every rank
    (a barrier before it lines the ranks up); CPU only."""
    import torch.distributed as dist  # heavy: torch

    times: list[float] = []
    for _ in range(iters):
        dist.barrier()
        _compute(WAKE_COMPUTE_S)
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def _slowest_rank(times_s: list[float], device: Any) -> list[float]:
    """Element-wise maximum over ranks: an iteration lasts until its slowest rank is done."""
    # heavy: torch: torch.distributed, in the benchmark's own rank processes
    import torch
    import torch.distributed as dist

    t = torch.tensor(times_s, dtype=torch.float64 if device.type == "cpu" else torch.float32,
                     device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [float(x) for x in t.cpu()]


def time_collective(op: str, size_bytes: int, iters: int, warmup: int,
                    device: Any) -> list[float]:
    """Seconds per timed iteration of one ``op`` of ``size_bytes`` in the current process
    group, each the slowest rank's (every rank gets the same list). A collective call: every
    rank of the group must make it with the same arguments."""
    import torch.distributed as dist  # heavy: torch

    fn = _op_fn(op, size_bytes, dist.get_world_size(), device)
    return _slowest_rank(_time_iters(fn, iters, warmup, device), device)


def time_after_compute(op: str, size_bytes: int, iters: int, device: Any) -> list[float]:
    """As ``time_collective``, each call right after a step's worth of compute (CPU)."""
    import torch.distributed as dist  # heavy: torch

    fn = _op_fn(op, size_bytes, dist.get_world_size(), device)
    return _slowest_rank(_time_after_compute(fn, iters), device)


def run_bench(ops: list[str], sizes_bytes: list[int], iters: int, warmup: int,
              device: Any) -> list[dict[str, Any]]:
    """All (op, size) points in an initialised process group; every rank gets the same rows."""
    import torch.distributed as dist  # heavy: torch

    world = dist.get_world_size()
    rows: list[dict[str, Any]] = []
    for op in ops:
        for size in sizes_bytes:
            timed, warm = plan_iters(size, iters, warmup)
            cpu0 = time.process_time()
            per_iter_s = time_collective(op, size, timed, warm, device)
            cpu = (time.process_time() - cpu0) / (timed + warm)
            row = make_row(op, size, statistics.median(per_iter_s), world)
            row["iters"] = timed
            # every timed call (the slowest rank's), so a fit may be made again from another
            # statistic of them (small calls on gloo are bimodal: docs/COMMUNICATION.md)
            row["times_s"] = per_iter_s
            if device.type == "cpu":  # this rank's CPU time per call, its threads together
                row["cpu_s"] = cpu
                if size <= WAKE_MAX_BYTES:
                    after = time_after_compute(op, size, timed, device)
                    row["after_compute_s"] = statistics.median(after)
                    row["after_compute_times_s"] = after
            rows.append(row)
    return rows


def bench_worker(ops: list[str], sizes_bytes: list[int], iters: int, warmup: int,
                 backend: str | None = None, timeout_s: float = 60.0,
                 gloo_io: str = "default") -> list[dict[str, Any]]:
    """Worker entry for ``scaleprobe.launch.run_workers``: join the group, benchmark, leave.
    ``gloo_io``: gloo's socket threads as a run's ``dist.gloo_io`` sets them."""
    _, world = init_distributed(backend, timeout_s)
    set_gloo_io(gloo_io)
    try:
        if world < 2:
            raise ConfigError("the communication benchmark needs at least 2 processes")
        # heavy: torch: torch.distributed, in the benchmark's own rank processes
        import torch
        import torch.distributed as dist

        nccl = dist.get_backend() == "nccl"
        device = pick_device(dist_info().local_rank) if nccl else torch.device("cpu")
        return run_bench(ops, sizes_bytes, iters, warmup, device)
    finally:
        shutdown_distributed()
