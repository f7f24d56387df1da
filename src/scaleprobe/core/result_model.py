"""The typed result model: one dataclass per record kind, on exactly the JSON schema of
docs/RESULTS.md. A run's record (``RunResult``) is here; its metrics block is
``core/run_metrics.py``, its other blocks ``core/run_parts.py`` and a rank's hand-off
``core/rank_record.py``. Torch-free."""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from scaleprobe.core import metrics as M
from scaleprobe.core.record import TRANSIENT, Record, get
from scaleprobe.core.run_blocks import ConfigBlock, ConfigRead, RunEnv, ScriptRun
from scaleprobe.core.run_metrics import Metrics
from scaleprobe.core.run_parts import (
    Audit,
    Batch,
    Comm,
    Gns,
    Load,
    RankSummary,
    Straggler,
    TimeToTarget,
)

if TYPE_CHECKING:
    from scaleprobe.config.sections import RunConfig
else:  # the type is config/runconfig.py's, which this module cannot import (core/run_blocks.py)
    RunConfig = object

SCHEMA = 2
# statuses whose figures are complete measurements (a target not reached ran to its cap)
MEASURED = ("ok", "target_not_reached")
# a record read without a status (written before status existed, or by hand): whether it
# finished is not known, so it is neither "ok" nor "failed"
UNKNOWN = "unknown"
UNKNOWN_TEXT = "unknown (older record without a status)"
BATCH_AXES = ("batch_size", "global_batch")
# datasets with no loader at all: one batch made once on the device (--workers, --loader and
# --prefetch do nothing; config/rules.py warns when they are given)
DEVICE_RESIDENT = ("synthetic", "tokens-synthetic")
# each task's evaluation figure and how a table shows it: classification, face, detection, lm
TASK_METRICS = (("accuracy", "{:.3f}"), ("verification_accuracy", "verif. {:.3f}"),
                ("map50", "mAP50 {:.3f}"),
                ("loss", "loss {:.3f}"))  # lm: held-out nats per token (lower is better)


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
        """Loader worker processes actually used: 0 for the naive (in-process) loader, and for
        a dataset with no loader at all (``DEVICE_RESIDENT``), whatever --workers says."""
        if self.cfg("data.loader") == "naive" or self.cfg("data.dataset") in DEVICE_RESIDENT:
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
