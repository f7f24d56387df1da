"""What one rank hands to the run driver after training (``RankRecord``) and its typed
parts; ``run/assemble.build_result`` turns the ranks' records into a ``RunResult``
(``core/result_model.py`` re-exports them). Torch-free."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from scaleprobe.core.record import Record
from scaleprobe.core.run_metrics import MemoryFacts
from scaleprobe.core.run_parts import GnsSamples


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
