"""Time to a target quality (``--target METRIC=VALUE``), measured by MLPerf Training's rules.

A run with a target trains for whole epochs (at most ``--max-epochs``), evaluates its task
metric on the held-out split every ``--eval-every`` steps (default: at the end of every
epoch) and stops at the first evaluation that reaches the target; a target not reached by the
cap ends as status ``target_not_reached``. What it records (``TimeToTarget``: the time
without evaluation, steps, samples, epochs, the curve) and each metric's direction
(``LOWER_IS_BETTER``) are docs/TIME_TO_TARGET.md's.

This module has no torch import at the top: the config checks it (``parse_target``) and the
result is assembled from it (``summarize``) without torch. ``TargetWatch`` runs in the rank
that evaluates; the engine hands it the evaluation as a callable.
"""

from __future__ import annotations

import csv
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from scaleprobe.core import metrics as M
from scaleprobe.core.errors import ConfigError
from scaleprobe.core.rank_record import RankTarget, TargetPoint

# metric -> the task whose evaluation reports it (the first of a task's is its main metric)
METRICS = {"accuracy": "classification", "verification_accuracy": "face", "map50": "detection",
           "loss": "lm", "perplexity": "lm"}
# metrics whose target is reached at or below it (held-out nats per token, exp of it)
LOWER_IS_BETTER = frozenset({"loss", "perplexity"})
# the smallest value each lower-is-better metric can take (a target must lie above it)
FLOOR = {"loss": 0.0, "perplexity": 1.0}
CURVE_FILE = "target_curve.csv"
CURVE_COLUMNS = ("evaluation", "step", "epoch", "samples", "train_wall_s", "eval_s", "value",
                 "looked_back")
RULE = ("training wall clock from the start of the first step (data loading and warm-up "
        "included) to the evaluation that reached the target, evaluation time excluded "
        "(MLPerf Training's time-to-train rule); copies of the model kept between "
        "evaluations, evaluated after the hit, count as evaluations at their steps")


@dataclass(frozen=True)
class Target:
    metric: str
    value: float

    @property
    def lower(self) -> bool:
        """Is a lower value better (reached at or below the target)?"""
        return self.metric in LOWER_IS_BETTER

    def text(self) -> str:
        return target_text(self.metric, self.value)

    def reached(self, value: float | None) -> bool:
        if value is None or not math.isfinite(value):
            return False
        return value <= self.value if self.lower else value >= self.value

    def best(self, values: list[float]) -> float:
        """The best of ``values`` in this metric's direction."""
        return min(values) if self.lower else max(values)


def target_text(metric: str, value: float) -> str:
    """``accuracy >= 0.95``, ``loss <= 2.1``: the target with its direction."""
    return f"{metric} {'<=' if metric in LOWER_IS_BETTER else '>='} {value:g}"


def parse_target(text: str) -> Target:
    """``"accuracy=0.95"`` -> Target; ConfigError (one line) on anything else."""
    metric, sep, num = str(text).partition("=")
    metric = metric.strip()
    if not sep or not metric:
        raise ConfigError(f"--target takes METRIC=VALUE, e.g. accuracy=0.95; got '{text}'")
    if metric not in METRICS:
        raise ConfigError(f"--target: unknown metric '{metric}'; one of {', '.join(METRICS)}")
    try:
        value = float(num)
    except ValueError:
        raise ConfigError(f"--target {metric}=...: '{num.strip()}' is not a number") from None
    if metric in LOWER_IS_BETTER:
        floor = FLOOR[metric]
        if not (math.isfinite(value) and value > floor):
            raise ConfigError(f"--target {metric}={num.strip()}: give a finite value above "
                              f"{floor:g} ({metric} is lower-is-better, at least {floor:g})")
        return Target(metric, value)
    if not 0 < value <= 1:
        raise ConfigError(f"--target {metric}={num.strip()}: {metric} is a fraction; give a "
                          "value in (0, 1], e.g. 0.95")
    return Target(metric, value)


def check_task(target: Target, task: str) -> None:
    """The metric must be one the run's task evaluates."""
    want = METRICS[target.metric]
    if want != task:
        raise ConfigError(f"--target {target.metric} is reported by --task {want}; this run's "
                          f"task ({task}) reports "
                          f"{next(m for m, t in METRICS.items() if t == task)}")


# ---- in the evaluating rank ----------------------------------------------------------------

def now() -> float:
    """The training clock: monotonic wall seconds."""
    return time.perf_counter()


# copies of the model kept between two evaluations, at most (``train.target_copies``), and
# the memory they may take together (a larger model keeps fewer; under 2, none)
COPIES = 32
COPIES_BYTES = 2 << 30
# the look back may take as long as the training to the hit, and at least this
LOOK_BACK_MIN_S = 30.0


@dataclass
class Kept:
    """A copy of the model kept at ``step`` (``state``: the engine's, opaque here; None on a
    rank that does not evaluate, which keeps the schedule only), with the training clock
    then."""

    step: int
    train_wall_s: float
    state: Any = None


@dataclass
class TargetWatch:
    """Evaluates on a schedule and keeps the training clock net of evaluation.

    ``start()`` before the first step; ``due(step, epoch_end)`` after each step and at the end
    of each epoch; ``evaluate(step, evaluate_fn, agree)`` runs the evaluation (``evaluate_fn``:
    the task's metrics dict) and returns whether to stop. ``agree`` turns this rank's verdict
    into every rank's (an all-reduce), so all ranks stop at the same step; its wait counts as
    evaluation. ``sync`` waits for the device (CUDA) before the clock is read.

    Between two evaluations it keeps up to ``copies`` copies of the model, evenly spaced
    (``keep_due``, ``keep``; off the clock like an evaluation); when an evaluation reaches the
    target, ``look_back`` evaluates the copies made since the one before, in step order up
    to the first that reaches it, so the target's bracket narrows from the evaluations'
    spacing to the copies'. Every rank
    keeps the same schedule (a rank that does not evaluate keeps no state), so every rank
    joins the same ``agree`` calls."""

    target: Target
    eval_every: int | None  # steps; None: at the end of every epoch
    clock: Callable[[], float] | None = None  # None: ``now`` (tests replace either)
    sync: Callable[[], None] = lambda: None
    steps_per_epoch: int | None = None  # the rank's loader length, when it has one
    copies: int = 0  # at most this many copies between two evaluations (0: none)
    copies_reason: str | None = None  # why none are kept
    t0: float | None = None
    eval_total_s: float = 0.0
    kept_s: float = 0.0  # keeping copies: off the clock too, reported apart
    points: list[TargetPoint] = field(default_factory=list)
    last_step: int = -1  # the step of the last evaluation
    before_step: int = 0  # the step of the evaluation before that one (0: the start)
    reached: bool = False
    kept: list[Kept] = field(default_factory=list)
    looked_at: int | None = None  # the copies in the hit's bracket
    stopped_early: str | None = None  # why the look back ended before the first hit

    def _now(self) -> float:
        return (self.clock or now)()

    def start(self) -> None:
        if self.t0 is None:
            self.t0 = self._now()

    def due(self, step: int, epoch_end: bool = False) -> bool:
        if step == self.last_step or step == 0:
            return False
        if self.eval_every is None:
            return epoch_end
        return not epoch_end and step % self.eval_every == 0

    @property
    def copies_every(self) -> int | None:
        """Steps between two copies: the evaluations' spacing over ``copies`` (None: no
        copies, or no spacing known: evaluations once an epoch of unknown length)."""
        spacing = self.eval_every or self.steps_per_epoch
        if self.copies < 1 or not spacing:
            return None
        return max(1, math.ceil(spacing / (self.copies + 1)))

    def keep_due(self, step: int) -> bool:
        """A copy is due after ``step`` (never where an evaluation is)."""
        every = self.copies_every
        since = step - max(self.last_step, 0)
        return (every is not None and since > 0 and since % every == 0
                and len(self.kept) < self.copies and not self.due(step))

    def _train_wall(self, at: float) -> float:
        return (at - (self.t0 if self.t0 is not None else at) - self.eval_total_s
                - self.kept_s)

    def keep(self, step: int, take: Callable[[], Any]) -> None:
        """Keep a copy of the model after ``step`` (``take`` makes it); its time is not
        training time."""
        self.sync()
        t_begin = self._now()
        train_wall = self._train_wall(t_begin)
        state = take()
        self.sync()
        self.kept_s += self._now() - t_begin
        self.kept.append(Kept(step, train_wall, state))

    def evaluate(self, step: int, evaluate_fn: Callable[[], dict[str, Any]] | None,
                 agree: Callable[[bool], bool] = lambda x: x) -> bool:
        """One evaluation at ``step`` (``evaluate_fn`` None: this rank does not evaluate, it
        only joins ``agree``). Returns True when every rank should stop."""
        self.sync()
        t_begin = self._now()
        train_wall = self._train_wall(t_begin)
        value, stop = self._value_agreed(evaluate_fn, agree)
        took = self._now() - t_begin
        self.eval_total_s += took
        self.before_step, self.last_step = max(self.last_step, 0), step
        self.reached = self.reached or stop
        if evaluate_fn is not None:
            self.points.append(TargetPoint(step=step, train_wall_s=train_wall, eval_s=took,
                                           value=value))
        if not stop:
            self.kept.clear()  # the next bracket's copies start here
        return stop

    def _value_agreed(self, evaluate_fn: Callable[[], dict[str, Any]] | None,
                      agree: Callable[[bool], bool]) -> tuple[float | None, bool]:
        value = None
        if evaluate_fn is not None:
            got = evaluate_fn().get(self.target.metric)
            value = float(got) if isinstance(got, (int, float)) else None
        stop = bool(agree(self.target.reached(value)))
        self.sync()
        return value, stop

    def look_back(self, evaluate_fn: Callable[[], dict[str, Any]] | None,
                  load: Callable[[Any], None],
                  agree: Callable[[bool], bool] = lambda x: x,
                  asked_to_stop: Callable[[], bool] = lambda: False) -> int:
        """After the evaluation that reached the target: evaluate the copies kept since the
        evaluation before it, in step order, up to the first that reaches it (``load`` puts
        a copy's state into the model; the caller puts the trained state back). That is the
        answer evaluating at every copy's step would have given, the metric's ups and downs
        included. The copies' points join the curve marked ``looked_back``. It stops early
        once its evaluations have taken as long as the training to the hit (at least
        ``LOOK_BACK_MIN_S``), or when any rank is asked to stop (Ctrl+C): the target then
        lies after the last copy evaluated. Every rank steps alike on the agreed verdicts.
        Returns the evaluations made."""
        inside = [k for k in self.kept if self.before_step < k.step < self.last_step]
        hit_wall = self.points[-1].train_wall_s if self.points else None
        budget = max(LOOK_BACK_MIN_S, hit_wall or 0.0)
        self.looked_at, spent, made = len(inside), 0.0, 0
        for k in inside:
            asked = asked_to_stop()
            over = evaluate_fn is not None and spent >= budget
            if agree(asked or over):  # a peer's stop, too: this rank did not spend it
                why = (f"{spent:.1f} s, as long as the training to the hit"
                       if over and not asked else "asked to stop")
                self.stopped_early = f"stopped after {made} of {len(inside)} copies: {why}"
                break
            self.sync()
            t_begin = self._now()
            load(k.state)
            value, hit = self._value_agreed(evaluate_fn, agree)
            took = self._now() - t_begin
            self.eval_total_s += took
            spent += took
            made += 1
            if evaluate_fn is not None:
                self.points.append(TargetPoint(step=k.step, train_wall_s=k.train_wall_s,
                                               eval_s=took, value=value, looked_back=True))
            if hit:
                break
        self.kept.clear()
        return made

    def record(self) -> RankTarget:
        """What travels in the rank's record (``RankRecord.target``)."""
        return RankTarget(metric=self.target.metric, value=self.target.value,
                          eval_every=self.eval_every, points=list(self.points),
                          steps_per_epoch=self.steps_per_epoch, eval_time_s=self.eval_total_s,
                          copies=self.copies, copies_every=self.copies_every,
                          copies_looked_at=self.looked_at, copies_reason=self.copies_reason,
                          copies_s=self.kept_s, copies_stopped=self.stopped_early)


def copies_for(state_bytes: int, wanted: int = COPIES,
               budget: int = COPIES_BYTES) -> tuple[int, str | None]:
    """How many copies of a model of ``state_bytes`` (parameters and buffers) to keep
    between two evaluations: ``wanted``, fewer where they would take more than ``budget``
    together, none under 2 (and why)."""
    if wanted < 1:
        return 0, "turned off (train.target_copies = 0)"
    n = min(wanted, budget // max(1, state_bytes))
    if n < 2:
        return 0, (f"the model's state ({state_bytes / 2**20:,.0f} MiB) leaves room for fewer "
                   f"than 2 copies in {budget / 2**30:g} GiB")
    return n, None


# ---- in the driver: the result -----------------------------------------------------------

def summarize(raw: RankTarget, steps_per_epoch: int | None, global_batch: int | None,
              max_epochs: int | None) -> dict[str, Any]:
    """``results.TimeToTarget`` (as a dict) from the evaluating rank's ``record()``: the first
    evaluation that reached the target, the best one, and the curve with epochs and samples."""
    if raw.metric is None or raw.value is None:
        raise ValueError("a rank's target record without its metric and value")
    target = Target(raw.metric, float(raw.value))
    steps_per_epoch = raw.steps_per_epoch or steps_per_epoch  # the loader's own count
    curve: list[dict[str, Any]] = []  # the result's ``TimeToTarget.curve``, in step order
    # (the copies looked back at after the hit sit between the evaluations around them)
    for i, p in enumerate(sorted(raw.points, key=lambda p: p.step or 0)):
        curve.append({"evaluation": i + 1, "step": p.step,
                      "epoch": M.epochs_of(p.step, steps_per_epoch),
                      "samples": M.samples_of(p.step, global_batch),
                      "train_wall_s": p.train_wall_s, "eval_s": p.eval_s,
                      "value": p.value, "looked_back": int(bool(p.looked_back))})
    hit = next((c for c in curve if target.reached(c["value"])), None)
    # the evaluation before the hit (None: the hit was the first): the target was crossed
    # after it, so the hit's figures are the time to target to within that bracket
    before = curve[hit["evaluation"] - 2] if hit and hit["evaluation"] > 1 else None
    seen = [c for c in curve if c["value"] is not None]
    best_value = target.best([c["value"] for c in seen]) if seen else None
    best = next((c for c in seen if c["value"] == best_value), None)
    out: dict[str, Any] = {
        "metric": target.metric, "target": target.value, "reached": hit is not None,
        "time_to_target_s": hit["train_wall_s"] if hit else None,
        "eval_time_s": raw.eval_time_s,
        "steps_to_target": hit["step"] if hit else None,
        "steps_to_target_lo": (before["step"] if before else 0) if hit else None,
        "time_to_target_lo_s": (before["train_wall_s"] if before else 0.0) if hit else None,
        "epochs_to_target": hit["epoch"] if hit else None,
        "samples_to_target": hit["samples"] if hit else None,
        "best_value": best["value"] if best else None,
        "best_at_s": best["train_wall_s"] if best else None,
        "best_at_epoch": best["epoch"] if best else None,
        "best_at_samples": best["samples"] if best else None,
        "evaluations": len(curve), "eval_every_steps": raw.eval_every,
        "max_epochs": max_epochs, "rule": RULE, "curve": curve}
    if raw.copies is not None:  # a record from before the look back has none of these
        copies = {"copies": raw.copies, "copies_every": raw.copies_every,
                  "copies_looked_at": raw.copies_looked_at,
                  "looked_back": sum(c["looked_back"] for c in curve),
                  "copies_reason": raw.copies_reason, "copies_s": raw.copies_s,
                  "copies_stopped": raw.copies_stopped}
        out.update({k: v for k, v in copies.items() if v is not None})
    return out


def not_reached_line(tt: dict[str, Any]) -> str:
    """How far the run got without reaching the target: ``accuracy >= 0.99 not reached: 4
    evaluations up to step 400, epoch 3.00 of at most 3; last 0.9700, best 0.9720 at 5.1 s of
    training, epoch 2.00`` (``loss <= 1.5 ...``: the best is the lowest). An interrupted run
    says the epoch it reached, never the --max-epochs it did not."""
    ev = tt.get("evaluations") or 0
    curve = tt.get("curve") or []
    last = curve[-1] if curve else {}
    where = f" up to step {last['step']}" if last.get("step") is not None else ""
    if last.get("epoch") is not None:
        where += f", epoch {last['epoch']:.2f} of at most {tt.get('max_epochs')}"
    head = (f"{target_text(tt['metric'], tt['target'])} not reached: {ev} "
            f"evaluation{'s' if ev != 1 else ''}{where}")
    if tt.get("best_value") is None:
        return head + "; no evaluation gave a value"
    shown = f"; last {last['value']:.4f}" if last.get("value") is not None else ""
    return (f"{head}{shown}, best {tt['best_value']:.4f} at {tt['best_at_s']:.1f} s of "
            f"training, epoch {tt['best_at_epoch']:.2f}")


def write_curve_csv(path: Path, curve: list[dict[str, Any]]) -> None:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(CURVE_COLUMNS)
        for c in curve:
            w.writerow([_cell(c.get(k)) for k in CURVE_COLUMNS])


def _cell(v: Any) -> str:
    if v is None:
        return ""
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def read_curve_csv(path: Path) -> list[dict[str, float | None]]:
    with path.open(newline="") as fh:
        return [{k: (float(v) if v != "" else None) for k, v in row.items()}
                for row in csv.DictReader(fh)]


def summary_line(tt: dict[str, Any]) -> str:
    """The run's time to target in one line, evaluation time named as excluded."""
    ev = tt.get("evaluations") or 0
    back = tt.get("looked_back") or 0
    evals = (f"{ev} evaluation{'s' if ev != 1 else ''}"
             + (f" ({back} of them on copies of the model kept since the evaluation before the hit)"
                if back else "")
             + f" took {tt.get('eval_time_s') or 0:.2f} s"
             + (f", keeping the copies {tt['copies_s']:.2f} s" if tt.get("copies_s") else "")
             + ", excluded")
    if not tt.get("reached"):
        return f"time to target: {not_reached_line(tt)} ({evals})"
    return (f"time to target: {target_text(tt['metric'], tt['target'])} reached in "
            f"{tt['time_to_target_s']:.2f} s of training, epoch {tt['epochs_to_target']:.2f}, "
            f"{tt['samples_to_target']:,} samples ({evals})" + bracket_text(tt))


# a bracket narrower than this share of the time to target is not worth a line
BRACKET_SHOWN = 0.10


def wide_bracket(t: float | None, lo: float | None) -> bool:
    """The time to a reached target ``t`` is open down to ``lo`` (the evaluation before the
    hit) by more than ``BRACKET_SHOWN`` of it: worth saying."""
    return bool(t) and lo is not None and t is not None and t - lo > BRACKET_SHOWN * t


# evaluations a run asked to narrow its bracket is told to make up to the step it hit
EVALS_SUGGESTED = 20


def more_often(steps: int) -> str:
    """``--eval-every 273: 20 evaluations up to step 5,469``: a schedule that reads the
    target's step to within a twentieth of it."""
    every = max(1, steps // EVALS_SUGGESTED)
    return f"--eval-every {every}: {steps // every} evaluations up to step {steps:,}"


def bracket_text(tt: dict[str, Any]) -> str:
    """What the evaluation schedule leaves open about a reached target: it was crossed
    after the evaluation before the hit (the start, when the hit was the first), so the
    time to it lies between the two. Empty when that bracket is within ``BRACKET_SHOWN``
    of the figure, or not recorded."""
    t, lo = tt.get("time_to_target_s"), tt.get("time_to_target_lo_s")
    steps, steps_lo = tt.get("steps_to_target"), tt.get("steps_to_target_lo")
    if steps is None or steps_lo is None or not wide_bracket(t, lo):
        return ""
    copy = any(c.get("looked_back") and c.get("step") == steps_lo
               for c in tt.get("curve") or [])
    after = (f"the {'copy of the model' if copy else 'evaluation'} before it, step "
             f"{steps_lo:,} at {lo:.2f} s" if steps_lo
             else "the start: it was the first evaluation")
    why = [x for x in (tt.get("copies_reason"), tt.get("copies_stopped")) if x]
    return (f"; crossed somewhere after {after}, so the time to it is {lo:.2f}-{t:.2f} s "
            f"(steps {steps_lo:,}-{steps:,}): evaluate more often to narrow it "
            f"({more_often(steps)})"
            + (f"; copies of the model looked back at: {why[0]}" if why else ""))


def repeat_config(cfg: Any, repeat: int) -> tuple[Any, int]:
    """An experiment's repeat ``repeat`` of a point: with --target, a run with its own seed
    (seed + repeat: convergence varies between seeds, and MLPerf asks for several runs per
    result), which is then the first run of its own configuration (index 0); without, the
    same configuration measured again (index ``repeat``)."""
    if getattr(cfg.train, "target", None) is None:
        return cfg, repeat

    return replace(cfg, train=replace(cfg.train, seed=cfg.train.seed + repeat)), 0


def experiment_seed(seed: int, repeat: int | None, target: Any) -> int:
    """The seed an experiment set, from one of its runs: under --target repeat ``repeat``
    trained with seed + repeat (``repeat_config``); otherwise every repeat trains it."""
    return seed - repeat if target and repeat else seed
