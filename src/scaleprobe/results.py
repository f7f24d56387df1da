"""The result schema, its typed model and its files. No torch import: reports run anywhere.

Every record below has a dataclass at the end of this module (``RunResult``,
``SweepRecord``, ``ColocateRecord``, ``ParityRecord``; ``typed(rec)`` picks one by ``kind``)
that reads and writes exactly this JSON; ``assemble.build_result`` makes a ``RunResult`` from
the ranks' ``RankRecord``s.

One run writes ``OUT/<run_id>/result.json`` and appends the same record as one line to
``OUT/results.jsonl``. Experiments (sweep, scale, colocate, parity) append their own
summary records to the same kind of file. Every record is a JSON object with ``kind``.

A run record (``kind == "run"``)::

    schema            2 (1: before repeats, invariants, load and the communication split;
                      the report reads both: a missing field reads as not measured)
    kind              "run"
    run_id            folder name under OUT
    name              user label or a generated one
    key               hash of the resolved config (sweeps resume by it)
    status            "ok" | "oom" | "failed" | "interrupted" | "target_not_reached" (a run
                      with --target that ended at --max-epochs below it: its figures are
                      complete measurements; ``target`` holds the best value and when)
    error             null or one line
    partial           true when an interrupted run kept the steps timed so far: its figures
                      cover those steps (the reason in null_reasons.partial); absent otherwise
    started_at, finished_at   ISO-8601 UTC
    config            RunConfig.to_dict()
    resolved          {"data.image_size", "data.num_classes"}: what the run resolved these
                      to when the config left them null (the dataset's own), so runs are
                      compared like for like on what they measured
    input_mode        "device-resident": --dataset synthetic, one batch per rank made once on
                      the training device and reused every step (no loader, data wait ~0);
                      "loader": every other dataset, through data/loader.py
    env               host, cores, cpu_model, python, torch, cuda, cudnn, gpus[], driver,
                      world_size, nnodes, backend
    batch             {per_device, global, world_size}
    metrics           samples_per_s, samples_per_s_by_rank {rank: samples/s},
                      step_time_s {median, p95, mean, min, max, n, rel_ci}, step_time_rank,
                      breakdown_s {data, h2d, forward, backward, optimizer, comm},
                      data_wait_fraction, comm_fraction, epoch_time_s, epoch_time_projected,
                      steps_per_epoch, steps_timed, peak_mem_bytes {host, host_baseline,
                      host_net, device_allocated, device_reserved, device_nvml},
                      cpu_util_pct, gpu_util_pct, gpu_power_w, accuracy, loss_first,
                      loss_last, bad_samples_skipped, flops_per_step, flops_per_sample,
                      achieved_flops_per_s, mfu, peak {flops_per_s, devices, dtype,
                      device_name, source, measured},
                      (task metrics: verification_accuracy, map50)
                      samples_per_s: the sum over the training ranks of each one's
                      samples per step / its own median step (= global batch / step time
                      when ranks move in lockstep; with an asynchronous parameter server
                      the workers' rates differ), each in samples_per_s_by_rank.
                      step_time_s and breakdown_s are one training rank's: step_time_rank
                      (the first that trained; ranks[] holds every rank's).
                      peak_mem_bytes.host: peak resident memory of the training processes
                      plus their loader workers' unique memory (torch itself included);
                      host_baseline: the ranks' resident memory summed, each read before
                      its model and data were built (torch imported); host_net = host -
                      host_baseline, the part the run's settings (batch, model) move.
                      flops_per_step: FLOPs of one step of every training rank, counted
                      once on the first warm-up step (measure/flops.py: forward + backward,
                      2 per multiply-add, optimizer and element-wise operators 0);
                      achieved_flops_per_s = flops_per_sample x samples_per_s; mfu = that /
                      (peak.flops_per_s x peak.devices), the peak from a data sheet
                      (measure/peaks.py) or measured ("measured peak", cached per machine)
                      cpu_util_pct: the run's own process tree, as % of all cores (not
                      the machine's)
                      outside_cpu_s (CPU seconds that processes outside the run's process
                      tree used over the monitor samples enclosing the timed window:
                      machine-wide user+nice+system minus the tree's), outside_cpu_cores
                      (the same as mean cores busy), outside_gpu_processes (other programs'
                      compute processes on the run's GPUs; null without NVML)
    null_reasons      {metric name: why it is null}
    ranks             per-rank: rank, host, step_time_s, breakdown_s, steps_done, samples_per_s
    straggler         {slowest_rank, slowest_vs_median, steps_done} or null
    audit             {ok, duplicate_samples, missing_samples, same_order_across_epochs, detail}
    comm              null for in-process strategies (single, dp); else (docs/COMMUNICATION.md):
      exposed_s, exposed_fraction   communication the step waits for (breakdown_s.comm):
                        ddp: sync minus no_sync calibration; ps / local SGD: the timed comm
                        phase. 0 at world size 1, where nothing is communicated
      sync_step_s, no_sync_step_s, sync_cost_s, samples, method   ddp's calibration: medians
                        of fwd+bwd with / without gradient sync (alternating, first of each
                        dropped), their difference clipped at 0, the raw samples
      wrapper_overhead_s, wrapper_overhead_method   world size 1 only: ddp's sync_cost_s,
                        which is its hooks and bucket copies, not communication (left inside
                        backward); null otherwise
      transfer_s, transfer_method   the network's part of exposed_s: the standalone
                        collective (below), at most exposed_s
      sync_overhead_s, sync_overhead_method   exposed_s - transfer_s: hooks, bucketing,
                        waiting for the slowest rank; transfer_s + sync_overhead_s = exposed_s
      transfer_hidden_s the part of the standalone collective that did not show in the step
      transfer_standalone   {op, bytes, times_s, median_s, every, per_step_s, method}: the
                        strategy's own collective for one synchronisation's bytes, timed on
                        the run's process group after training (median of a few repeats,
                        slowest rank each); per_step_s = median_s / every (local SGD: K)
      measured_link     {name, why}: the link the communication crossed (loopback on one
                        host; the --link named across hosts; null name when unknown)
      prediction        the network model (comm/model.py) for the link --link named
      prediction_measured_link   the model for the measured link, when --link named another
                        (a run on loopback is compared only with the loopback prediction)
      strategy_metrics, server   the strategy's own figures (ps: the server's)
    load              {flag, reason, outside_cpu_cores, limit_cores, machine_cores, window_s,
                      gpu_processes [{device, pid, name, used_memory_bytes}] or null}:
                      flag = measured under load (rule: report/thresholds.py
                      Thresholds.under_load); null when neither figure was measured
    target            null without --target; else (docs/TIME_TO_TARGET.md, target.py):
                      metric, target, reached, time_to_target_s (training wall clock from
                      the first step to the evaluation that reached it, evaluation time
                      excluded), eval_time_s (that evaluation time, every evaluation's),
                      steps_to_target, epochs_to_target, samples_to_target (global),
                      best_value, best_at_s, best_at_epoch, best_at_samples, evaluations,
                      eval_every_steps (null: every epoch), max_epochs, rule, curve [{
                      evaluation, step, epoch, samples, train_wall_s, eval_s, value}] (also
                      OUT/<run>/target_curve.csv); null figures when not reached
    experiment        {id, kind, point} when the run belongs to a sweep / scale / ...;
                      a run is identified by experiment id + point (+ ``repeat``, the repeat
                      index, when present), never by its name
    paths             {dir, steps_csv, monitor_csv, traces[], tensorboard}

A value that was not measured is ``null``, with its reason in ``null_reasons``; never 0.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from types import UnionType
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from scaleprobe.errors import OutputError

try:  # fcntl is POSIX-only; on other systems appends are still whole-line writes
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

SCHEMA = 2
STATUSES = ("ok", "oom", "failed", "interrupted", "target_not_reached")
# statuses whose figures are complete measurements (a target not reached ran to its cap)
MEASURED = ("ok", "target_not_reached")
BREAKDOWN_PHASES = ("data", "h2d", "forward", "backward", "optimizer", "comm")
RESULTS_FILE = "results.jsonl"


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def empty_metrics() -> dict[str, Any]:
    """The metrics block of a run that measured nothing yet: every figure null."""
    return Metrics().to_dict()


def new_run_record(config: dict[str, Any], run_id: str, name: str, key: str) -> dict[str, Any]:
    """A run's record before it ran (status "failed" until it ends otherwise)."""
    return RunResult(run_id=run_id, name=name, key=key, started_at=utc_now(),
                     config=config).to_dict()


def make_run_id(name: str | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    suffix = f"{os.getpid() % 100000:05d}{time.perf_counter_ns() % 1000:03d}"
    base = f"{stamp}-{suffix}"
    if name:
        safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)[:40]
        base = f"{base}-{safe}"
    return base


OUTPUT_REASONS = {errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
                  errno.EPERM: "permission denied", errno.ENOSPC: "no space left on device",
                  errno.EDQUOT: "disk quota exceeded", errno.ENOTDIR: "not a folder"}


def output_error(path: str | Path, e: OSError, verb: str = "cannot write") -> OutputError:
    """One line naming the path and why: ``cannot write OUT/result.json: read-only file system``."""
    reason = OUTPUT_REASONS.get(e.errno) or e.strerror or str(e)
    return OutputError(f"{verb} {path}: {reason}")


def free_bytes(folder: str | Path) -> int | None:
    """Bytes an unprivileged writer may still use on ``folder``'s file system."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _kib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n // 1024} KiB"


def check_writable(folder: str | Path, need_bytes: int = 0, what: str = "the results") -> Path:
    """Preflight of an output folder: create it, create and remove a file in it, and check
    that ``need_bytes`` are free. Raises OutputError (one line naming the folder)."""
    d = Path(folder)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise output_error(d, e, "cannot create the output folder") from None
    if not d.is_dir():
        raise OutputError(f"output folder {d} is not a folder")
    probe = d / f".scaleprobe-probe.{os.getpid()}.tmp"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as e:
        raise output_error(d, e, "cannot write in the output folder") from None
    probe.unlink(missing_ok=True)
    free = free_bytes(d)
    if need_bytes and free is not None and free < need_bytes:
        raise OutputError(f"not enough free space in {d}: {_kib(free)} free, {what} need "
                          f"about {_kib(need_bytes)}")
    return d


def _mkdir(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise output_error(folder, e, "cannot create the output folder") from None


def write_text_atomic(path: str | Path, text: str | bytes) -> None:
    """Write via a temporary file (``.<name>.<pid>.tmp``) and rename, so a crash never leaves
    half a file; on failure (read-only, full disk) the temporary file is removed and an
    OutputError names the path."""
    p = Path(path)
    _mkdir(p.parent)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    data = text.encode() if isinstance(text, str) else text
    try:
        with tmp.open("wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except OSError as e:
        _remove(tmp)
        raise output_error(p, e) from None
    except BaseException:
        _remove(tmp)
        raise


def _remove(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:  # a read-only folder, where the file was never created
        pass


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """Write via a temporary file and rename, so a crash never leaves half a file."""
    write_text_atomic(path, json.dumps(obj, indent=2, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, (set, tuple)):
        return list(o)
    return str(o)


def append_jsonl(path: str | Path, record: dict[str, Any]) -> None:
    """Append one complete line, under an exclusive lock, flushed to disk: whole or not at all.

    The line goes out in one ``os.write`` after a check that the file system has room for it;
    a short write (the disk filled meanwhile) is cut back to the previous size, so the file
    never ends in part of this record. If the file already ends in a torn line (a writer
    killed mid-write), a newline is written first, so the new record starts on its own line.
    Raises OutputError (naming the file) when the line cannot be written.
    """
    p = Path(path)
    _mkdir(p.parent)
    line = (json.dumps(record, default=_json_default, separators=(",", ":")) + "\n").encode()
    try:
        fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as e:
        raise output_error(p, e) from None
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        _append_whole(fd, p, line)
    finally:
        os.close(fd)  # closing releases the lock


def _append_whole(fd: int, p: Path, line: bytes) -> None:
    size = os.fstat(fd).st_size
    if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
        line = b"\n" + line
    free = free_bytes(p.parent)
    if free is not None and free < len(line):
        raise output_error(p, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    try:
        written = os.write(fd, line)
        if written != len(line):
            raise OSError(errno.ENOSPC, f"short write ({written} of {len(line)} bytes)")
        os.fsync(fd)
    except OSError as e:
        try:
            os.ftruncate(fd, size)
        except OSError:  # pragma: no cover  (truncating never needs space)
            pass
        raise output_error(p, e) from None


def read_jsonl(path: str | Path, warn: bool = True) -> list[dict[str, Any]]:
    """All complete records; a torn or corrupt line is skipped with a warning, never raised."""
    p = Path(path)
    if not p.exists():
        return []
    out: list[dict[str, Any]] = []
    with p.open("rb") as fh:
        for n, raw in enumerate(fh, 1):
            raw = raw.strip()
            if not raw:
                continue
            try:
                rec = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                if warn:
                    print(f"warning: {p}:{n}: skipping a torn or corrupt line", file=sys.stderr)
                continue
            if isinstance(rec, dict):
                out.append(rec)
    return out


def find_results(path: str | Path) -> list[dict[str, Any]]:
    """Records from a results.jsonl, a folder holding one (searched recursively), or a result.json."""
    p = Path(path)
    if p.is_file() and p.suffix == ".json":
        with p.open() as fh:
            return [json.load(fh)]
    if p.is_file():
        return read_jsonl(p)
    recs: list[dict[str, Any]] = []
    for f in sorted(p.rglob(RESULTS_FILE)):
        recs.extend(read_jsonl(f))
    return recs


def runs(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r.get("kind") == "run"]


def get(rec: dict[str, Any], dotted: str, default: Any = None) -> Any:
    """``get(rec, "metrics.step_time_s.median")``; missing or null parts give ``default``."""
    cur: Any = rec
    for part in dotted.split("."):
        if not isinstance(cur, dict) or cur.get(part) is None:
            return default
        cur = cur[part]
    return cur


# ---- the typed result model -----------------------------------------------------------------
# Dataclasses for every record scaleprobe writes, on exactly the JSON schema above. Each one
# reads a record (``from_dict``: a missing field reads as None, "not measured"; a field this
# version does not declare is kept in ``extra`` and written back, so reading and writing a
# record never loses a figure) and writes it (``to_dict``). Derived figures are not stored
# here twice: they come from ``scaleprobe.metrics``.

_R = TypeVar("_R", bound="Record")


class Record:
    """Mixin for the dataclasses below: ``to_dict`` / ``from_dict`` on the JSON schema."""

    extra: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):  # type: ignore[arg-type]
            if f.name != "extra":
                out[f.name] = _dump(getattr(self, f.name))
        for k, v in self.extra.items():
            out.setdefault(k, v)
        return out

    @classmethod
    def from_dict(cls: type[_R], d: Any) -> _R:
        """The record ``d`` (a dict from JSON) as this class; raises TypeError on a record
        that is not a JSON object."""
        if isinstance(d, cls):
            return d
        if not isinstance(d, dict):
            raise TypeError(f"{cls.__name__}: expected a JSON object, got {type(d).__name__}")
        hints = _hints(cls)
        kwargs: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for k, v in d.items():
            if k in hints and k != "extra":
                loaded = _load(hints[k], v)
                if loaded is not _BAD:
                    kwargs[k] = loaded
                # else: a block of the wrong shape (a damaged or foreign file) reads as
                # not measured: the field keeps its default
            else:
                extra[k] = v
        return cls(**kwargs, extra=extra)  # type: ignore[call-arg]

    def get(self, dotted: str, default: Any = None) -> Any:
        """``result.get("metrics.step_time_s.median")`` on the record's JSON form."""
        return get(self.to_dict(), dotted, default)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = get_type_hints(cls)
    return _HINTS[cls]


def _dump(v: Any) -> Any:
    if isinstance(v, Record):
        return v.to_dict()
    if isinstance(v, list):
        return [_dump(x) for x in v]
    if isinstance(v, dict):
        return {k: _dump(x) for k, x in v.items()}
    return v


def _record_type(hint: Any) -> type | None:
    """The Record class in ``X``, ``X | None``."""
    if isinstance(hint, type) and issubclass(hint, Record):
        return hint
    if get_origin(hint) in (Union, UnionType):
        for a in get_args(hint):
            if isinstance(a, type) and issubclass(a, Record):
                return a
    return None


_BAD = object()  # _load's answer for a value of the wrong shape


def _load(hint: Any, v: Any) -> Any:
    rt = _record_type(hint)
    if rt is not None:
        if isinstance(v, dict):
            return rt.from_dict(v)
        return None if v is None and hint is not rt else _BAD
    if get_origin(hint) is list:
        if not isinstance(v, list):
            return _BAD
        (item,) = get_args(hint) or (Any,)
        it = _record_type(item)
        if it is not None:
            return [it.from_dict(x) for x in v if isinstance(x, dict)]
    return v


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
        from scaleprobe import metrics as M

        return M.compute_s(self.phases())


@dataclass
class PeakMem(Record):
    host: int | None = None
    host_baseline: int | None = None
    host_net: int | None = None
    device_allocated: int | None = None
    device_reserved: int | None = None
    device_nvml: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Peak(Record):
    """The peak an MFU is held against (measure/flops.py): one device's dense FLOP/s for the
    run's dtype, from a data sheet or measured, and how many such devices the run trained on."""

    flops_per_s: float | None = None  # one device
    devices: int | None = None  # CUDA: distinct GPUs of the training ranks; CPU: hosts
    dtype: str | None = None  # fp32 | tf32 | bf16 | fp16
    device_name: str | None = None
    source: str | None = None  # "data sheet: ..." or "measured peak: ..."
    measured: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Metrics(Record):
    """A run's figures (units in the names; see the schema above). Task metrics
    (verification_accuracy, map50, ...) are kept in ``extra`` under their own names."""

    samples_per_s: float | None = None
    samples_per_s_by_rank: dict[str, float] | None = None
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
    steps_timed: int = 0
    steps_done: int | None = None
    window_s: float | None = None
    peak_mem_bytes: PeakMem = field(default_factory=PeakMem)
    cpu_util_pct: float | None = None
    gpu_util_pct: float | None = None
    gpu_power_w: float | None = None
    accuracy: float | None = None
    loss_first: float | None = None
    loss_last: float | None = None
    bad_samples_skipped: int = 0
    outside_cpu_s: float | None = None
    outside_cpu_cores: float | None = None
    outside_gpu_processes: int | None = None
    param_count: int | None = None
    lr_effective: float | None = None
    flops_per_step: float | None = None  # the whole job's (every training rank's batch)
    flops_per_sample: float | None = None
    achieved_flops_per_s: float | None = None
    mfu: float | None = None  # achieved / (peak.flops_per_s x peak.devices)
    peak: Peak | None = None
    extra: dict[str, Any] = field(default_factory=dict)


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
class Batch(Record):
    per_device: int | None = None
    per_process: int | None = None
    global_: int | None = None
    world_size: int | None = None
    training_ranks: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

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
    """One rank's own figures (``measure.summary.rank_summary``)."""

    rank: int | None = None
    host: str | None = None
    device: str | None = None
    step_time_s: StepTime | None = None
    breakdown_s: Breakdown = field(default_factory=Breakdown)
    steps_done: int | None = None
    steps_timed: int | None = None
    samples_per_s: float | None = None
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
    strategy_metrics: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Load(Record):
    """Was the run measured under load? (rule: report/thresholds.py ``under_load``)"""

    flag: bool | None = None
    reason: str | None = None
    outside_cpu_cores: float | None = None
    limit_cores: float | None = None
    machine_cores: int | None = None
    window_s: float | None = None
    gpu_processes: list[dict[str, Any]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Experiment(Record):
    """Which experiment a run or record belongs to; runs are identified by id + point
    (+ repeat), never by name."""

    id: str | None = None
    kind: str | None = None
    point: dict[str, Any] | None = None
    repeat: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        # an experiment's own record has no point and no repeat: left out, not written null
        d = super().to_dict()
        return {k: v for k, v in d.items() if not (k in ("point", "repeat") and v is None)}


@dataclass
class RunResult(Record):
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
    config: dict[str, Any] = field(default_factory=dict)
    resolved: dict[str, Any] | None = None
    dataset_source: str | None = None
    input_mode: str | None = None
    env: dict[str, Any] = field(default_factory=dict)
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
    paths: dict[str, Any] = field(default_factory=dict)
    # `scaleprobe wrap`: the user's script (target, exit_code, loader, stopped_after,
    # sampler_note); null for the built-in training loop
    script: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def cfg(self, dotted: str, default: Any = None) -> Any:
        """A configuration value: ``result.cfg("dist.strategy")``."""
        return get(self.config, dotted, default)


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
    input_mode: str | None = None  # "device-resident" (synthetic) | "loader"
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class RankMem(Record):
    host_peak_rss: int | None = None
    host_baseline_rss: int | None = None
    device_allocated: int | None = None
    device_reserved: int | None = None
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
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class SweepRecord(Record):
    """A sweep's (or scale's) own record, beside its points' run records."""

    schema: int = SCHEMA
    kind: str = "sweep"
    experiment: Experiment | None = None
    axes: dict[str, Any] | None = None
    points: list[dict[str, Any]] | None = None
    skipped: list[dict[str, Any]] = field(default_factory=list)
    searches: list[dict[str, Any]] = field(default_factory=list)
    dropped: list[Any] | None = None
    repeats: int | None = None
    points_run: int | None = None
    recommendation: Any = None
    finished_at: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ColocateRecord(Record):
    """A colocate experiment's record: each job alone and together (interleaved repeats),
    its slowdown with an interval, the total throughput and the verdict."""

    schema: int = SCHEMA
    kind: str = "colocate"
    experiment: Experiment | None = None
    placement: str | None = None
    placement_note: str | None = None
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
    verdict: str | None = None
    evidence: list[str] | None = None
    throughput: str | None = None
    run_ids: dict[str, list[str]] | None = None
    finished_at: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ParityRecord(Record):
    """An accuracy-parity experiment's record: 1 process vs N at the same global batch,
    over repeats with their own seeds; the tolerance comes from the seed-to-seed spread."""

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
    extra: dict[str, Any] = field(default_factory=dict)


RECORD_TYPES: dict[str, type[Record]] = {"run": RunResult, "sweep": SweepRecord,
                                         "colocate": ColocateRecord, "parity": ParityRecord}


def typed(rec: dict[str, Any]) -> Record:
    """A record read from a results file as its dataclass (by ``kind``); an unknown kind is
    kept as a plain ``Other`` record, never dropped."""
    cls = RECORD_TYPES.get(rec.get("kind"), Other)  # type: ignore[arg-type]
    return cls.from_dict(rec)


@dataclass
class Other(Record):
    kind: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
