"""A run record's ``metrics`` block and its typed parts: step times, the phase breakdown,
peak memory, the state each rank holds, the peak an MFU is held against, memory passes and
the facts a memory prediction reads. Torch-free."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from scaleprobe.core import metrics as M
from scaleprobe.core.record import Record

BREAKDOWN_PHASES = ("data", "h2d", "forward", "backward", "optimizer", "comm")


@dataclass
class StepTime(Record):
    """Step-time statistics of one rank's timed steps (``measure.stats.summarize``), seconds."""

    median: float | None = None
    p95: float | None = None
    mean: float | None = None
    min: float | None = None
    max: float | None = None
    n: int | None = None
    rel_ci: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Breakdown(Record):
    """Seconds per phase of the median step (shares of the typical step laid over the
    median, so the phases add up to it); null phases were not measured."""

    data: float | None = None
    h2d: float | None = None
    forward: float | None = None
    backward: float | None = None
    optimizer: float | None = None
    comm: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def phases(self) -> dict[str, float | None]:
        return {p: getattr(self, p) for p in BREAKDOWN_PHASES}

    def total_s(self) -> float:
        return sum(v for v in self.phases().values() if v is not None)

    def compute_s(self) -> float | None:
        return M.compute_s(self.phases())

    def measured_total_s(self) -> float | None:
        """The phases' sum, None when no phase was measured (or they sum to 0)."""
        vals = [v for v in self.phases().values() if v is not None]
        total = sum(vals)
        return total if vals and total > 0 else None


@dataclass
class PeakMem(Record):
    host: int | None = None
    host_baseline: int | None = None
    # file-backed resident pages (library code, mapped files) the ranks first touched after
    # the baseline: not what the run's settings cost (measure/monitor.process_file_rss_bytes)
    host_file_growth: int | None = None
    host_net: int | None = None  # host - host_baseline - host_file_growth
    device_allocated: int | None = None
    device_reserved: int | None = None
    device_nvml: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def device_peak(self) -> int | None:
        """The framework's peak allocation, else reserved, else NVML's reading."""
        for v in (self.device_allocated, self.device_reserved, self.device_nvml):
            if v is not None:
                return v
        return None


@dataclass
class RankState(Record):
    """The training state one rank holds (measure/held.py: local shards under fsdp, full
    copies otherwise) and that rank's measured peak memory beside it, bytes."""

    rank: int | None = None
    params_bytes: int | None = None
    grads_bytes: int | None = None
    optimizer_bytes: int | None = None
    total_bytes: int | None = None
    host_peak_rss: int | None = None  # this process's peak resident memory
    device_allocated: int | None = None  # CUDA: max_memory_allocated
    device_reserved: int | None = None  # CUDA: max_memory_reserved
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class StateBytes(Record):
    """Parameters + gradients + optimizer state per rank: the largest rank's figures (``rank``)
    and every training rank's in ``by_rank``; ``read_at`` says when they were read."""

    params_bytes: int | None = None
    grads_bytes: int | None = None
    optimizer_bytes: int | None = None
    total_bytes: int | None = None
    rank: int | None = None
    by_rank: list[RankState] = field(default_factory=list)
    read_at: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Peak(Record):
    """The peak an MFU is held against (measure/flops.py): one device's dense FLOP/s for the
    run's dtype, from a data sheet or measured, and how many such devices the run trained on."""

    flops_per_s: float | None = None  # one device
    devices: int | None = None  # CUDA: distinct GPUs of the training ranks; CPU: hosts
    dtype: str | None = None  # fp32 | tf32 | bf16 | fp16
    device_name: str | None = None
    # "data sheet: ..." or "measured peak: ..." (a field of the record, not Record.source,
    # the folder a record was read from)
    source: str | None = None  # type: ignore[assignment]
    measured: bool | None = None
    under_load: bool | None = None  # measured while other processes took some of the cores
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class MemoryPass(Record):
    """How fast a one-rank run's process moved host memory (measure/memprobe.py): seconds per
    byte of a pass over touched memory (warm) and into a fresh allocation (fresh)."""

    bytes: int | None = None
    warm_s_per_byte: float | None = None
    fresh_s_per_byte: float | None = None
    threads: int | None = None
    method: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class MemoryFacts(Record):
    """What a memory prediction (predict/memmodel.py) reads from a run (measure/memstate.py):
    the model state as arithmetic inputs (numel global, not a shard's) and the allocator's
    peaks of one untimed step per batch size after the window, bytes above what was live
    before forward (``fwd_bwd_peak_bytes``) and after backward (``optimizer_peak_bytes``).
    A field not measured is null with its reason in ``reasons``."""

    param_count: int | None = None
    param_numel_by_dtype: dict[str, int] | None = None
    optimizer: str | None = None  # the optimizer's class name
    optimizer_states_per_param: int | None = None  # state tensors of a parameter's size
    optimizer_bytes_per_param: float | None = None  # their bytes per parameter element
    optimizer_scalar_bytes: int | None = None  # other state (AdamW's step), whole model
    optimizer_param_tensors: int | None = None
    master_bytes_per_param: float | None = None
    master_note: str | None = None
    largest_unit_bytes: int | None = None  # FSDP's rule: the largest unit's parameters
    second_unit_bytes: int | None = None  # and the second largest's (what FSDP prefetches)
    root_unit_bytes: int | None = None  # the root's own (what no unit holds)
    # every unit's parameter bytes in the rule's order, the root's last: the all-gathers and
    # reduce-scatters of an FSDP step, one per unit (predict's FSDP timeline)
    unit_bytes: list[int] | None = None
    # the model's buffers, bytes per dtype (measure/memstate.buffer_groups): DDP broadcasts
    # each group from rank 0 before every forward; [] none, null not recorded
    buffer_bytes: list[int] | None = None
    probe_s: float | None = None  # wall time of the probe steps (after the window)
    batch_sizes: list[int] | None = None  # per rank: the batch, then its first half
    fwd_bwd_peak_bytes: list[int] | None = None  # one per batch size
    optimizer_peak_bytes: list[int] | None = None
    input_bytes: int | None = None  # the full batch's input and target tensors
    # CUDA: max_memory_reserved / max_memory_allocated - 1 over the full batch's probe step
    probe_margin: float | None = None
    device: str | None = None  # cpu | cuda
    method: str | None = None
    # the strategy the run used and its world: the probe ran in each training rank
    strategy: str | None = None
    world: int | None = None
    reasons: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Metrics(Record):
    """A run's figures (units in the names; see the schema above). Task metrics
    (verification_accuracy, map50, ...) are kept in ``extra`` under their own names."""

    # throughput: samples over the timed window (stalls and epoch starts in it), summed over the
    # training ranks; the median step's rate beside it (the breakdown's basis)
    samples_per_s: float | None = None
    samples_per_s_by_rank: dict[str, float | None] | None = None
    samples_per_s_median_step: float | None = None
    tokens_per_s: float | None = None  # token tasks (lm): samples_per_s x batch.tokens_per_sample
    unique_samples_per_s: float | None = None
    step_time_s: StepTime | None = None
    step_time_rank: int | None = None
    breakdown_s: Breakdown = field(default_factory=Breakdown)
    data_wait_fraction: float | None = None
    comm_fraction: float | None = None
    epoch_time_s: float | None = None
    epoch_time_projected: bool | None = None
    epoch_times_s: list[float] | None = None
    steps_per_epoch: int | None = None
    # the training split's samples, all ranks together (a batch per rank above its share has
    # no full step in an epoch: predict --memory and plan say so)
    train_samples: int | None = None
    # the timed steps that took an epoch's first batch (the loader prefetches nothing across
    # an epoch boundary): how many, their median wait for it, the waits' share of the
    # window's data wait and of the timed window, and the median data wait of the other steps
    epoch_starts_timed: int | None = None
    epoch_start_data_s: float | None = None
    epoch_start_data_share: float | None = None
    epoch_start_window_share: float | None = None
    epoch_start_other_data_s: float | None = None
    steps_timed: int = 0
    steps_done: int | None = None
    # why the timed window ended: steps (--steps N), stable (the median's 95% CI within
    # --stable-rel-ci), max-steps, max-seconds (--steps auto's caps, the median not stable),
    # peer (another rank's), epochs, target, max-epochs, interrupted, script (wrap: the
    # script ended on its own), failed (a rank died or hung: the steps before it)
    stop_reason: str | None = None
    window_s: float | None = None
    # [start, end] of the timed window on the rank shown, wall clock (seconds since the epoch):
    # co-located jobs' windows are checked for overlap with it
    window_clock: list[float] | None = None
    peak_mem_bytes: PeakMem = field(default_factory=PeakMem)
    cpu_util_pct: float | None = None
    gpu_util_pct: float | None = None
    gpu_power_w: float | None = None
    # energy over the timed window (every GPU of the run's host): joules per sample and per
    # token (lm), from NVML's energy counter or the sampled power (energy_method); to a
    # target: that draw x the time to it
    joules_per_sample: float | None = None
    joules_per_token: float | None = None
    joules_to_target: float | None = None
    energy_method: str | None = None
    accuracy: float | None = None
    # lm: the training split's unigram entropy (nats/token): the context-free model's loss on
    # the training split, not the held-out figure to beat; the held-out loss, perplexity and
    # the context-free baseline on the same held-out tokens (baseline_loss, baseline_margin
    # and its interval) are task metrics (extra; tasks/lm.py)
    unigram_entropy_nats: float | None = None
    loss_first: float | None = None
    loss_last: float | None = None
    bad_samples_skipped: int = 0
    # minor page faults a timed step (the most of any training rank's process): memory the
    # step touched afresh, most often what glibc's allocator gave back and took again
    # (train.malloc)
    page_faults_per_step: float | None = None
    # CPU seconds gloo's socket threads used a timed step, on the cores the rank computes on
    # (the most of any training rank; dist.gloo_io): reading sockets, and polling one whose
    # receive is not yet posted
    gloo_io_cpu_per_step_s: float | None = None
    outside_cpu_s: float | None = None
    outside_cpu_cores: float | None = None
    outside_gpu_processes: int | None = None
    param_count: int | None = None
    lr_effective: float | None = None
    lr_warmup_steps: int | None = None  # --lr-scaling linear: steps of the linear warm-up
    flops_per_step: float | None = None  # the whole job's (every training rank's batch)
    flops_per_sample: float | None = None
    achieved_flops_per_s: float | None = None
    mfu: float | None = None  # achieved / (peak.flops_per_s x peak.devices)
    peak: Peak | None = None
    # parameters, gradients and optimizer state each rank holds (measure/held.py)
    state_bytes: StateBytes | None = None
    # torch.compile (measure/compiled.py): seconds spent compiling in all (warm-up, window and
    # after), frames dynamo compiled (recompiles included) and recompiles, the compilations
    # (and recompiles) inside the timed window and their seconds (the most of any rank), graph
    # breaks; null with the reason when nothing was compiled
    compile_time_s: float | None = None
    compiles: int | None = None
    recompiles: int | None = None
    compiles_in_window: int | None = None
    recompiles_in_window: int | None = None
    compile_in_window_s: float | None = None
    graph_breaks: int | None = None
    # one-rank runs: host memory passes after the window (the step model's copy costs)
    memory_pass: MemoryPass | None = None
    # what a memory prediction reads (measure/memstate.py): the first training rank's
    memory_facts: MemoryFacts | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    OPTIONAL: ClassVar[tuple[str, ...]] = ("memory_pass", "memory_facts")
