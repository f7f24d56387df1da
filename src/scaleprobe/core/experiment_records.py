"""The experiments' own records, beside their points' run records: a sweep's (or scale's),
a co-location's, a parity check's and a collectives benchmark's; ``typed`` reads any record
by its ``kind``. On the JSON schema of docs/RESULTS.md; the run's record
and its parts are ``core/result_model.py``. Torch-free."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from scaleprobe.core.record import Record
from scaleprobe.core.result_model import SCHEMA, Experiment, InExperiment, RunResult


@dataclass
class SkippedPoint(Record):
    """A point a sweep did not run, and why: a larger batch of a group whose smaller batch
    already ran out of memory (its status then "oom")."""

    point: dict[str, Any] = field(default_factory=dict)  # axis -> value, as Experiment.point
    status: str = "oom"
    reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class SweepRecord(InExperiment, Record):
    """A sweep's (or scale's) own record, beside its points' run records."""

    schema: int = SCHEMA
    kind: str = "sweep"
    experiment: Experiment | None = None
    axes: dict[str, Any] | None = None
    points: list[dict[str, Any]] | None = None
    skipped: list[SkippedPoint] = field(default_factory=list)
    searches: list[dict[str, Any]] = field(default_factory=list)
    dropped: list[Any] | None = None
    repeats: int | None = None
    points_run: int | None = None
    recommendation: Any = None
    finished_at: str | None = None
    spec_path: str | None = None  # the spec file it ran from (absolute); None: a dict spec
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ColocateRecord(InExperiment, Record):
    """A colocate experiment's record: each job alone and together (interleaved repeats),
    its slowdown with an interval, the total throughput and the verdict."""

    schema: int = SCHEMA
    kind: str = "colocate"
    experiment: Experiment | None = None
    placement: str | None = None
    placement_note: str | None = None
    spec_path: str | None = None  # the spec file it ran from (absolute); None: a dict spec
    cpu_sets: list[Any] | None = None
    repeats: int | None = None
    jobs: list[dict[str, Any]] = field(default_factory=list)
    total_samples_per_s_alone_sum: float | None = None
    total_samples_per_s_together: float | None = None
    total_throughput_interval: dict[str, Any] | None = None
    cpu_util_pct_together: float | None = None
    gpu_util_pct_together: float | None = None
    cpu_util_pct_together_repeats: list[float | None] | None = None
    gpu_util_pct_together_repeats: list[float | None] | None = None
    overlap_s: float | None = None
    overlap_s_repeats: list[float | None] | None = None
    # per repeat, the smallest share of a job's own timed window during which every job's
    # window was open (None: a job has no window clock, or fixed steps); a job below
    # MIN_WINDOW_OVERLAP in a repeat is listed in repeats_left_out {repeat, job, window_share}
    window_overlap_repeats: list[float | None] | None = None
    repeats_left_out: list[dict[str, Any]] | None = None
    verdict: str | None = None
    evidence: str | None = None
    throughput: str | None = None
    run_ids: dict[str, list[str]] | None = None
    finished_at: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ParityRecord(InExperiment, Record):
    """An accuracy-parity experiment's record: 1 process vs N at the same global batch,
    over repeats with their own seeds; the tolerance is the user's (``--parity-tolerance``),
    never derived from the seed-to-seed spread, which widens the interval instead."""

    schema: int = SCHEMA
    kind: str = "parity"
    experiment: Experiment | None = None
    nproc: int | None = None
    global_batch: int | None = None
    repeats: int | None = None
    seeds: list[Any] | None = None
    samples_seen: list[int | None] | None = None
    samples_seen_repeats: list[Any] | None = None
    accuracies_1: list[float | None] | None = None
    accuracies_n: list[float | None] | None = None
    accuracy_1: float | None = None
    accuracy_n: float | None = None
    difference: float | None = None
    difference_interval: dict[str, Any] | None = None
    seed_sd: float | None = None
    tolerance: float | None = None
    tolerance_rule: str | None = None
    verdict: str | None = None
    verdict_text: str | None = None
    within_tolerance: bool | None = None
    runs: list[str | None] | None = None
    status: str | None = None
    # the seeds the difference and both means stand on (``pair_seeds``), and the others with
    # why: [{"seed", "repeat", "why"}]
    pairs: int | None = None
    paired_seeds: list[Any] | None = None
    unpaired: list[dict[str, Any]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def pair_seeds(acc_1: Sequence[float | None], acc_n: Sequence[float | None],
               samples: Sequence[Sequence[int | None] | None], many: str,
               missing: Sequence[tuple[str, str]] = ()
               ) -> tuple[list[int], list[tuple[int, str]]]:
    """Parity's pairs: the repeats (seeds) whose two runs are compared, an accuracy on both
    sides after the same samples (``samples[i]``: [1 process, N]; None: not recorded, taken
    as alike), and every other repeat with why it has no partner. The difference, both mean
    accuracies and the claim's sources all stand on the first; the run (experiments/parity)
    and the report (from a record) read them here. ``many``: how the N side is named
    ("2 processes"); ``missing``: per repeat, what a missing accuracy on each side is called
    ("failed"), where the runs are at hand."""
    paired: list[int] = []
    left: list[tuple[int, str]] = []
    for i, (x, y) in enumerate(zip(acc_1, acc_n, strict=True)):
        seen = samples[i] if i < len(samples) else None
        why = missing[i] if i < len(missing) else ("", "")
        gone = [f"{side} ({w})" if w else side
                for side, v, w in (("1 process", x, why[0]), (many, y, why[1])) if v is None]
        if gone:
            left.append((i, "no accuracy on " + " and ".join(gone)))
        elif seen is not None and (len(seen) != 2 or seen[0] is None or seen[0] != seen[1]):
            left.append((i, "samples seen differ or unknown"))
        else:
            paired.append(i)
    return paired, left


@dataclass
class CommBenchRecord(InExperiment, Record):
    """``scaleprobe comm``'s record: collectives timed per size on this host's (or these
    hosts') process group, and the alpha-beta fit per operation (predict/fit.py)."""

    schema: int = SCHEMA
    kind: str = "comm"
    experiment: Experiment | None = None
    created_at: str | None = None
    env: dict[str, Any] = field(default_factory=dict)
    backend: str | None = None
    world_size: int | None = None
    nproc: int | None = None
    nnodes: int | None = None
    settings: dict[str, Any] | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)  # one per (op, size)
    fit: dict[str, Any] = field(default_factory=dict)  # op -> {alpha_s, beta_s_per_byte, ...}
    # what processes outside the benchmark used while it measured (measure/outside.py's load
    # block: flag, reason, outside_cpu_cores, ...); None: not read (older records)
    load: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


RECORD_TYPES: dict[str, type[Record]] = {"run": RunResult, "sweep": SweepRecord,
                                         "colocate": ColocateRecord, "parity": ParityRecord,
                                         "comm": CommBenchRecord}


def typed(rec: dict[str, Any]) -> Record:
    """A record read from a results file as its dataclass (by ``kind``); an unknown kind is
    kept as a plain ``Other`` record, never dropped."""
    cls = RECORD_TYPES.get(rec.get("kind"), Other)  # type: ignore[arg-type]
    return cls.from_dict(rec)


@dataclass
class Other(Record):
    kind: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
