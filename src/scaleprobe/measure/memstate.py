"""What a memory prediction (predict/memmodel.py) needs, read in a rank after its timed window:
the model state as arithmetic inputs (``model_facts``) and the batch's activation memory on
the allocator (``probe_steps``: untimed steps on the last batch, its half and its quarter).
On CUDA the allocator's own peak statistics are read; on the CPU, which has none, the
profiler's memory events are summed in time order. Both count tensor bytes, never the
process's resident memory. docs/MEMORY.md ("What the run measures") gives every figure and
where the probe is not run.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from scaleprobe.measure.held import _tensors

METHOD_CUDA = ("torch.cuda.max_memory_allocated after reset_peak_memory_stats, less "
               "memory_allocated before; one untimed step after the window per batch size")
METHOD_CPU = ("torch.profiler profile_memory=True: tensor allocations and frees summed in time "
              "order, the running maximum above the start; one untimed step after the window "
              "per batch size")
MASTER_NOTE = ("none: parameters are kept in their own dtype and autocast makes low-precision "
               "copies per op (counted in the activations)")


def _dtype_name(t: Any) -> str:
    return str(t.dtype).removeprefix("torch.")


def unit_bytes(model: nn.Module, units: list[nn.Module]) -> tuple[list[int], int]:
    """Bytes of each of ``units`` (FSDP's rule, strategies/fsdp.shard_units) in the rule's
    order, then of the root (what no unit holds): what one rank gathers whole at a time; and
    the root's alone."""

    def nbytes(ps: Any) -> int:
        return sum(int(p.numel()) * int(p.element_size()) for p in ps)

    in_units = {id(p) for u in units for p in u.parameters()}
    sizes = [nbytes(u.parameters()) for u in units]
    root = nbytes(p for p in model.parameters() if id(p) not in in_units)
    return [*sizes, root], root


def model_facts(model: nn.Module, optimizer: Any,
                shard_units: Callable[[nn.Module], tuple[list[nn.Module], str]]
                ) -> dict[str, Any]:
    """Parameters per dtype, the optimizer's state per parameter, master copies and FSDP's
    largest unit (``shard_units``: FSDP's rule), as ``results.MemoryFacts`` fields (numel are global, not a shard's)."""
    params = list(model.parameters())
    by_dtype: dict[str, int] = {}
    for p in params:
        by_dtype[_dtype_name(p)] = by_dtype.get(_dtype_name(p), 0) + int(p.numel())
    numel = sum(by_dtype.values())
    full_bytes, scalar_bytes, per_param = 0, 0, 0
    for p in params:
        state = optimizer.state.get(p, {})
        n_full = 0
        for t in _tensors(state):
            if int(t.numel()) == int(p.numel()) and int(p.numel()) > 1:
                n_full += 1
                full_bytes += int(t.numel()) * int(t.element_size())
            else:
                scalar_bytes += int(t.numel()) * int(t.element_size())
        per_param = max(per_param, n_full)
    unit: int | None
    second: int | None
    root: int | None
    ordered: list[int] | None
    try:
        ordered, root = unit_bytes(model, shard_units(model)[0])
        sizes = sorted(ordered, reverse=True)
        unit, second = sizes[0], (sizes[1] if len(sizes) > 1 else 0)
        unit_reason = None
    except Exception as e:  # noqa: BLE001  (a user's model the rule cannot split: unknown)
        unit = second = root = None
        ordered = None
        unit_reason = f"FSDP's unit rule failed on this model: {e}"
    return {"param_count": numel, "param_numel_by_dtype": by_dtype,
            "optimizer": type(optimizer).__name__,
            "optimizer_states_per_param": per_param,
            "optimizer_bytes_per_param": full_bytes / numel if numel else None,
            "optimizer_scalar_bytes": scalar_bytes, "optimizer_param_tensors": len(params),
            "master_bytes_per_param": 0.0, "master_note": MASTER_NOTE,
            "largest_unit_bytes": unit, "second_unit_bytes": second,
            "root_unit_bytes": root, "unit_bytes": ordered,
            "largest_unit_reason": unit_reason, "buffer_bytes": buffer_groups(model)}


def buffer_groups(model: nn.Module) -> list[int]:
    """The model's buffers (BatchNorm's running statistics and counts), their bytes per
    dtype in the order the dtypes first occur: what DDP broadcasts from rank 0 before every
    forward, one collective per dtype (``broadcast_buffers``, its default); [] for none."""
    by: dict[str, int] = {}
    for b in model.buffers():
        key = str(b.dtype)
        by[key] = by.get(key, 0) + int(b.numel()) * int(b.element_size())
    return [n for n in by.values() if n > 0]


@contextlib.contextmanager
def _native_stderr_quiet() -> Iterator[None]:
    """The process's stderr (file descriptor 2) to /dev/null for the duration: the profiler's
    native library logs each start and stop there ("profiler_start", and on a machine without a
    GPU "gpuGetDeviceCount failed"), which no Python setting silences. Python's own stderr
    output is flushed before and goes to the same place after."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to silence
        yield
        return
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, 2)
        finally:
            os.close(null)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _cpu_peak(fn: Callable[[], None]) -> int:
    """The most tensor bytes live at once above the start while ``fn`` runs (CPU)."""
    # heavy: torch.profiler: only for this one probe step
    from torch.profiler import ProfilerActivity, profile

    with _native_stderr_quiet(), profile(activities=[ProfilerActivity.CPU],
                                         profile_memory=True) as prof:
        fn()
    evs = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    evs.sort(key=lambda e: e.start_ns())
    cur = peak = 0
    for e in evs:
        cur += int(e.nbytes())
        peak = max(peak, cur)
    return peak


def _cuda_peak(fn: Callable[[], None], device: torch.device,
               margins: list[float] | None = None) -> int:
    """The allocator's peak above what was live before ``fn`` (CUDA); ``margins`` gains
    the step's max_memory_reserved / max_memory_allocated - 1 (its cache and fragmentation)."""
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    torch.cuda.synchronize(device)
    peak = int(torch.cuda.max_memory_allocated(device))
    if margins is not None and peak > 0:
        margins.append(int(torch.cuda.max_memory_reserved(device)) / peak - 1)
    return peak - int(before)


def probe_steps(p: Any, batch: tuple[Any, Any]) -> dict[str, Any]:
    """The step's allocator peaks on ``batch`` and on its first half (``results.MemoryFacts``
    probe fields). Runs forward, backward and the optimizer step: every rank of a
    synchronising strategy must call it, the model is updated (after the window)."""
    x, y = batch
    if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
        return {"reasons": {"fwd_bwd_peak_bytes": "not probed: the batch is not an input and a "
                                                  "target tensor (detection: lists)"}}
    n = int(x.shape[0])
    sizes = [n] + [n // k for k in (2, 4) if n // k >= 1 and n // k < n]
    cuda = p.device.type == "cuda"
    # a compiled model would recompile for the half batch (and count it as the run's): the
    # probe runs its eager module, which may save more for backward than the compiled graph
    inner = getattr(p.model, "_orig_mod", None)
    model = inner if inner is not None else p.model
    method = (METHOD_CUDA if cuda else METHOD_CPU) + (
        "; eager module of a compiled model (its graph may hold less)" if inner is not None
        else "")

    margins: list[float] = []

    def peak(fn: Callable[[], None]) -> int:
        return _cuda_peak(fn, p.device, margins) if cuda else _cpu_peak(fn)

    fb, opt = [], []
    t0 = time.perf_counter()
    for b in sizes:
        xb, yb = (x, y) if b == n else (x[:b], y[:b])

        def fwd_bwd(xb: Any = xb, yb: Any = yb) -> None:
            with p.autocast:
                loss = p.task.forward_loss(model, xb, yb)
            p.scaler.scale(loss).backward()

        fb.append(peak(fwd_bwd))
        opt.append(peak(lambda: p.strategy.optimizer_step(p.optimizer, p.scaler)))
        p.optimizer.zero_grad(set_to_none=True)
    return {"batch_sizes": sizes, "fwd_bwd_peak_bytes": fb, "optimizer_peak_bytes": opt,
            "probe_s": time.perf_counter() - t0,
            "device": p.device.type, "method": method,
            "input_bytes": _input_bytes(x, y),
            "probe_margin": margins[0] if margins else None}


def _input_bytes(x: Any, y: Any) -> int | None:
    if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
        return int(x.numel() * x.element_size() + y.numel() * y.element_size())
    return None
