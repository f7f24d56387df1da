"""Memory per rank in the what-if: the peak one rank's allocator reaches in a training step,
predicted for a strategy, a world size and a batch per rank from one measured run's
``MemoryFacts`` (measure/memstate.py). Torch-free.

    peak = P + O + M + buckets + inputs + max(G + unit + fixed + per_sample x b,   (forward/backward)
                                     G + temporaries)                       (optimizer step)

Model state (params P, grads G, optimizer O, master copies M) is arithmetic on the
parameters, / N under fsdp; the activations are measured: from the forward + backward peaks
f1, f2 at batch sizes b1 > b2, per_sample = (f1 - f2) / (b1 - b2) and fixed = f1 - G_run -
per_sample x b1 (G_run: the gradients the run's rank held); on CUDA the allocated peak is
scaled by the run's reserved / allocated. docs/MEMORY.md ("What is predicted, and how",
"The interval, and fits", "Limits") gives every part, the interval (``act_band``,
``_fsdp_band``, the margin's two readings) and what the model does not hold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from scaleprobe.core.result_model import RunResult
from scaleprobe.core.run_metrics import MemoryFacts
from scaleprobe.core.traits import known

DTYPE_BYTES = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2, "int64": 8,
               "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1,
               "float8_e4m3fn": 1, "float8_e5m2": 1, "complex64": 8, "complex128": 16}
STRATEGIES = ("single", "ddp", "fsdp")
PHASE_FB, PHASE_OPT = "forward/backward", "optimizer step"


@dataclass(frozen=True)
class Inputs:
    """What the model reads, bytes for the whole (unsharded) model."""

    params_bytes: int
    grads_bytes: int
    optimizer_bytes: int
    master_bytes: int
    largest_unit_bytes: int
    act_per_sample_bytes: float
    input_per_sample_bytes: float  # the batch's input and target tensors
    act_fixed_bytes: float
    optimizer_temp_bytes: float  # the run's, per rank
    run_shard: int  # k of the run the temporaries were measured in
    margin: float = 0.0  # allocator: reserved / allocated - 1
    margin_source: str = "CPU: tensor bytes, no allocator cache"
    # the interval: how much the per-sample slope grew from the two smaller probed batch
    # sizes to the two larger (bytes per sample; None: fewer than three probed), and the
    # largest probed batch, beyond which that growth is taken to go on
    act_slope_change: float | None = None
    probed_batch: int = 0
    band_source: str = "fewer than three batch sizes probed: no interval"
    margin_low: float = 0.0  # the allocator margin's readings: their lowest and highest
    margin_high: float = 0.0
    probes: int = 2  # batch sizes probed
    second_unit_bytes: int | None = None  # FSDP's second largest unit (None: not recorded)
    root_unit_bytes: int = 0  # what no unit holds: FSDP keeps it whole through backward


@dataclass(frozen=True)
class Point:
    strategy: str
    nproc: int
    batch: int  # per rank
    parts: dict[str, int] = field(default_factory=dict)  # they add up to the peak
    phase: str = PHASE_FB
    low_bytes: int | None = None  # the interval (None: no interval, see Inputs)
    high_bytes: int | None = None

    @property
    def peak_bytes(self) -> int:
        return sum(self.parts.values())


def params_bytes(numel_by_dtype: dict[str, int]) -> int:
    """Exact bytes of the parameters; a ValueError names a dtype with no known size."""
    total = 0
    for name, n in numel_by_dtype.items():
        if name not in DTYPE_BYTES:
            raise ValueError(f"no element size known for parameters of dtype {name}")
        total += DTYPE_BYTES[name] * n
    return total


def inputs_from(f: MemoryFacts, device_allocated: int | None = None,
                device_reserved: int | None = None) -> Inputs:
    """The model's inputs from a run's facts (and its CUDA peaks, for the margin); a
    ValueError says what the run did not record."""
    if not f.param_numel_by_dtype or f.param_count is None:
        raise ValueError("the run recorded no parameter counts (metrics.memory_facts)")
    fb, sizes = f.fwd_bwd_peak_bytes or [], f.batch_sizes or []
    if len(fb) < 2 or len(sizes) < 2 or sizes[0] == sizes[1]:
        why = f.reasons.get("fwd_bwd_peak_bytes", "fewer than two batch sizes probed")
        raise ValueError(f"the run measured no activation memory at two batch sizes ({why})")
    p = params_bytes(f.param_numel_by_dtype)
    k_run = (f.world or 1) if _shards(f.strategy) else 1
    per_sample = (fb[0] - fb[1]) / (sizes[0] - sizes[1])
    fixed = fb[0] - p / k_run - per_sample * sizes[0]
    if _shards(f.strategy):  # the run's own gathered units are in its peak
        fixed -= gathered_bytes(f.largest_unit_bytes or 0, f.second_unit_bytes, k_run)
    opt = (f.optimizer_bytes_per_param or 0.0) * f.param_count + (f.optimizer_scalar_bytes or 0)
    margins, source = _margins(f, device_allocated, device_reserved)
    change, band_source = _slope_change(sizes, fb, per_sample)
    return Inputs(params_bytes=p, grads_bytes=p, optimizer_bytes=round(opt),
                  master_bytes=round((f.master_bytes_per_param or 0.0) * f.param_count),
                  largest_unit_bytes=f.largest_unit_bytes or 0,
                  act_per_sample_bytes=max(0.0, per_sample), act_fixed_bytes=fixed,
                  input_per_sample_bytes=(f.input_bytes or 0) / sizes[0],
                  optimizer_temp_bytes=max((f.optimizer_peak_bytes or [0])[0], 0),
                  run_shard=k_run, margin=margins[0], margin_source=source,
                  act_slope_change=change, probed_batch=sizes[0], band_source=band_source,
                  margin_low=min(margins), margin_high=max(margins),
                  probes=min(len(fb), len(sizes)), second_unit_bytes=f.second_unit_bytes,
                  root_unit_bytes=f.root_unit_bytes or 0)


def _margins(f: MemoryFacts, allocated: int | None, reserved: int | None
             ) -> tuple[list[float], str]:
    """The allocator margin's readings, the run's first: CUDA's reserved / allocated - 1
    over the whole run, and over the probe step at the full batch where recorded; 0 on the
    CPU, whose tensor bytes are the figure."""
    if f.device != "cuda":
        return [0.0], "CPU: tensor bytes, no allocator cache"
    if not (allocated and reserved):
        return [0.0], "CUDA run without allocator peaks: no margin"
    got = [max(0.0, reserved / allocated - 1)]
    source = "the run's CUDA max_memory_reserved / max_memory_allocated - 1"
    if f.probe_margin is not None:
        got.append(max(0.0, f.probe_margin))
        source += "; its interval: that and the same over the probe step"
    return got, source


def _slope_change(sizes: list[int], fb: list[int], per_sample: float
                  ) -> tuple[float | None, str]:
    """The per-sample slope between the first two probed batch sizes less the slope between
    the second and the third (bytes per sample; positive where larger batches cost more
    per sample). None with fewer than three batch sizes probed."""
    if len(sizes) < 3 or len(fb) < 3 or sizes[2] <= 0 or sizes[1] == sizes[2]:
        return None, "fewer than three batch sizes probed: no interval"
    lower = (fb[1] - fb[2]) / (sizes[1] - sizes[2])
    change = per_sample - lower
    return change, (f"per-sample slope {per_sample:,.0f} B between batch {sizes[1]} and "
                    f"{sizes[0]}, {lower:,.0f} B between {sizes[2]} and {sizes[1]}")


def act_band(i: Inputs, batch: int) -> tuple[float, float]:
    """How far the activations at ``batch`` may lie below and above the line through the
    two largest probed batch sizes (n), in bytes. The step's peak is the most, over its
    moments, of fixed + per-sample bytes x the batch: convex in the batch, the per-sample
    slope grows where the peak moves to a moment holding more per-sample tensors. The
    slope's change c seen between the probes is taken (a) as the line's error either way up
    to n (|c| x min(b, n)), and (b) beyond n to go on growing by c per doubling of the
    batch: excess(b) = |c| x (b log2(2b/n) - n - (b - n) / ln 2), the integral of the
    slope's growth from n to b, on the side c points to."""
    c = i.act_slope_change
    if c is None:
        return 0.0, 0.0
    n = max(i.probed_batch, 1)
    sym = abs(c) * min(batch, n)
    grow = 0.0
    if batch > n:
        grow = abs(c) * (batch * math.log2(2 * batch / n) - n - (batch - n) / math.log(2))
    return (sym, sym + grow) if c >= 0 else (sym + grow, sym)


def _shards(strategy: str | None) -> bool:
    """The strategy splits parameters, gradients and optimizer state over its ranks (FSDP)."""
    t = known(strategy)
    return t is not None and t.shards_state


def _buckets(strategy: str | None) -> bool:
    """The strategy reduces gradients through buckets that copy them (DDP)."""
    t = known(strategy)
    return t is not None and t.bucketed


def gathered_bytes(largest: int, second: int | None, nproc: int) -> int:
    """What FSDP holds gathered at the step's peak beyond its shards: on N > 1 ranks the
    largest unit's parameters and their unsharded gradients (2U); on one rank the largest
    unit and the second (U + U2; not recorded: U). One rank still copies each unit into an
    unsharded buffer and its gradients into another: resnet18's forward + backward peak at
    32 px held 41.2 and 41.5 MB more under fsdp on one rank than alone at batch 8 and 16
    (layer4 33.6 + layer3 8.4 MB), 37.6 at 32; gpt_tiny 0.07 MB (its root), digits_cnn
    0.12-0.27 MB (its two units: 0.27), on 2026-11-29."""
    if nproc > 1:
        return 2 * largest
    return largest + (largest if second is None else second)


def predict(i: Inputs, strategy: str, nproc: int, batch: int) -> Point:
    """The peak per rank of ``strategy`` on ``nproc`` ranks at ``batch`` samples per rank."""
    if strategy not in STRATEGIES:
        raise ValueError(f"no memory model for strategy {strategy}")
    k = nproc if _shards(strategy) else 1
    state = {"params": _div(i.params_bytes, k), "optimizer_state": _div(i.optimizer_bytes, k),
             "master_copies": _div(i.master_bytes, k),
             "ddp_buckets": i.grads_bytes if _buckets(strategy) else 0,
             "grads": _div(i.grads_bytes, k),
             "batch_inputs": round(i.input_per_sample_bytes * batch)}
    unit = gathered_bytes(i.largest_unit_bytes, i.second_unit_bytes, nproc) \
        if _shards(strategy) else 0
    act_ps, act_fixed = round(i.act_per_sample_bytes * batch), round(i.act_fixed_bytes)
    fb = unit + act_ps + act_fixed
    temps = round(i.optimizer_temp_bytes * i.run_shard / k)
    if fb >= temps:
        phase = PHASE_FB
        step = {"gathered_unit": unit, "activations_per_sample": act_ps,
                "activations_fixed": act_fixed, "optimizer_temporaries": 0}
    else:
        phase = PHASE_OPT
        step = {"gathered_unit": 0, "activations_per_sample": 0, "activations_fixed": 0,
                "optimizer_temporaries": temps}
    parts = {**state, **step}
    parts["allocator_margin"] = round(i.margin * sum(parts.values()))
    low = high = None
    if i.act_slope_change is not None:
        below, above = act_band(i, batch)
        if unit:
            below, above = _fsdp_band(i, below, above, nproc)
        held = sum(state.values())
        low = round((held + max(fb - below, temps)) * (1 + i.margin_low))
        high = round((held + max(fb + above, temps)) * (1 + i.margin_high))
    return Point(strategy, nproc, batch, parts, phase, low, high)


def _fsdp_band(i: Inputs, below: float, above: float, nproc: int) -> tuple[float, float]:
    """FSDP's gathered term 2U may be as little as U (the unit's gradients reduced before the
    step peaks) or, FSDP2's collectives running beside the step, as much as: the unit's
    parameters, its gradients and their copy into the reduce-scatter buffer (3U), the next
    unit prefetched and the previous one's reduce-scatter buffer still held (each at most
    the second largest, U2; not recorded: U), and the root, kept whole through backward, with
    its gradients (2R). On one rank the term U + U2 may be as little as the root alone (R,
    never resharded: the peak at the end of forward, every unit resharded, where the
    activations outweigh the units, as gpt_tiny's) or have the root beside both (R)."""
    u = i.largest_unit_bytes
    u2 = u if i.second_unit_bytes is None else i.second_unit_bytes
    r = i.root_unit_bytes
    if nproc == 1:
        return below + u + u2 - min(r, u + u2), above + r
    return below + u, above + u + 2 * u2 + 2 * r


def _div(n: int, k: int) -> int:
    return -(-n // k)  # a shard rounds up


def largest_batch(i: Inputs, strategy: str, nproc: int, device_bytes: int,
                  cap: int = 1 << 24, bound: str = "peak") -> int:
    """The largest batch per rank whose predicted peak (``bound``: ``peak``, or ``high``:
    its interval's upper end, ``low``: its lower end) fits in ``device_bytes``; 0 when not
    even one sample fits. Found by bisection (the peak and its bounds grow with the batch).
    A bound the inputs have no interval for is the peak."""

    def at(b: int) -> int:
        p = predict(i, strategy, nproc, b)
        got = p.high_bytes if bound == "high" else p.low_bytes if bound == "low" else None
        return p.peak_bytes if got is None else got

    if at(1) > device_bytes:
        return 0
    if i.act_per_sample_bytes + i.input_per_sample_bytes <= 0:
        return cap
    lo, hi = 1, cap
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if at(mid) <= device_bytes:
            lo = mid
        else:
            hi = mid - 1
    return lo


def measured_peak(f: MemoryFacts, params: int | None, grads: int | None,
                  optimizer: int | None, device_allocated: int | None) -> tuple[int | None, str]:
    """One rank's measured peak and how it was read. CUDA: the run's max_memory_allocated.
    CPU: the tensors counted live before the probe step (this rank's parameters and
    optimizer state, measure/held.py, and the batch) + the allocator's peak above them
    (the larger of forward/backward and the optimizer step on top of the gradients). DDP's
    gradient buckets are not reachable as tensors on the CPU: not in this figure."""
    if f.device == "cuda":
        if device_allocated is None:
            return None, "no CUDA allocator peak recorded"
        return device_allocated, "CUDA max_memory_allocated (the whole run)"
    fb, opt = f.fwd_bwd_peak_bytes or [], f.optimizer_peak_bytes or []
    if not fb or params is None:
        return None, f.reasons.get("fwd_bwd_peak_bytes", "no probe step recorded")
    base = params + (optimizer or 0) + (f.input_bytes or 0)
    step = max(fb[0], (grads or 0) + (opt[0] if opt else 0))
    return base + step, ("CPU: tensors live before the probe step (held parameters, "
                         "optimizer state, the batch) + the profiler's peak above them")


def cpu_tensor_peak(r: RunResult) -> int | None:
    """A CPU run's tensor bytes at the step's peak, as its probe step read them at the run's
    own batch (``measured_peak`` from its facts and held state); None on CUDA (the device's
    own peak is the figure there), without the probe, or where the probe's first batch is
    not the run's."""
    if str(r.env.get("cuda_available")).lower() == "true":
        return None
    f, sb = r.metrics.memory_facts, r.metrics.state_bytes
    if f is None or sb is None or not f.batch_sizes or f.batch_sizes[0] != r.batch.per_device:
        return None
    got, _ = measured_peak(f, sb.params_bytes, sb.grads_bytes, sb.optimizer_bytes, None)
    return got


def ratio(predicted: int, measured: int | None) -> float | None:
    if not measured or measured <= 0:
        return None
    r = predicted / measured
    return r if math.isfinite(r) else None
