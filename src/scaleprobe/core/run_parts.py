"""A run record's other blocks, beside its metrics: time to target, the gradient noise scale,
the batch, each rank's summary, the straggler, the shard audit, communication and load
(``RunResult`` in ``core/result_model.py`` holds them). Torch-free."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from scaleprobe.core.record import Record
from scaleprobe.core.run_metrics import Breakdown, StepTime


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
    # the evaluation before the one that reached it (0: that was the first): the target was
    # crossed after it, so the time to it lies in [time_to_target_lo_s, time_to_target_s]
    steps_to_target_lo: int | None = None
    time_to_target_lo_s: float | None = None
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
    # the copies of the model kept between evaluations (docs/TIME_TO_TARGET.md, "Looking
    # back"): at most ``copies`` per bracket, ``copies_every`` steps apart; of the hit's
    # bracket's ``copies_looked_at``, ``looked_back`` were evaluated after the hit (curve
    # points with ``looked_back`` 1); ``copies_reason``: why none were kept
    copies: int | None = None
    copies_every: int | None = None
    copies_looked_at: int | None = None
    looked_back: int | None = None
    copies_reason: str | None = None
    copies_s: float | None = None  # keeping them, off the training clock like evaluations
    copies_stopped: str | None = None  # why the look back ended before the first hit
    curve: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    OPTIONAL: ClassVar[tuple[str, ...]] = ("copies", "copies_every", "copies_looked_at",
                                           "looked_back", "copies_reason", "copies_s",
                                           "copies_stopped")


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
    # the seconds blocked in each kind (median over the timed steps), and why exposed_s is
    # null where it is
    in_step: bool | None = None
    calls_per_step: dict[str, Any] | None = None
    seconds_per_step: dict[str, Any] | None = None
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
                                           "in_step", "calls_per_step", "seconds_per_step",
                                           "exposed_reason",
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
    # set where records are read (core/machine_load.colocated_load), never written by
    # a run: the cores a co-located job's partners used themselves over its window, and which
    # partner jobs those were; the load judged is net of them
    colocated_cores: float | None = None
    colocated_jobs: list[str] | None = None
    # written by a run started together with others for one measurement (plan --verify's
    # one-rank copies; measure/outside.py): how many such runs were left out of
    # outside_cpu_cores, and the cores they used over its window
    companion_runs: int | None = None
    companion_cpu_cores: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    OPTIONAL: ClassVar[tuple[str, ...]] = ("colocated_cores", "colocated_jobs", "companion_runs",
                                           "companion_cpu_cores")
