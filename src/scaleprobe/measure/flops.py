"""FLOPs per training step, and the peak they are held against (MFU).

``StepFlops`` counts the first warm-up step (never timed) under
``torch.utils.flop_counter.FlopCounterMode``: 2 FLOPs per multiply-add, forward and backward;
element-wise operators, the optimizer and communication count 0. ``flop_counter()`` adds the
CPU attention kernels PyTorch has no formula for, and counts attention's backward as model
FLOPs (four products, not the flash kernels' five). The peak is the data sheet's
(``measure/peaks.py``) or measured, cached per machine and checked at a run's start.
docs/FLOPS.md ("FLOPs per step", "The peak") gives the convention, the attention and causal
mask rules, and the cache's load and staleness checks with their measured figures.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import platform
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from scaleprobe.core.rank_record import RankFlops
from scaleprobe.measure.outside import machine_busy_s
from scaleprobe.measure.peaks import table_peak

CACHE_FILE = "peaks.json"
# A CPU calibration beside other processes that kept more than 1 - this share of its threads'
# cores busy (the machine's busy CPU time less its own, over its wall time) ran under load:
# its peak is low. Measured on the 2-core machine (2026-11-25, 5 calibrations each): quiet,
# its threads had 1.0 of their cores and 69-73 GFLOP/s; one busy loop beside it, 0.68-0.71
# and 41-44 GFLOP/s; two, 0.33-0.44. Its own share is no test: bf16's products there use one
# thread of two on a quiet machine (0.51), every one of them "under load" and measured again.
BUSY_SHARE = 0.8
# A cached peak is checked at every run with a short series of the same products (about
# CHECK_SECONDS); a check above the cached figure by more than STALE_MARGIN proves the cache
# low (a best-of can only be beaten by a faster machine): it is measured again and replaced.
# Seen on the 2-core machine (2026-11-25): the peak cached in the morning, 101 GFLOP/s, on a
# machine that later gave 195-198 GFLOP/s (the VM moved), every MFU twice the truth.
CHECK_SECONDS = 0.05
# a check that held is good for this long on this machine: a sweep's or a suite's short runs
# do not each pay one: 0.23 s of matrix products and their set-up in one short run profiled
# on the 2-core machine at load average 3
CHECK_EVERY_S = 600.0
STALE_MARGIN = 0.10
# The CPU's products: the largest of these sizes whose one product, timed at the smallest,
# would take at most CPU_PRODUCT_S. fp32 on any recent CPU gets 1024 (19 ms a product at 110
# GFLOP/s on the 2-core machine); a dtype without a fast kernel gets less: bf16 there took
# 2.9 s a 1024 product, so a calibration (two untimed, at least three timed) took 14.4 s
# and a quick check as long, before every bf16 run on the CPU.
CPU_SIZES = (256, 512, 1024)
CPU_PRODUCT_S = 0.25
COUNT_METHOD = ("torch.utils.flop_counter.FlopCounterMode over the first warm-up step "
                "(forward + backward; 2 FLOPs per multiply-add; attention's products on the "
                "full T x T scores, without recomputation; element-wise operators and the "
                "optimizer update count 0)")


# ---- counting -----------------------------------------------------------------------------

class StepFlops:
    """Counts one step's FLOPs: ``with sf.around(step, timed): <one step>``. Only the first
    untimed step is counted; ``result()`` is this rank's record entry."""

    def __init__(self, warmup_steps: int, towers: int = 1) -> None:
        self.flops: int | None = None
        self.reason: str | None = None
        if warmup_steps < 1:
            self.reason = "not counted: no untimed step to count on (--warmup-steps 0)"
        elif towers > 1:
            self.reason = ("not counted: DataParallel runs its replicas in threads the "
                           "counter does not see")

    @contextlib.contextmanager
    def around(self, step: int, timed: bool) -> Iterator[None]:
        if step != 0 or timed or self.reason is not None:
            yield
            return
        mode = flop_counter()
        with mode:
            yield
        total = int(mode.get_total_flops())
        if total > 0:
            self.flops = total
        else:
            self.reason = "not counted: no matrix product or convolution in the step"

    def after_loop(self, p: Any, st: Any) -> None:
        """After the timed window: nothing here (``measure/fakeflops.CompiledStepFlops``
        counts a compiled model then)."""

    def result(self) -> RankFlops:
        """The count as the rank's record holds it (its peak is added by the engine)."""
        return RankFlops(flops_per_step=self.flops, method=COUNT_METHOD, reason=self.reason)


def _sdpa_forward(query_shape: Any, key_shape: Any, value_shape: Any, *args: Any,
                  out_shape: Any = None, **kwargs: Any) -> int:
    """Attention's two products, ``Q K^T`` and ``P V``, on the full ``T x T`` scores."""
    from torch.utils.flop_counter import sdpa_flop_count  # heavy: torch

    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _sdpa_backward(grad_out_shape: Any, query_shape: Any, key_shape: Any, value_shape: Any,
                   *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    """The gradients of the two products (of P, V, Q and K): four products, twice the
    forward; a kernel's recomputation of the scores is not counted (model FLOPs)."""
    return 2 * _sdpa_forward(query_shape, key_shape, value_shape)


def sdpa_formulas() -> dict[Any, Any]:
    """FLOP formulas for the attention operators, by operator (see the module docstring)."""
    aten = torch.ops.aten
    out: dict[Any, Any] = {}
    for name in ("_scaled_dot_product_flash_attention_for_cpu",):
        if hasattr(aten, name):
            out[getattr(aten, name)] = _sdpa_forward
    for name in ("_scaled_dot_product_flash_attention_for_cpu_backward",
                 "_scaled_dot_product_flash_attention_backward",
                 "_scaled_dot_product_efficient_attention_backward",
                 "_scaled_dot_product_cudnn_attention_backward"):
        if hasattr(aten, name):
            out[getattr(aten, name)] = _sdpa_backward
    return out


def flop_counter() -> Any:
    """A ``FlopCounterMode`` (no display) with the attention formulas of ``sdpa_formulas``."""
    from torch.utils.flop_counter import FlopCounterMode  # heavy: torch

    return FlopCounterMode(display=False, custom_mapping=sdpa_formulas())


def count_flops(fn: Callable[[], Any]) -> int:
    """FLOPs of ``fn()`` (run once under the counter), e.g. a forward and backward pass."""
    mode = flop_counter()
    with mode:
        fn()
    return int(mode.get_total_flops())


# ---- the peak -----------------------------------------------------------------------------

def run_dtype(device: torch.device, amp: str) -> str:
    """The dtype the run's matrix products use: bf16 / fp16 under autocast; without it, fp32,
    or tf32 on a CUDA device of compute capability 8.0 or above when cuDNN or matmul TF32 is
    allowed (PyTorch allows it for convolutions by default)."""
    if amp in ("bf16", "fp16"):
        return amp
    if device.type == "cuda":
        tf32 = torch.backends.cudnn.allow_tf32 or torch.backends.cuda.matmul.allow_tf32
        if tf32 and torch.cuda.get_device_capability(device)[0] >= 8:
            return "tf32"
    return "fp32"


TORCH_DTYPE = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16,
               "fp16": torch.float16}


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return _cpu_model() or platform.processor() or platform.machine() or "cpu"


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_threads() -> int:
    """The cores this process may run on (its affinity), the CPU "device" a peak is for."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def calibrate(device: torch.device, dtype: str, n: int | None = None, seconds: float = 0.5,
              clock: Callable[[], float] = time.perf_counter,
              cpu_clock: Callable[[], float] = time.process_time,
              machine_clock: Callable[[], float] = machine_busy_s) -> dict[str, Any]:
    """The best FLOP/s of ``n x n`` matrix products in ``dtype`` on ``device``, over about
    ``seconds`` after two untimed products (``n`` None: 8192 on CUDA; on a CPU the size
    ``cpu_size`` picks from one product at the smallest). On a CPU every core of the
    process's affinity is used (the thread count is restored after): ``cpu_share`` is the
    share of those cores the best product used (process CPU time / (wall time x threads)), and ``outside_cores`` the
    cores other processes kept busy over the calibration (the machine's busy CPU time less
    this process's, over its wall time). It ran under load when they took more than
    ``1 - BUSY_SHARE`` of its threads' cores: a kernel that uses one thread of two (bf16's
    products on a CPU without bf16 instructions) is slow, not loaded."""
    cuda = device.type == "cuda"
    tdt = TORCH_DTYPE[dtype]
    threads = torch.get_num_threads()
    if not cuda:
        torch.set_num_threads(cpu_threads())
    prev_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    try:
        n = n or (8192 if cuda else cpu_size(_product_s(CPU_SIZES[0], tdt, clock)))
        g = torch.Generator().manual_seed(0)
        a = torch.randn(n, n, generator=g).to(device, tdt)
        b = torch.randn(n, n, generator=g).to(device, tdt)
        used = None if cuda else cpu_threads()
        best, share, reps, t_end = 0.0, None, 0, clock() + seconds
        w_start, c_start, m_start = clock(), cpu_clock(), machine_clock()
        for i in range(1000):
            sync_device(device)
            t0, c0 = clock(), cpu_clock()
            torch.mm(a, b)
            sync_device(device)
            dt, cpu_dt = clock() - t0, cpu_clock() - c0
            if i >= 2:
                reps += 1
                if dt > 0 and 2.0 * n ** 3 / dt > best:
                    best = 2.0 * n ** 3 / dt
                    share = min(1.0, cpu_dt / (dt * used)) if used else None
                if clock() >= t_end and reps >= 3:
                    break
        wall = clock() - w_start
        others = (machine_clock() - m_start) - (cpu_clock() - c_start)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev_tf32
        torch.set_num_threads(threads)
    where = f"{used} threads" if used else "one device"
    outside = max(0.0, others / wall) if used and wall > 0 else None
    return {"flops_per_s": best, "n": n, "reps": reps, "threads": used, "cpu_share": share,
            "outside_cores": outside,
            "under_load": outside is not None and used is not None
            and outside > (1.0 - BUSY_SHARE) * used,
            "method": f"measured peak: best of {reps} {dtype} {n}x{n} matrix products, {where}"}


def cpu_size(smallest_s: float) -> int:
    """The CPU calibration's size: the largest of ``CPU_SIZES`` whose product would take at
    most ``CPU_PRODUCT_S``, from ``smallest_s``, one product at the smallest size (the time
    grows as the size cubed); the smallest when none would."""
    small = CPU_SIZES[0]
    for n in sorted(CPU_SIZES, reverse=True):
        if smallest_s * (n / small) ** 3 <= CPU_PRODUCT_S:
            return n
    return small


def _product_s(n: int, tdt: torch.dtype, clock: Callable[[], float]) -> float:
    """The time of one CPU product of ``n x n`` matrices in ``tdt``: the least of three, after
    an untimed one (a process's first products also start its threads: one timed alone put
    fp32 at 512 one time in two)."""
    a = torch.ones(n, n, dtype=tdt)
    torch.mm(a, a)
    best = math.inf
    for _ in range(3):
        t0 = clock()
        torch.mm(a, a)
        best = min(best, clock() - t0)
    return best


def sync_device(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA) before a host clock is read; nothing on the
    CPU, whose work has ended when its call returns."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "scaleprobe"


def cache_key(device: torch.device, dtype: str) -> str:
    where = f"{cpu_threads()} threads" if device.type != "cuda" else "gpu"
    return (f"{socket.gethostname()}|{device_name(device)}|{where}|{dtype}|"
            f"torch {torch.__version__.split('+')[0]}")


def measured_peak(device: torch.device, dtype: str, folder: Path | None = None,
                  measure: Callable[[torch.device, str], dict[str, Any]] | None = None,
                  check: Callable[[torch.device, str], dict[str, Any]] | None = None
                  ) -> dict[str, Any]:
    """The cached measured peak for this machine, device and dtype; measured (and cached) when
    missing, or when the one kept was measured under load: then the higher of the two is kept
    (still under load), unless the new one ran on a quiet machine, which replaces it. A quiet
    cached peak is checked first (``check``, a short series of the same products): one beaten
    by more than ``STALE_MARGIN`` is measured again and replaced (the entry's ``replaced``
    keeps the old figure). Ranks on one host that ask together wait on a lock and measure
    once. A cache that cannot be read or written costs a measurement, never the run."""
    folder = folder or cache_dir()
    key = cache_key(device, dtype)
    stale = None
    with cache_locked(folder):
        cached = read_cache(folder / CACHE_FILE)
        hit = cached.get(key)
        if not (isinstance(hit, dict) and (hit.get("flops_per_s") or 0) > 0):
            hit = None
        if hit is not None and not hit.get("under_load"):
            if time.time() - (hit.get("checked_at") or 0) < CHECK_EVERY_S:
                return {**hit, "cached": True}  # checked moments ago (a sweep's points)
            stale = _stale(hit, device, dtype, check or (None if measure else _quick_check))
            if stale is None:
                cached[key] = {**hit, "checked_at": time.time()}
                write_cache(folder / CACHE_FILE, cached)
                return {**cached[key], "cached": True}
            hit = None  # proven low: measured again below, replaced whatever it gives
        got = (measure or calibrate)(device, dtype)
        entry = {**got, "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
                 "checked_at": time.time()}  # as good as a check, when quiet
        if stale is not None:
            entry["replaced"] = stale
            checked = stale["check_flops_per_s"]
            if entry.get("under_load") and entry["flops_per_s"] < checked:
                # a busy calibration below the check that proved the cache low: the check's
                # figure is the better lower bound (still marked under load)
                entry["method"] += (f"; the check before it reached {checked / 1e9:.3g} "
                                    "GFLOP/s, kept")
                entry["flops_per_s"] = checked
        busy_again = entry.get("under_load") and hit is not None
        if busy_again and hit is not None and hit["flops_per_s"] >= entry["flops_per_s"]:
            return {**hit, "cached": True}  # busy again, and no higher than the one kept
        cached[key] = entry
        write_cache(folder / CACHE_FILE, cached)
    return {**entry, "cached": False}


def _stale(hit: dict[str, Any], device: torch.device, dtype: str,
           check: Callable[[torch.device, str], dict[str, Any]] | None) -> dict[str, Any] | None:
    """The cached entry's figures when a short check beats it by more than ``STALE_MARGIN``
    (it is then too low for this machine), else None (also with no check: a caller's own
    ``measure`` and no ``check``)."""
    if check is None:
        return None
    got = check(device, dtype)
    now = got.get("flops_per_s") or 0.0
    if now > hit["flops_per_s"] * (1.0 + STALE_MARGIN):
        return {"flops_per_s": hit["flops_per_s"], "measured_at": hit.get("measured_at"),
                "check_flops_per_s": now}
    return None


def _quick_check(device: torch.device, dtype: str) -> dict[str, Any]:
    return calibrate(device, dtype, seconds=CHECK_SECONDS)


@contextlib.contextmanager
def cache_locked(folder: Path) -> Iterator[None]:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / "peaks.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except (ImportError, OSError):
        yield  # no lock: at worst two ranks measure
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def read_cache(path: Path) -> dict[str, Any]:
    try:
        d = json.loads(path.read_text())
        return d if isinstance(d, dict) else {}
    except (OSError, ValueError):
        return {}


def write_cache(path: Path, d: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(d, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()


def resolve_peak(device: torch.device, amp: str, folder: Path | None = None) -> dict[str, Any]:
    """This device's peak FLOP/s for the run's dtype: ``{flops_per_s, dtype, device_name,
    source, measured}`` from the data-sheet table, else measured (``measured_peak``)."""
    dtype = run_dtype(device, amp)
    name = device_name(device)
    hit = table_peak(name, dtype) if device.type == "cuda" else None
    if hit is not None:
        return {"flops_per_s": hit[0], "dtype": dtype, "device_name": name,
                "source": f"data sheet: {hit[1]}", "measured": False}
    m = measured_peak(device, dtype, folder)
    cached = f", cached {m.get('measured_at')}" if m.get("cached") else ""
    old = m.get("replaced")
    if isinstance(old, dict) and old.get("flops_per_s") and not m.get("cached"):
        cached = (f"; replaces the peak cached {old.get('measured_at')} "
                  f"({old['flops_per_s'] / 1e9:.3g} GFLOP/s), which a check at "
                  f"{old.get('check_flops_per_s', 0) / 1e9:.3g} GFLOP/s beat")
    busy = ""
    if m.get("under_load"):
        out, used = m.get("outside_cores"), m.get("threads")
        got = (f" (they kept {out:.1f} of its {used} threads' cores busy)"
               if out is not None and used else "")
        busy = (f"; measured while other processes used the CPU{got}: the peak is likely "
                "higher and the MFU lower than shown; measured again at the next run")
    return {"flops_per_s": m["flops_per_s"], "dtype": dtype, "device_name": name,
            "source": f"{m['method']}{cached}{busy}", "measured": True,
            "under_load": bool(m.get("under_load"))}
