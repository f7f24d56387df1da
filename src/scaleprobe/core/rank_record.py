"""What one rank hands to the run driver after training (``RankRecord``) and its typed
parts; ``run/assemble.build_result`` turns the ranks' records into a ``RunResult``. Torch-free."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from scaleprobe.core.record import Record
from scaleprobe.core.run_metrics import MemoryFacts, MemoryPass, Peak
from scaleprobe.core.run_parts import Comm, GnsSamples

# a task's evaluation figures under their own names (tasks/: accuracy, map50, loss,
# eval_samples, ...); the run's metrics block takes them as they are
EvalFigures = dict[str, float | int | str | None]


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
class StandaloneTransfer(Record):
    """The network part of one synchronisation, timed after training
    (train/calibrate.measure_transfer): the strategy's own collective for the bytes one
    synchronisation moves, each time the slowest rank's; per step, divided by the steps
    between synchronisations. The run's ``comm.transfer_standalone`` is this, as written."""

    op: str | None = None
    bytes: int | None = None
    times_s: list[float] = field(default_factory=list)
    median_s: float | None = None
    every: int | None = None  # steps between synchronisations
    per_step_s: float | None = None
    method: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class RankComm(Comm):
    """What a rank measured of its communication (its strategy's ``comm_record``; wrap: DDP's
    comm hook), on the run's ``Comm`` fields, plus the standalone collective its run's
    transfer time is split with (``train/calibrate.measure_transfer``). ``assemble`` makes
    the run's ``Comm`` from it."""

    transfer: StandaloneTransfer | None = None  # absent where none was timed
    models_timed: int | None = None  # wrap: DDP models its comm hook timed
    transfer_reason: str | None = None  # why there is none (wrap: no standalone collective)

    OPTIONAL: ClassVar[tuple[str, ...]] = (*Comm.OPTIONAL, "transfer", "models_timed",
                                           "transfer_reason")

    def run_part(self) -> Comm:
        """The run's ``Comm`` record: every field but the rank's own (the standalone
        collective is the run's ``transfer_standalone`` once the exposed time is split)."""
        d = self.to_dict()
        d.pop("transfer", None)
        return Comm.from_dict(d)


@dataclass
class RankFlops(Record):
    """This rank's FLOPs of one step (measure/flops.py; wrap: its hooks) and the peak of the
    device it ran on, with why either is missing."""

    flops_per_step: float | None = None  # this rank's batch
    method: str | None = None
    reason: str | None = None  # why not counted
    peak: Peak | None = None  # one device's; ``devices`` is the run's, set in assemble
    peak_reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class EagerPasses(Record):
    """--compile: the same forward + backward run uncompiled after the window
    (train/eager.py), seconds per pass, each after a compiled pass (``compiled_fwd_bwd_s``,
    the same index: a pair); empty with the reason where not measured."""

    fwd_bwd_s: list[float] = field(default_factory=list)
    compiled_fwd_bwd_s: list[float] = field(default_factory=list)
    reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class CompileEvent(Record):
    """One compilation (measure/compiled.classify): its kind (dynamo, backward, cudagraph,
    autotune; compile when torch named none), where it fell against the timed window
    (warm-up, window, after), its seconds, its start from the window's start, the step it
    started in (and counted from the first timed step), and a recompile's reason. The
    result's ``compile.events`` are these, as written."""

    kind: str | None = None
    compile_id: str | None = None
    phase: str | None = None
    duration_s: float | None = None
    at_s: float | None = None
    step: int | None = None
    timed_step: int | None = None
    recompile: bool | None = None  # None: not told (no compile id)
    reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class GraphBreak(Record):
    """A reason dynamo broke a graph, and how many times it did."""

    reason: str | None = None
    count: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class RankCompile(Record):
    """This rank's torch.compile compilations (measure/compiled.CompileWatch.record): each
    event with where it fell against the timed window, graph breaks; ``reason`` where they
    could not be watched."""

    method: str | None = None
    reason: str | None = None
    events: list[CompileEvent] = field(default_factory=list)
    graph_breaks: int | None = None
    graph_break_reasons: list[GraphBreak] | None = None  # the five most frequent
    cleared: bool | None = None  # the script reset torch's compile callbacks
    eager: EagerPasses | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    OPTIONAL: ClassVar[tuple[str, ...]] = ("graph_breaks", "graph_break_reasons", "cleared",
                                           "eager")


@dataclass
class TargetPoint(Record):
    """One evaluation toward --target: the step after which it ran, the training wall clock
    then (evaluations excluded), its own seconds and the value it measured."""

    step: int | None = None
    train_wall_s: float | None = None
    eval_s: float | None = None
    value: float | None = None
    # a copy of the model kept at ``step``, evaluated after the target was reached
    looked_back: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    OPTIONAL: ClassVar[tuple[str, ...]] = ("looked_back",)


@dataclass
class RankTarget(Record):
    """--target, the evaluating rank's evaluations (features/target.TargetWatch.record);
    ``features/target.summarize`` makes the run's ``TimeToTarget`` from it."""

    metric: str | None = None
    value: float | None = None  # the target
    eval_every: int | None = None  # steps; None: at each epoch's end
    points: list[TargetPoint] = field(default_factory=list)
    steps_per_epoch: int | None = None  # the loader's own count
    eval_time_s: float | None = None  # every evaluation's seconds
    # the model copies kept between evaluations to narrow the hit's bracket afterwards
    copies: int | None = None  # at most this many between two evaluations (0: none)
    copies_every: int | None = None  # steps between two copies
    copies_looked_at: int | None = None  # the copies between the hit and the one before
    copies_reason: str | None = None  # why none were kept
    copies_s: float | None = None  # keeping them (off the training clock)
    copies_stopped: str | None = None  # why the look back ended before the first hit
    extra: dict[str, Any] = field(default_factory=dict)

    OPTIONAL: ClassVar[tuple[str, ...]] = ("copies", "copies_every", "copies_looked_at",
                                           "copies_reason", "copies_s", "copies_stopped")


@dataclass
class RankObserved(Record):
    """The files this rank's observers wrote (measure/observers.py): they become the run's
    ``paths``. Each is absent where its observer was off."""

    tensorboard: str | None = None  # the summaries' folder (the progress rank only)
    traces: list[str] | None = None  # profiler trace files, one per capture
    top_ops: list[dict[str, Any]] | None = None  # the first capture's costliest operators
    extra: dict[str, Any] = field(default_factory=dict)

    OPTIONAL: ClassVar[tuple[str, ...]] = ("tensorboard", "traces", "top_ops")


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
    # the process's minor page faults over the timed window (all its threads; None: not
    # counted, e.g. a record from before they were)
    page_faults: int | None = None
    # the CPU time gloo's socket threads used over the timed window (None: the rank has none,
    # or a record from before it was read)
    gloo_io_cpu_s: float | None = None
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
    comm: RankComm | None = None
    eval: EvalFigures | None = None
    mem: RankMem = field(default_factory=RankMem)
    info: RankInfo = field(default_factory=RankInfo)
    strategy_metrics: dict[str, Any] = field(default_factory=dict)
    observed: RankObserved | None = None
    flops: RankFlops | None = None
    target: RankTarget | None = None  # --target, the evaluating rank only
    # the signal this rank stopped on ("peer": another rank was asked to stop); None: it ran
    # to its end
    interrupted: str | None = None
    # measure/compiled.CompileWatch.record(): this rank's compilations and where they fell
    compile: RankCompile | None = None
    gns: GnsSamples | None = None  # squared gradient norms per timed step (--gns)
    # one process: measure/memprobe.py after the window; None elsewhere
    memory_pass: MemoryPass | None = None
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
