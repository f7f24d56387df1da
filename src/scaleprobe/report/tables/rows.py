"""The report's derived rows, typed: one row of the batch table, of the scale table and of
the loader table, and the picks drawn from them.

A row is built from the typed records (``RunResult``) by one function each
(``batch.batch_table``, ``scale.scale_table``, ``workers.loader_table``) and read by the
tables, plots, rules and findings. They stay plain dicts at run time (the sweep's report
writes them to JSON as they are), but their keys are declared here and mypy checks every
read in ``report/`` (``make lint``): a misspelt key is an error, not a silent "not measured".
Keys a row gains after it is built (the growth against the row before it, the target's
figures) are ``NotRequired``.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from scaleprobe.core.claim import Claim
from scaleprobe.core.metrics import Interval
from scaleprobe.core.result_model import RunResult


class TargetColumns(TypedDict, total=False):
    """The time-to-target columns a batch or scale row carries where its runs had a target
    (``target.point_figures``)."""

    ttt_runs: int
    ttt_reached: int
    ttt_median_s: float | None
    ttt_min_s: float | None
    ttt_max_s: float | None
    samples_to_target_median: float | None


class TargetFields(TargetColumns):
    """A scale row's target columns (``target.target_fields``): against the baseline."""

    target_text: str
    ttt_speedup_interval: Interval | None
    ttt_speedup: NotRequired[float | None]
    samples_ratio: NotRequired[float | None]


class BatchRow(TargetColumns):
    """One batch size of one group of a batch sweep (``batch.batch_table``): each measured
    figure the median over the point's repeats."""

    group: str
    run: str
    point: dict[str, Any]
    batch_size: int | None
    devices: int | None
    status: str
    error: str | None
    peak_mem_bytes: float | None
    memory_kind: str
    mem_growth: float | None
    mem_interval: Interval | None
    peak_host_total_bytes: float | None
    epoch_time_s: float | None
    epoch_projected: bool
    epoch_growth: float | None
    epoch_interval: Interval | None
    samples_per_s: float | None
    achieved_flops_per_s: float | None
    mfu: float | None
    cpu_util_pct: float | None
    gpu_util_pct: float | None
    repeats: int
    record: RunResult
    b_noise: float | None
    # set by batch_table once the group is known
    epoch_shown_growth: NotRequired[float | None]  # the ratio of the epoch cells shown
    epoch_basis: NotRequired[str]
    epoch_samples: NotRequired[int | None]  # the samples every epoch is compared over
    epoch_kinds: NotRequired[set[str]]
    epoch_basis_mixed: NotRequired[bool]
    epoch_compared_s: NotRequired[float | None]
    # the most efficient pick only (recommend_batch)
    samples_per_s_per_gib: NotRequired[float | None]


class ScaleRow(TargetColumns):
    """One process count of a scale experiment (``scale.scale_table``), against its
    baseline."""

    experiment: str
    run: str
    record: RunResult
    nproc: int | None
    nodes: int
    base_nproc: int | None
    is_base: bool
    threads: int | None
    unlike: list[str]
    status: str
    error: str | None
    samples_per_s: float | None
    speedup: float | None  # the paired estimate over the repeats (the claim's)
    column_speedup: float | None  # the Samples/s shown / the baseline row's shown
    efficiency: float | None
    speedup_interval: Interval | None
    efficiency_interval: Interval | None
    repeats: int
    implausible: str | None
    verdict_ok: bool
    step_median_s: float | None
    comm_fraction: float | None
    data_wait_fraction: float | None
    lost: dict[str, float]
    claim: NotRequired[Claim]  # the speedup with its evidence (not on the baseline's row)
    line: NotRequired[str]
    # with a target, against the baseline (target.target_fields)
    target_text: NotRequired[str]
    ttt_speedup_interval: NotRequired[Interval | None]
    ttt_speedup: NotRequired[float | None]
    samples_ratio: NotRequired[float | None]


class LoaderRow(TypedDict):
    """One loader setting of a sweep over workers / prefetch / transform / loader
    (``workers.loader_table``)."""

    group: str
    run: str
    point: dict[str, Any]
    setting: str
    workers: int | None
    prefetch: Any
    transform: Any
    record: RunResult
    repeats: int
    loader: Any
    status: str
    data_wait_fraction: float | None
    data_s: float | None
    compute_s: float | None
    step_median_s: float | None
    samples_per_s: float | None
    cpu_util_pct: float | None


class ContentionCase(TypedDict):
    """Points that differ only in loader workers where more workers cut the data wait but
    grew the compute per step (``findings_exp.contention_cases``)."""

    label: str | None
    base: RunResult
    worst: RunResult
    growth: float
    interval: Interval
    group: list[RunResult]


# one step up in batch size within a group (``batch_rule._steps``): did it pay? ("from" is a
# keyword, hence the functional form)
BatchStep = TypedDict("BatchStep", {
    "group": str, "from": int | None, "to": int | None, "epoch_growth": float | None,
    "mem_growth": float | None, "epoch_interval": dict[str, Any] | None,
    "mem_interval": dict[str, Any] | None, "mem_growth_text": str, "pays": bool | None,
    "text": str})


class BatchPicks(TypedDict):
    """The batch rule (``batch_rule.recommend_batch``): the fastest and most efficient batch
    size (rows, or None when none finished), whether the intervals decided each, the steps
    up in batch size, the target's picks and the rule's text."""

    fastest: BatchRow | None
    most_efficient: BatchRow | None
    steps: list[BatchStep]
    text: str
    fastest_decided: NotRequired[bool]
    most_efficient_decided: NotRequired[bool]
    soonest: NotRequired[BatchRow | None]
    fewest_samples: NotRequired[BatchRow | None]


class WorkersPick(TypedDict, total=False):
    """The loader-workers rule (``workers.recommend_workers``): ``workers`` is None when
    nothing ran or the intervals did not decide; ``by_group`` holds one pick per
    transform when the sweep varied it."""

    workers: int | None
    prefetch: Any
    setting: str
    samples_per_s: float | None
    best_samples_per_s: float | None
    best_setting: str
    group: str
    interval: dict[str, Any] | None
    decided: bool
    text: str
    need: int | None
    ref: float
    compared: str
    unexplained: str
    alone: bool  # one setting of the group finished: nothing to compare
    under_load: bool  # a run of the settings compared was measured under load
    load_caveat: str | None  # the claim module's words for it; None when not under load
    by_group: dict[str, WorkersPick]


class TargetPicks(TypedDict):
    """With a target: the batch size that reached it soonest and the one that needed the
    fewest samples (None where the intervals did not decide), and the rule's lines
    (``batch_target.target_picks``)."""

    soonest: BatchRow | None
    fewest_samples: BatchRow | None
    lines: list[str]


# the memory/time rule's decided picks, as the critical-batch lines weigh them against
# the critical batch (``critical.group_lines``)
RulePicks = dict[str, BatchRow | None]


# a row the time-to-target columns are read from (``target.table_parts``)
TargetRow = BatchRow | ScaleRow
