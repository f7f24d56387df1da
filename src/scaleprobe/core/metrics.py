"""Every derived figure, defined once, and the intervals that verdicts are built on.

No torch, no I/O: pure functions over numbers. Terminal lines, sweep tables, the report,
``compare`` and ``predict`` read these figures from here; a figure computed anywhere else is a
bug.

Figures (units in the names), one function each: samples/s over the timed window and over the
median step, unique samples/s, compute time, speedup and efficiency, growth, co-location
slowdown, FLOPs per sample, achieved FLOP/s and MFU, epochs and samples at a step, and the
speedup in time to target.

The intervals over repeats, the repeats that would decide a verdict and the confidence they
are taken at are defined in core/intervals.py and read from here with the figures.
"""

from __future__ import annotations

from collections.abc import Mapping

# the figures and their intervals are read through this one module (``M.speedup``,
# ``M.ratio_interval``); the intervals are defined in core/intervals.py
from scaleprobe.core.intervals import (
    CONFIDENCE,
    INTERVAL_FIELDS,
    MAX_REPEATS_SUGGESTED,
    MEANINGFUL_SPAN,
    MIN_REPEATS_TO_DECIDE,
    SINGLE_REPEAT_NOISE_REL,
    TEXT_BOUND_MAX,
    TEXT_BOUND_MIN,
    Interval,
    compile_vs_eager,
    interval_of,
    mean_difference_interval,
    paired_difference_interval,
    projected,
    ratio_interval,
    repeats_to_decide,
    repeats_to_decide_paired,
    sample_sd,
    t_quantile,
    unpaired_ratio_interval,
)

__all__ = [
    "CONFIDENCE", "INTERVAL_FIELDS", "MAX_REPEATS_SUGGESTED", "MEANINGFUL_SPAN",
    "MIN_REPEATS_TO_DECIDE", "SINGLE_REPEAT_NOISE_REL", "TEXT_BOUND_MAX", "TEXT_BOUND_MIN",
    "Interval", "compile_vs_eager", "interval_of", "mean_difference_interval",
    "paired_difference_interval", "projected", "ratio_interval", "repeats_to_decide",
    "repeats_to_decide_paired", "sample_sd", "t_quantile", "unpaired_ratio_interval",
]

COMPUTE_PHASES = ("h2d", "forward", "backward", "optimizer")
# speedup above nproc x this is impossible without a measuring error (superlinear caches
# do not reach 10% on the workloads scaleprobe runs): marked "implausible"
PLAUSIBLE_SPEEDUP_FACTOR = 1.10


def _ratio(num: float | None, den: float | None) -> float | None:
    """``num / den``; None when either is missing or ``den`` is not positive."""
    return None if num is None or den is None or den <= 0 else num / den


def _product(a: float | None, b: float | None) -> float | None:
    """``a * b``; None when either is missing."""
    return None if a is None or b is None else a * b


def samples_per_s(samples: float | None, seconds: float | None) -> float | None:
    return _ratio(samples, seconds)


def tokens_per_s(sps: float | None, tokens_per_sample: int | None) -> float | None:
    """Tokens per second of a token task: samples/s x tokens per sample (``seq_len``)."""
    if sps is None or not tokens_per_sample:
        return None
    return sps * tokens_per_sample


def window_samples_per_s(samples_per_step: float | None, steps: int | None,
                         window_s: float | None) -> float | None:
    """Throughput: the samples of the timed steps over the timed window's wall clock (what a
    user's own counter reports: samples over time, stalls and epoch starts included)."""
    if not samples_per_step or not steps:
        return None
    return samples_per_s(samples_per_step * steps, window_s)


def step_samples_per_s(samples_per_step: float | None, step_s: float | None) -> float | None:
    """The typical step's rate: the samples of one step over the median step time (steady
    state, stalls left out); the breakdown's basis, never the headline throughput."""
    if not samples_per_step:
        return None
    return samples_per_s(samples_per_step, step_s)


def unique_samples_per_s(sps: float | None, unique_fraction: float | None) -> float | None:
    """Samples/s counting each sample once per epoch (the shard audit's unique fraction):
    what the model really learned from when ranks read the same data."""
    return _product(sps, unique_fraction)


def window_epoch_s(steps_per_epoch: float | None, global_batch: float | None,
                   samples_per_s: float | None) -> float | None:
    """An epoch on the timed window's basis: samples per epoch (steps per epoch x the global
    batch) / the window's samples/s. A table row that shows samples/s beside this epoch time
    multiplies out to its samples per epoch exactly (bug caught: 30.4 samples/s beside a 56.4 s
    epoch that needed 46.3 s, the epoch projected from the median step)."""
    if not steps_per_epoch or not global_batch or not samples_per_s:
        return None
    return steps_per_epoch * global_batch / samples_per_s


def joules_per_sample(watts: float | None, sps: float | None) -> float | None:
    """Energy per sample: the GPUs' mean draw over the timed window / samples per second."""
    return _ratio(watts, sps)


def joules_to_target(j_per_sample: float | None, sps: float | None,
                     time_to_target_s: float | None) -> float | None:
    """Energy to the target: the window's draw (joules per sample x samples per second) over
    the time to the target."""
    if j_per_sample is None or not sps or not time_to_target_s:
        return None
    return j_per_sample * sps * time_to_target_s


def compute_s(breakdown: Mapping[str, float | None] | None) -> float | None:
    """Seconds of one step spent computing: copy to the device, forward, backward, optimizer
    (not waiting for data, not exposed communication). None when no phase was measured."""
    if not breakdown:
        return None
    vals = [breakdown.get(p) for p in COMPUTE_PHASES]
    if all(v is None for v in vals):
        return None
    return sum(v for v in vals if v is not None)


def speedup(sps_n: float | None, sps_1: float | None) -> float | None:
    if not sps_n or not sps_1:
        return None
    return sps_n / sps_1


def ideal_speedup(n: int | None, base_n: int | None) -> float | None:
    """Perfect scaling from ``base_n`` processes to ``n``: N / B (N at a 1-process baseline)."""
    return n / base_n if n and base_n else None


def efficiency(speedup_x: float | None, n: float | None) -> float | None:
    """Speedup over its ideal ``n`` (the process count, or N / B against a B-process base)."""
    return _ratio(speedup_x, n)


def growth(new: float | None, old: float | None) -> float | None:
    if new is None or old is None or old == 0:
        return None
    return new / old - 1.0


def slowdown(alone_sps: float | None, together_sps: float | None) -> float | None:
    if not alone_sps or not together_sps:
        return None
    return alone_sps / together_sps


def flops_per_sample(flops_per_step: float | None, samples_per_step: int | None
                     ) -> float | None:
    if not flops_per_step or not samples_per_step:
        return None
    return flops_per_step / samples_per_step


def achieved_flops_per_s(flops_per_sample_: float | None, sps: float | None) -> float | None:
    """FLOP/s the run did: per-sample FLOPs x samples/s (right for ranks that do not move in
    lockstep too, like the asynchronous parameter server's workers)."""
    return _product(flops_per_sample_, sps)


def flops_per_s_of_steps(flops_per_step_: float | None, step_s: float | None
                         ) -> float | None:
    """FLOP/s over the median step, where the samples a step takes are unknown (a wrapped
    script without a DataLoader): every rank's FLOPs of one step over one step's time."""
    return _ratio(flops_per_step_, step_s)


def mfu(achieved: float | None, peak_per_device: float | None, devices: int | None
        ) -> float | None:
    """Model FLOPs utilisation: the share of the devices' peak the model's FLOPs used."""
    if achieved is None or not peak_per_device or not devices:
        return None
    return achieved / (peak_per_device * devices)


def data_share(train_samples: int | None, trainers: int | None) -> int | None:
    """The training samples each training rank's epoch holds (its sampler's share of the
    split, the remainder dropped), or None where the size is not known. A batch per rank
    above it has no full step in an epoch: a run stops before its first
    (``train/parts.no_full_batch``)."""
    if not train_samples or not trainers or trainers < 1:
        return None
    return train_samples // trainers


def over_share(batch: int, share: int | None) -> bool:
    """A batch per rank larger than its share of the data (``data_share``; unknown: not)."""
    return share is not None and batch > share


def epochs_of(step: int | None, steps_per_epoch: int | None) -> float | None:
    """Epochs a run had trained after ``step`` steps: 1.0 is one pass over its training split
    (the steps of a whole epoch, with the last partial batch dropped)."""
    return _ratio(step, steps_per_epoch)


def samples_of(step: int | None, global_batch: int | None) -> int | None:
    """Training samples every rank together had processed after ``step`` steps."""
    if step is None or not global_batch:
        return None
    return step * global_batch


def time_speedup(t_n: float | None, t_1: float | None) -> float | None:
    """How many times sooner N reached the target than 1 (time to target at 1 / at N)."""
    if not t_n or not t_1:
        return None
    return t_1 / t_n


def plausible_speedup(speedup_x: float | None, n: float | None) -> bool:
    """False when a speedup over ``n`` processes exceeds ``n`` x 1.1 (a measuring error:
    usually a noisy 1-process baseline)."""
    return speedup_x is None or not n or speedup_x <= n * PLAUSIBLE_SPEEDUP_FACTOR
