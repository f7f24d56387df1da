"""The typed result model: one dataclass per record kind, on exactly the JSON schema that
``scaleprobe.core.results`` documents (and re-exports these names from). Torch-free."""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from scaleprobe.core import metrics as M
from scaleprobe.core.record import TRANSIENT, Record, get
from scaleprobe.core.run_blocks import ConfigBlock, ConfigRead, RunEnv, ScriptRun

if TYPE_CHECKING:
    from scaleprobe.config.runconfig import RunConfig
else:  # the type is config/runconfig.py's, which this module cannot import (core/run_blocks.py)
    RunConfig = object

SCHEMA = 2
STATUSES = ("ok", "oom", "failed", "interrupted", "target_not_reached", "audit_failed")
# statuses whose figures are complete measurements (a target not reached ran to its cap)
MEASURED = ("ok", "target_not_reached")
# a record read without a status (written before status existed, or by hand): whether it
# finished is not known, so it is neither "ok" nor "failed"
UNKNOWN = "unknown"
UNKNOWN_TEXT = "unknown (older record without a status)"
BREAKDOWN_PHASES = ("data", "h2d", "forward", "backward", "optimizer", "comm")
BATCH_AXES = ("batch_size", "global_batch")
# each task's evaluation figure and how a table shows it: classification, face, detection, lm
TASK_METRICS = (("accuracy", "{:.3f}"), ("verification_accuracy", "verif. {:.3f}"),
                ("map50", "mAP50 {:.3f}"),
                ("loss", "loss {:.3f}"))  # lm: held-out nats per token (lower is better)


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


@dataclass
class TimeToTarget(Record):
    """Time to a target quality (``--target``; target.py): MLPerf Training's time to train.
    The ``*_to_target`` figures are null when the target was not reached."""

    metric: str | None = None
    target: float | None = None
    reached: bool | None = None
    time_to_target_s: float | None = None  # training wall clock, evaluation excluded
    eval_time_s: float | None = None  # every evaluation's time, reported beside it
    steps_to_target: int | None = None
    epochs_to_target: float | None = None
    samples_to_target: int | None = None  # every training rank's
    best_value: float | None = None
    best_at_s: float | None = None
    best_at_epoch: float | None = None
    best_at_samples: int | None = None
    evaluations: int | None = None
    eval_every_steps: int | None = None  # None: at the end of every epoch
    max_epochs: int | None = None
    rule: str | None = None
    curve: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class GnsPoint(Record):
    """B_noise over one block of consecutive timed steps (``gns.blocks``)."""

    step: int | None = None  # the block's first step (0 = the run's first step)
    steps: int | None = None
    samples: int | None = None  # global samples trained before the block's first step
    b_simple: float | None = None  # None: no positive |G|^2 estimate over the block
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Gns(Record):
    """The gradient noise scale (``scaleprobe/gns.py``; McCandlish et al. 2018): B_noise =
    tr(Sigma) / |G|^2 in samples, from the squared norms of a small and a big gradient per
    timed step."""

    b_simple: float | None = None  # samples; ratio of the means over the timed steps
    b_simple_lo: float | None = None  # 95% interval (``interval_method``); hi may be inf
    b_simple_hi: float | None = None
    b_noise_path: float | None = None  # samples; the S_min-weighted mean over ``series``
    grad_sq: float | None = None  # |G|^2 estimate, mean over the timed steps
    trace_sigma: float | None = None  # tr(Sigma) estimate (per sample), mean over the steps
    steps: int | None = None
    b_small: int | None = None  # samples behind each small gradient
    b_big: int | None = None  # samples behind the big one
    global_batch: int | None = None  # the run's samples per optimizer step
    method: str | None = None  # ddp_hook | micro_batches
    method_text: str | None = None
    smoothing: str | None = None
    interval_method: str | None = None
    series: list[GnsPoint] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class GnsSamples(Record):
    """One rank's squared gradient norms per timed step (``measure/gns_probe.py``); the
    run's ``Gns`` is made from every rank's (``gns.summarize``)."""

    method: str | None = None  # ddp_hook | micro_batches
    b_small: int | None = None  # samples behind each small gradient (this rank's)
    b_big: int | None = None  # samples behind the big gradient (every rank's, under DDP)
    first_step: int | None = None  # the step index of the first timed step
    small_sq: list[float] = field(default_factory=list)  # per step; mean over the smalls
    big_sq: list[float] = field(default_factory=list)
    reason: str | None = None  # why not measured (then the lists are empty)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Batch(Record):
    per_device: int | None = None
    per_process: int | None = None
    global_: int | None = None
    world_size: int | None = None
    training_ranks: int | None = None
    tokens_per_sample: int | None = None  # token tasks (lm): data.seq_len; absent for images
    extra: dict[str, Any] = field(default_factory=dict)

    OPTIONAL: ClassVar[tuple[str, ...]] = ("tokens_per_sample",)

    # "global" is a Python keyword: the field is global_, the JSON key "global"
    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        return {("global" if k == "global_" else k): v for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: Any) -> Batch:
        if isinstance(d, dict) and "global" in d:
            d = {("global_" if k == "global" else k): v for k, v in d.items()}
        return super().from_dict(d)


@dataclass
class RankSummary(Record):
    """One rank's own figures (``measure.aggregate.rank_summary``)."""

    rank: int | None = None
    host: str | None = None
    device: str | None = None
    step_time_s: StepTime | None = None
    breakdown_s: Breakdown = field(default_factory=Breakdown)
    steps_done: int | None = None
    steps_timed: int | None = None
    samples_per_s: float | None = None  # over the rank's timed window
    samples_per_s_median_step: float | None = None
    strategy_metrics: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Straggler(Record):
    slowest_rank: int | None = None
    slowest_vs_median: float | None = None
    steps_done: dict[str, int] | None = None
    line: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Audit(Record):
    """The shard audit (``measure.audit``): did every rank read its own samples?"""

    ok: bool | None = None
    duplicate_samples: int | None = None
    missing_samples: int | None = None
    same_order_across_epochs: bool | None = None
    unique_fraction: float | None = None
    detail: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class CommBucket(Record):
    """One DDP gradient bucket of a run (measure/comm/hook.py ``BucketLog``), in launch order: its
    bytes, when it became ready (median seconds after backward began, and as a fraction of
    the step's backward phase), its median all-reduce time, and over how many steps."""

    bytes: int | None = None
    ready_s: float | None = None
    allreduce_s: float | None = None
    steps: int | None = None
    ready_fraction: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    OPTIONAL: ClassVar[tuple[str, ...]] = ("ready_fraction",)


@dataclass
class Comm(Record):
    """Communication (docs/COMMUNICATION.md): exposed = transfer + sync overhead."""

    exposed_s: float | None = None
    exposed_fraction: float | None = None
    transfer_s: float | None = None
    sync_overhead_s: float | None = None
    transfer_hidden_s: float | None = None
    transfer_method: str | None = None
    sync_overhead_method: str | None = None
    wrapper_overhead_s: float | None = None
    transfer_standalone: dict[str, Any] | None = None
    measured_link: dict[str, Any] | None = None
    prediction: dict[str, Any] | None = None
    # the model for the measured link, when --link named another (a run on loopback is
    # compared only with the loopback prediction); absent otherwise
    prediction_measured_link: dict[str, Any] | None = None
    strategy_metrics: dict[str, Any] = field(default_factory=dict)
    # measured in the step (traits.comm_in_step; measure/comm/instep.py): the per-step figure's
    # {median_s, interval_s: [lo, hi], steps, resolved, method}; and the sync-minus-no_sync
    # calibration beside it as a cross-check with its own interval (never in the breakdown)
    exposed_per_step: dict[str, Any] | None = None
    cross_check: dict[str, Any] | None = None
    # fsdp: the collectives the step was blocked in ({all_gather, reduce_scatter} per step),
    # and why exposed_s is null where it is
    in_step: bool | None = None
    calls_per_step: dict[str, Any] | None = None
    exposed_reason: str | None = None
    # DDP (measure/comm/hook.py): the time at least one all-reduce was in flight, on the breakdown's
    # basis (in_flight_per_step: per timed step, summarised away once assembled); each
    # gradient bucket's bytes, median ready time after backward began and all-reduce time
    in_flight_s: float | None = None
    in_flight_method: str | None = None
    in_flight_per_step: list[float | None] | None = None
    buckets: list[CommBucket] | None = None
    # ddp's calibration (calibrate.py): medians of fwd+bwd with / without gradient sync, their
    # difference, the raw samples and how they were taken; absent where it did not run
    sync_step_s: float | None = None
    no_sync_step_s: float | None = None
    sync_cost_s: float | None = None
    samples: dict[str, Any] | None = None
    method: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    OPTIONAL: ClassVar[tuple[str, ...]] = ("sync_step_s", "no_sync_step_s", "sync_cost_s",
                                           "samples", "method", "prediction_measured_link",
                                           "in_step", "calls_per_step", "exposed_reason",
                                           "in_flight_s", "in_flight_method",
                                           "in_flight_per_step", "buckets")

    def dominant(self) -> str | None:
        """"transfer" or "sync_overhead": the larger part of the exposed communication; None
        when the split was not measured or nothing was exposed."""
        t, o = self.transfer_s, self.sync_overhead_s
        if t is None or o is None or t + o <= 0:
            return None
        return "transfer" if t >= o else "sync_overhead"


@dataclass
class Load(Record):
    """Was the run measured under load? (rule: core/thresholds.py ``under_load``)"""

    flag: bool | None = None
    reason: str | None = None
    outside_cpu_cores: float | None = None
    limit_cores: float | None = None
    machine_cores: int | None = None
    window_s: float | None = None
    gpu_processes: list[dict[str, Any]] | None = None
    # set where records are read for a report (report/reading/records.colocated_load), never written by
    # a run: the cores a co-located job's partners used themselves over its window, and which
    # partner jobs those were; the load judged is net of them
    colocated_cores: float | None = None
    colocated_jobs: list[str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    OPTIONAL: ClassVar[tuple[str, ...]] = ("colocated_cores", "colocated_jobs")


def num(v: Any) -> float | int | None:
    """``v`` when it is a finite number (not a bool), else None: for the JSON parts of a
    record that are not typed (a sweep's points, a colocate job, the environment)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return v if math.isfinite(v) else None


def dict_of(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else {}."""
    return value if isinstance(value, dict) else {}


def dicts(items: Any) -> list[dict[str, Any]]:
    """The JSON objects of a list (rows, jobs, ops), skipping anything else."""
    return [x for x in items if isinstance(x, dict)] if isinstance(items, list) else []


def axis_name(label: str) -> str:
    """An axis as reports name it: 'train.batch_size' -> 'batch_size'."""
    return str(label).split(".")[-1].replace("-", "_")


def point_key(pt: dict[str, Any]) -> str:
    return json.dumps(pt, sort_keys=True, default=str)


class InExperiment:
    """What a record says of the experiment it belongs to (runs are identified by experiment
    id + point + repeat, never by name)."""

    experiment: Experiment | None
    source: str

    @property
    def exp_id(self) -> str | None:
        v = self.experiment.id if self.experiment is not None else None
        return None if v is None or isinstance(v, (dict, list)) else str(v)

    @property
    def exp_kind(self) -> str | None:
        v = self.experiment.kind if self.experiment is not None else None
        return v if isinstance(v, str) else None

    @property
    def point(self) -> dict[str, Any]:
        """The experiment point with axis names normalised: 'train.batch_size' -> 'batch_size'."""
        raw = dict_of(self.experiment.point if self.experiment is not None else None)
        return {axis_name(k): v for k, v in raw.items()}

    @property
    def repeat(self) -> int | None:
        """The repeat index of an experiment point measured several times, else None."""
        v = num(self.experiment.repeat if self.experiment is not None else None)
        return int(v) if v is not None else None


@dataclass
class Experiment(Record):
    """Which experiment a run or record belongs to; runs are identified by id + point
    (+ repeat), never by name."""

    id: str | None = None
    kind: str | None = None
    point: dict[str, Any] | None = None
    repeat: int | None = None
    # how a point's process started: "fork" (from the preloaded server) or "exec" (a fresh
    # interpreter); its host memory total depends on it (experiments/procs.py)
    start: str | None = None
    # a point a sweep took from a run of another experiment (the same configuration,
    # measured once): that run's id (report/reading/records.by_experiment); never written by a run
    reused: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    # an experiment's own record has no point, repeat or start: left out, not written null
    OPTIONAL: ClassVar[tuple[str, ...]] = ("point", "repeat", "start", "reused")


@dataclass
class RunResult(InExperiment, Record):
    """One run's record (``kind == "run"``): result.json and its results.jsonl line."""

    schema: int = SCHEMA
    kind: str = "run"
    run_id: str = ""
    name: str = ""
    key: str = ""
    status: str = "failed"
    error: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    # the configuration it ran; None for a record without one
    config: RunConfig | None = None
    resolved: dict[str, Any] | None = None
    dataset_source: str | None = None
    input_mode: str | None = None
    env: RunEnv = field(default_factory=RunEnv)
    batch: Batch = field(default_factory=Batch)
    metrics: Metrics = field(default_factory=Metrics)
    null_reasons: dict[str, str] = field(default_factory=dict)
    ranks: list[RankSummary] = field(default_factory=list)
    straggler: Straggler | None = None
    audit: Audit | None = None
    comm: Comm | None = None
    load: Load | None = None
    invariants: list[dict[str, str]] | None = None
    experiment: Experiment | None = None
    target: TimeToTarget | None = None
    gns: Gns | None = None  # the gradient noise scale (--gns; on under DDP); absent when off
    paths: dict[str, Any] = field(default_factory=dict)
    # `scaleprobe wrap`: the user's script (target, exit_code, loader, stopped_after,
    # sampler_note); null for the built-in training loop
    script: ScriptRun | None = None
    # `--executor slurm`: the point's job ({job_id, state, nodes}, state as the scheduler ended it);
    # null for a point run here
    slurm: dict[str, Any] | None = None
    # true when an interrupted run kept the steps timed so far (the reason in
    # null_reasons.partial); absent otherwise
    partial: bool | None = None
    # `scaleprobe worker` under your own launcher: the launcher's run id; absent otherwise
    launcher_run_id: str | None = None
    # torch.compile's compilations (measure/compiled.py): {mode, method, events: [{kind,
    # compile_id, phase, duration_s, at_s, step, timed_step, recompile, reason}], graph_breaks,
    # graph_break_reasons}; null when nothing was compiled
    compile: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # in memory only, for a point of an experiment shown by its median repeat
    # (report/reading/repeats.group_repeats): every measured repeat of the point, in repeat order;
    # None for a run read on its own
    repeats: list[RunResult] | None = field(default=None, metadata=TRANSIENT, repr=False,
                                            compare=False)
    config_read: ConfigRead = field(default_factory=ConfigRead, metadata=TRANSIENT,
                                    repr=False, compare=False)

    OPTIONAL: ClassVar[tuple[str, ...]] = ("partial", "launcher_run_id", "gns")
    codec: ClassVar[ConfigBlock]  # installed by config/runconfig.py (core/run_blocks.py says why)

    @classmethod
    def from_dict(cls, d: Any) -> RunResult:
        """A run record; one without a readable ``status`` (an older or hand-made record)
        reads as ``"unknown"``, never as "failed": nothing says it failed."""
        if isinstance(d, cls):
            return d
        rec = super().from_dict({k: v for k, v in d.items() if k != "config"}
                                if isinstance(d, dict) else d)
        if isinstance(d.get("config"), dict) and d["config"]:  # codec: config/runconfig.py's
            rec.config_read = cls.codec.read(d["config"])
            rec.config = rec.config_read.typed
        if not isinstance(d.get("status"), str):
            rec.status = UNKNOWN
        return rec

    def to_dict(self) -> dict[str, Any]:
        """The record as written: the config as ``RunConfig.to_dict()`` (a record read back:
        as it was), an environment never read as ``{}``."""
        out = super().to_dict()
        out["config"] = copy.deepcopy(self.config_dict())
        if not self.env.collected():
            out["env"] = self.env.extra.copy()
        return out

    def cfg(self, dotted: str, default: Any = None) -> Any:
        """A configuration value as the record holds it: ``result.cfg("dist.strategy")``."""
        return get(self.config_dict(), dotted, default)

    def config_dict(self) -> dict[str, Any]:
        """The ``config`` block as the record holds it (flattened, compared, printed back as
        options); ``{}`` for a record without one."""
        read = self.config_read
        if read.raw is not None and self.config is read.typed:
            return read.raw
        return self.config.to_dict() if self.config is not None else {}

    def cfg_number(self, dotted: str) -> float | int | None:
        return num(self.cfg(dotted))

    def env_number(self, key: str) -> float | int | None:
        e = self.env
        return num(getattr(e, key) if e.declares(key) else e.extra.get(key))

    # ---- what reports ask of a run ---------------------------------------------------------
    @property
    def label(self) -> str:
        return str(self.name or self.run_id or "?")

    @property
    def identity(self) -> str:
        """What identifies a run: folder, experiment id, point key and repeat index; a run of
        no experiment (or no point), its run id. Never the display name (every scale point
        is "nproc=2")."""
        if self.exp_id is None or not self.point:
            return json.dumps([self.source, self.exp_id, self.run_id], default=str)
        return json.dumps([self.source, self.exp_id, point_key(self.point), self.repeat],
                          default=str)

    @property
    def samples_per_epoch(self) -> int | None:
        """Steps per epoch x the global batch (every rank drops its last partial batch)."""
        spe, g = self.metrics.steps_per_epoch, self.batch.global_
        return spe * g if spe and g else None

    @property
    def window_epoch_s(self) -> float | None:
        """The epoch on the timed window's basis (``metrics.window_epoch_s``)."""
        return M.window_epoch_s(self.metrics.steps_per_epoch, self.batch.global_,
                                self.metrics.samples_per_s)

    def shown_epoch(self) -> tuple[float | None, bool]:
        """(the epoch time a table shows beside this run's samples/s, projected?): on the
        timed window's basis where the samples per epoch are known, so that samples/s x
        epoch time = samples per epoch; else the record's own (measured, or projected from
        the median step)."""
        w = self.window_epoch_s
        if w is not None:
            return w, True
        return self.metrics.epoch_time_s, bool(self.metrics.epoch_time_projected)

    def measured_epoch_s(self) -> float | None:
        """The epoch time measured over whole epochs (None where it was projected)."""
        m = self.metrics
        return m.epoch_time_s if m.epoch_time_projected is False else None

    @property
    def step_median_s(self) -> float | None:
        st = self.metrics.step_time_s
        return st.median if st is not None else None

    @property
    def world_size(self) -> int | None:
        for v in (self.batch.world_size, self.env.world_size):
            if v:
                return int(v)
        nproc, nnodes = self.cfg_number("dist.nproc"), self.cfg_number("dist.nnodes")
        return int(nproc) * int(nnodes or 1) if nproc else None

    @property
    def batch_size(self) -> int | None:
        """The batch size a sweep varied: the point's value, else the per-device batch."""
        pt = self.point
        for k in BATCH_AXES:
            if num(pt.get(k)):
                return int(pt[k])
        for v in (self.batch.per_device, self.cfg_number("train.batch_size")):
            if v:
                return int(v)
        return None

    @property
    def loader_workers(self) -> int | None:
        """Loader worker processes actually used: 0 for the naive (in-process) loader."""
        if self.cfg("data.loader") == "naive":
            return 0
        w = num(self.point.get("workers", self.cfg("data.workers")))
        return int(w) if w is not None else None

    @property
    def is_synthetic(self) -> bool:
        return str(self.cfg("data.dataset") or "").startswith("synthetic")

    @property
    def status_text(self) -> str:
        st = self.status or UNKNOWN
        if st == UNKNOWN:
            return UNKNOWN_TEXT
        if st == "oom":
            return "out of memory"
        if st == "failed":
            return f"failed: {self.error}" if self.error else "failed"
        if st == "target_not_reached":
            return "target not reached"
        if st == "audit_failed":
            return "shard audit failed"
        return str(st)

    def null_reason(self, key: str) -> str | None:
        why = self.null_reasons.get(key) or self.null_reasons.get(f"metrics.{key}")
        return str(why) if why else None

    @property
    def gpu_total_bytes(self) -> int | None:
        totals = [num(g.get("memory_total_bytes")) for g in dicts(self.env.gpus)]
        known = [float(t) for t in totals if t]
        return int(min(known)) if known else None

    def rank_rates(self) -> dict[str, float]:
        """Each training rank's samples/s, whose sum is the headline samples/s; {} for a
        record without them."""
        d = self.metrics.samples_per_s_by_rank or {}
        return {str(k): float(x) for k, v in d.items() if (x := num(v)) is not None}

    def rate_definition(self) -> str | None:
        """'sum of 2 workers' rates (12.4, 20.3); step times are rank 1's' for a run with
        several training ranks (workers when a rank serves instead), else None."""
        rates = self.rank_rates()
        if len(rates) < 2:
            return None
        b = self.batch
        serves = (b.training_ranks is not None and b.world_size is not None
                  and b.training_ranks < b.world_size)
        who = "workers" if serves else "ranks"
        each = ", ".join(f"{v:.0f}" if v >= 100 else f"{v:.1f}" for v in rates.values())
        text = f"sum of {len(rates)} {who}' rates ({each})"
        rank = self.metrics.step_time_rank
        return text + (f"; step times are rank {rank}'s" if rank is not None else "")

    def task_metric(self) -> tuple[str, float] | None:
        """(name, value) of the run's evaluation figure, or None when it was not evaluated."""
        for key, _ in TASK_METRICS:
            v = num(getattr(self.metrics, key) if self.metrics.declares(key)
                    else self.metrics.extra.get(key))
            if v is not None:
                return key, float(v)
        return None

    def task_metric_text(self, missing: str = "n/a") -> str:
        found = self.task_metric()
        if found is None:
            return missing
        return dict(TASK_METRICS)[found[0]].format(found[1])


@dataclass
class RankInfo(Record):
    """What a rank resolved while building its model and data."""

    num_classes: int | None = None
    image_size: int | None = None
    dataset_source: str | None = None
    train_samples: int = 0
    param_count: int | None = None
    per_process_batch: int | None = None
    lr_effective: float | None = None
    lr_warmup_steps: int | None = None
    input_mode: str | None = None  # "device-resident" (synthetic) | "loader"
    # token data (lm): tokens per sample, the sequence length, the vocabulary, the training
    # split's unigram entropy in nats per token (data/token_windows.py); null for images
    tokens_per_sample: int | None = None
    seq_len: int | None = None
    vocab_size: int | None = None
    unigram_entropy_nats: float | None = None
    model_shape: dict[str, int] | None = None  # GPT models: layers, width, heads, context
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class RankMem(Record):
    host_peak_rss: int | None = None
    host_baseline_rss: int | None = None
    host_file_growth: int | None = None  # RssFile at the peak reading less at the baseline
    device_allocated: int | None = None
    device_reserved: int | None = None
    # the training state this rank holds (measure/held.py): local shards under fsdp
    params_bytes: int | None = None
    grads_bytes: int | None = None
    optimizer_bytes: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class RankRecord(Record):
    """What one rank returns after training (``engine``): its raw step and phase times,
    the sample indices it read, memory, calibration. ``assemble.build_result`` turns the
    ranks' records and the monitor's figures into a ``RunResult``."""

    rank: int = 0
    is_server: bool = False
    host: str | None = None
    device: str | None = None
    threads: int | None = None
    steps_done: int = 0
    steps_timed: int = 0
    step_times_s: list[float] = field(default_factory=list)
    phase_times_s: dict[str, list[float]] = field(default_factory=dict)
    # phases this rank could not see ({phase: why}): null in the breakdown, with the reason
    phases_unseen: dict[str, str] = field(default_factory=dict)
    window_s: float | None = None
    clock_window: list[float | None] | tuple[float | None, float | None] | None = None
    epochs_complete: int = 0
    epoch_wall_s: list[float] = field(default_factory=list)
    # positions in step_times_s of the timed steps that took an epoch's first batch, and
    # (wrap) the training loader's own wait for each of those batches
    epoch_start_steps: list[int] = field(default_factory=list)
    epoch_start_wait_s: list[float] = field(default_factory=list)
    samples_per_step: int = 0
    towers: int = 1
    indices: list[list[int]] = field(default_factory=list)
    loss_first: float | None = None
    loss_last: float | None = None
    loss_finite: bool = True
    bad_samples: int = 0
    comm: dict[str, Any] | None = None
    eval: dict[str, Any] | None = None
    mem: RankMem = field(default_factory=RankMem)
    info: RankInfo = field(default_factory=RankInfo)
    strategy_metrics: dict[str, Any] = field(default_factory=dict)
    observed: dict[str, Any] | None = None
    # measure/flops.py: {flops_per_step (this rank's batch), method, reason, peak, peak_reason}
    flops: dict[str, Any] | None = None
    # --target, the evaluating rank only: target.TargetWatch.record()
    target: dict[str, Any] | None = None
    # the signal this rank stopped on ("peer": another rank was asked to stop); None: it ran
    # to its end
    interrupted: str | None = None
    # measure/compiled.CompileWatch.record(): this rank's compilations and where they fell
    compile: dict[str, Any] | None = None
    gns: GnsSamples | None = None  # squared gradient norms per timed step (--gns)
    # one process: measure/memprobe.py after the window; None elsewhere
    memory_pass: dict[str, Any] | None = None
    # measure/memstate.py after the window: model state facts and the allocator's step peaks
    memory_facts: MemoryFacts | None = None
    # why its timed window ended (train/stopping.py: steps, stable, max-steps, max-seconds,
    # peer, epochs, target, max-epochs, interrupted; wrap: steps, script); None: not known
    stop_reason: str | None = None
    # wrap: False when the script built no process group and no DDP model (nothing it ran
    # could communicate); None where not known (the built-in loop knows its strategy)
    communicates: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    OPTIONAL: ClassVar[tuple[str, ...]] = ("gns", "memory_facts")
