"""A plan: the configurations (strategy, batch per device, devices) that fit in one device's
memory, each with its predicted step, samples/s, efficiency and memory headroom, and, where a
run measured the gradient noise scale, the steps and time to a target; then the fastest that
fits and the cheapest in device-hours, each against its runner-up as a claim
(``scaleprobe plan``). No torch.

A row fits as ``predict --memory`` decides it (``core/claim_kinds.memory_fit``): only when the
whole interval of its predicted peak lies under the device's memory; it does not fit when the
whole interval lies over it, and is inconclusive between (``Row.fit``): such a row's step is
predicted and shown, but it is never picked.

One mechanism each: the peak per rank is ``predict/memmodel.predict``, the step is
``predict/whatif.plan`` (the step model of ``predict --from``) on the same rows. What this
module adds (docs/PLAN.md gives each rule and its interval): a batch the runs did not measure,
grown from the nearest measured one (``scaled_from``); samples/s and efficiency against the
plan's own one-device row; steps and time to a target from the critical batch; device-hours.

A pick is a ``core/claim_kinds.plan_pick``: its figure over the runner-up's (the best other row
that fits), with the interval from the two rows' intervals (the pick's low end against the
runner-up's high end, and back): intervals that overlap are not resolved. Its repeats are the
one-rank runs behind each row (one run decides nothing). The runs and the target are read
from the records in ``plan_inputs.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from scaleprobe.core import claim as CL
from scaleprobe.core import claim_kinds as CK
from scaleprobe.core import metrics as Mx
from scaleprobe.core.metrics import Interval
from scaleprobe.core.thresholds import DEFAULT as TH
from scaleprobe.core.traits import traits_of
from scaleprobe.predict import memmodel as MM
from scaleprobe.predict import sample as S
from scaleprobe.predict import stepmodel as M
from scaleprobe.predict import whatif as W
from scaleprobe.predict.timeline import Compute, Unit

PER_SAMPLES = 1e6  # device-hours are shown per this many samples without a target
STRATEGIES = tuple(s for s in MM.STRATEGIES if s in W.STRATEGIES)  # both models know them


@dataclass(frozen=True)
class Basis:
    """The one-rank runs' steps at one batch per device (several runs pooled)."""

    batch: int
    sample: S.RunSample
    runs: int
    labels: tuple[str, ...] = ()
    run_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Target:
    """Steps to a target at one run's global batch, and the critical batch (~ B_noise)."""

    text: str
    steps: float
    batch_global: int
    b_crit: float
    b_crit_lo: float
    b_crit_hi: float
    source: str  # where the steps and B_noise came from, in words
    # the run's evaluation before the one that reached the target (0: none; None: not
    # recorded): it was crossed after that step, so ``steps`` (the hit) is an upper end
    steps_lo: float | None = None

    def steps_at(self, batch_global: float, b_crit: float | None = None) -> float:
        bc = self.b_crit if b_crit is None else b_crit
        return self.steps * (1 + bc / batch_global) / (1 + bc / self.batch_global)


@dataclass(frozen=True)
class Question:
    """What to plan: every combination of ``strategies``, ``nprocs`` (processes per host,
    one device each) x ``nnodes`` and ``batches`` (per device), on ``link``, in
    ``device_bytes[nproc]`` of memory per device (on the CPU the host's memory is shared by
    its ranks)."""

    strategies: Sequence[str]
    nprocs: Sequence[int]
    batches: Sequence[int]
    device_bytes: dict[int, int]
    nnodes: int = 1
    link: str | None = None
    prefetch: bool = False
    units: tuple[Unit, ...] = ()
    target: Target | None = None
    buffers: tuple[int, ...] | None = None  # the model's, per dtype: DDP's broadcasts
    train_samples: int | None = None  # the runs' training split (None: not recorded)


@dataclass
class Row:
    strategy: str
    nproc: int
    nnodes: int
    batch: int  # per device
    memory: MM.Point
    device_bytes: int
    prediction: M.Prediction | None = None
    samples_s: M.Figure = field(default_factory=lambda: M.Figure(None))
    scaled_from: int | None = None  # the measured batch whose steps were scaled
    runs: int = 0  # one-rank runs behind the step
    basis_ids: tuple[str, ...] = ()  # the one-rank runs behind the step
    efficiency: M.Figure = field(default_factory=lambda: M.Figure(None))
    efficiency_of: str | None = None  # the one-device row it is the ratio to, in words
    steps_to_target: M.Figure | None = None
    time_to_target_s: M.Figure | None = None
    reason: str | None = None  # why no step was predicted
    probes: int = 3  # the batch sizes the memory model's interval was drawn from
    data_samples: int | None = None  # the training samples each rank's epoch holds

    @property
    def over_data(self) -> bool:
        """More samples per device than the runs' data holds per rank: no full step in an
        epoch on that data (never a pick: ``candidates``)."""
        return Mx.over_share(self.batch, self.data_samples)

    @property
    def devices(self) -> int:
        return self.nproc * self.nnodes

    @property
    def trainers(self) -> int:
        return traits_of(self.strategy).training_ranks(self.devices)

    @property
    def global_batch(self) -> int:
        return self.batch * self.trainers

    @property
    def peak_bytes(self) -> int:
        return self.memory.peak_bytes

    @property
    def fit(self) -> CL.Claim:
        """Whether the row fits, as ``predict --memory`` decides it (``claim_kinds.memory_fit``):
        on the predicted peak's interval against the device's memory."""
        m = self.memory
        return CK.memory_fit(m.peak_bytes, m.low_bytes, m.high_bytes, self.device_bytes,
                             self.probes)

    @property
    def fits(self) -> bool:
        """Fits: the whole interval lies under the device's memory."""
        return self.fit.rule == CL.RULE_BELOW

    @property
    def does_not_fit(self) -> bool:
        """Does not fit: the whole interval lies over the device's memory."""
        return self.fit.rule == CL.RULE_ABOVE

    @property
    def fit_undecided(self) -> bool:
        """Neither: the device's memory lies inside the interval (inconclusive), or the peak
        has no interval (fewer than three batch sizes probed: not judged)."""
        return not (self.fits or self.does_not_fit)

    @property
    def headroom_bytes(self) -> int:
        return self.device_bytes - self.peak_bytes

    @property
    def headroom_at_top_bytes(self) -> int | None:
        """The device's memory less the interval's top (None: no interval): below 0, what
        the row would need beyond the device to fit."""
        hi = self.memory.high_bytes
        return None if hi is None else self.device_bytes - hi

    @property
    def tight(self) -> bool:
        """Fits, with the peak's interval reaching above the share of the device a diagnosis
        calls tight (its top: a peak of 85% whose interval reaches 93% is tight too)."""
        top = self.memory.high_bytes if self.memory.high_bytes is not None else self.peak_bytes
        return self.fits and top > TH.memory_tight_fraction * self.device_bytes

    @property
    def cost_h(self) -> M.Figure:
        """Device-hours to the target (with one), else per ``PER_SAMPLES`` samples."""
        t = self.time_to_target_s
        if t is not None and t.value is not None:
            return M.Figure(*(None if v is None else self.devices * v / 3600
                              for v in (t.value, t.lo, t.hi)))
        s = self.samples_s
        if not s.value:
            return M.Figure(None)
        return M.Figure(self.devices * PER_SAMPLES / s.value / 3600,
                        *(self.devices * PER_SAMPLES / v / 3600 if v else None
                          for v in (s.hi, s.lo)))

    def label(self) -> str:
        return f"{self.strategy}, batch {self.batch} per device, {self.devices} device" + \
            ("s" if self.devices != 1 else "")


def _scaled(c: Compute) -> float:
    """The phases that grow with the batch: data, copy, forward, backward."""
    return c.data + c.h2d + c.forward + c.backward


def batch_factor(bases: dict[int, Basis], basis: Basis, batch: int) -> tuple[float, str]:
    """How much the batch-bound phases of ``basis`` grow at ``batch``, and how that was
    found: between two measured batches, on the line through their means (a fixed cost and
    a cost per sample); outside them, in proportion to the batch."""
    lo = max((b for b in bases if b < batch), default=None)
    hi = min((b for b in bases if b > batch), default=None)
    if lo is not None and hi is not None:
        m0, m1 = (sum(map(_scaled, bases[b].sample.rows)) / len(bases[b].sample.rows)
                  for b in (lo, hi))
        at = m0 + (m1 - m0) * (batch - lo) / (hi - lo)
        mine = sum(map(_scaled, basis.sample.rows)) / len(basis.sample.rows)
        if mine > 0 and at > 0:
            return at / mine, f"interpolated between the runs at batch {lo} and {hi}"
    return batch / basis.batch, (f"scaled from the runs at batch {basis.batch} in proportion "
                                 "to the batch")


def at_batch(basis: Basis, batch: int, k: float | None = None) -> S.RunSample:
    """The basis's sample with its data, copy, forward and backward multiplied by ``k``
    (default: in proportion to ``batch``); the optimizer's step kept."""
    if batch == basis.batch:
        return W.fresh(basis.sample)
    k = batch / basis.batch if k is None else k
    rows = [replace(c, data=c.data * k, h2d=c.h2d * k, forward=c.forward * k,
                    backward=c.backward * k) for c in basis.sample.rows]
    step = basis.sample.step_median_s
    return replace(basis.sample, rows=rows, notes=[],
                   step_median_s=None if step is None else step * k)


def nearest(bases: dict[int, Basis], batch: int) -> Basis:
    """The measured batch nearest ``batch`` on a log scale (the smaller of a tie)."""
    return min(bases.values(), key=lambda b: (abs(math.log(batch / b.batch)), b.batch))


def _mean_step(s: S.RunSample) -> float:
    return sum(c.total for c in s.rows) / len(s.rows)


def rate(pred: M.Prediction, sample: S.RunSample, batch: int) -> M.Figure:
    """Samples/s: training ranks x batch over the predicted mean step, its interval the
    prediction's speedup's (the mean step at each end = trainers x the one-rank run's mean
    step / the speedup there)."""
    one = _mean_step(sample)
    sp = pred.speedup
    return M.Figure(*(None if v is None else Mx.samples_per_s(pred.trainers * batch,
                                                              pred.trainers * one / v)
                      for v in (sp.value, sp.lo, sp.hi)))


def to_target(tg: Target, row: Row) -> tuple[M.Figure, M.Figure]:
    """(steps, seconds) to the target at the row's global batch: the steps over B_crit's
    interval; the time = steps x the predicted mean step, the step's interval applied."""
    p = row.prediction
    assert p is not None and p.step_mean_s is not None and p.step_s.value
    b = row.global_batch
    ends = [tg.steps_at(b, x) for x in (tg.b_crit_lo, tg.b_crit_hi)]
    at = tg.steps_at(b)
    steps = M.Figure(at, min(ends), max(ends))
    lo_k = (p.step_s.lo or p.step_s.value) / p.step_s.value
    hi_k = (p.step_s.hi or p.step_s.value) / p.step_s.value
    mean = p.step_mean_s
    return steps, M.Figure(at * mean, min(ends) * mean * lo_k,
                           max(ends) * mean * hi_k)


def memory_rows(inputs: MM.Inputs, q: Question) -> list[Row]:
    """Every combination of the question with its predicted peak per rank. One device is
    planned once, under the first strategy: on one device the strategies train alike, and
    a wrapper's own cost there (FSDP's flat parameters on one rank) is not what a plan for
    many devices compares."""
    rows = []
    for strategy in q.strategies:
        for n in q.nprocs:
            world = n * q.nnodes
            if world < traits_of(strategy).min_world or (world == 1
                                                         and strategy != q.strategies[0]):
                continue
            for b in q.batches:
                rows.append(Row(strategy, n, q.nnodes, b, MM.predict(inputs, strategy, world, b),
                                q.device_bytes[n], probes=inputs.probes,
                                data_samples=share(q, strategy, world)))
    return rows


def share(q: Question, strategy: str, world: int) -> int | None:
    """The training samples each rank's epoch holds on ``world`` devices of ``strategy``."""
    return Mx.data_share(q.train_samples, traits_of(strategy).training_ranks(world))


def predict_row(r: Row, bases: dict[int, Basis], q: Question) -> None:
    """The row's step (``predict/whatif.plan``) and samples/s, and, with a target, the steps and
    time to it, whether it fits or not."""
    basis = bases.get(r.batch) or nearest(bases, r.batch)
    k, how = batch_factor(bases, basis, r.batch)
    sample = at_batch(basis, r.batch, k)
    link = q.link if r.devices > 1 else None  # one device crosses no link (nor rankN=)
    grid = W.Grid([r.strategy], [r.nproc], [r.nnodes], [link], prefetch=q.prefetch,
                  units=q.units, buffers=q.buffers)
    (got,) = W.plan(sample, grid, with_needed=False)
    r.prediction, r.runs, r.basis_ids = got.prediction, basis.runs, basis.run_ids
    if basis.sample.strategy != r.strategy:
        r.prediction.notes.append(other_basis_note(r.strategy, basis.sample.strategy))
    if basis.batch != r.batch:
        r.scaled_from = basis.batch
        r.prediction.notes.append(
            f"batch {r.batch}: not measured; its data, forward and backward {how} (the "
            "optimizer's step kept)")
    r.samples_s = rate(r.prediction, sample, r.batch)
    if q.target is not None:
        r.steps_to_target, r.time_to_target_s = to_target(q.target, r)


def other_basis_note(strategy: str, basis: str) -> str:
    """Why a row drawn from one-rank runs of another strategy may be short."""
    how = ("one process, not launched" if not traits_of(basis).launched
           else "another wrapper")
    return (f"{strategy}: its step drawn from one-rank runs of {basis} ({how}): what a "
            f"launched rank of {strategy} adds to them (its hooks and copies, its collective "
            f"on a world of one, the launcher) is not measured; a like-for-like basis: "
            f"scaleprobe run --strategy {strategy} --nproc 1")


def predict_steps(rows: list[Row], bases: dict[int, Basis], q: Question,
                  progress: Callable[[int, int], None] | None = None) -> None:
    """The step of every row that fits (``predict_row``), and of every row whose fit is
    inconclusive, so that what it would give is shown beside it (never a pick:
    ``candidates``); none for a row that does not fit, nor for one without an interval whose
    point estimate is over the device."""
    todo = [r for r in rows if r.fits or (r.fit_undecided and _low(r) <= r.device_bytes)]
    for i, r in enumerate(todo):
        if progress is not None:
            progress(i, len(todo))
        predict_row(r, bases, q)
    for r in rows:
        if r.does_not_fit:
            r.reason = f"{CL.DOES_NOT_FIT} in the device's memory: its whole interval over it"
        elif r.prediction is None:
            r.reason = (f"{CL.NO_INTERVAL} (fewer than three batch sizes probed) and its "
                        "predicted peak over the device's memory")


def _low(r: Row) -> int:
    """The peak's interval's low end, or without an interval the peak."""
    low = r.memory.low_bytes
    return r.peak_bytes if low is None else low


def one_device(inputs: MM.Inputs, bases: dict[int, Basis], q: Question, batch: int) -> Row:
    """The plan's one-device row at ``batch`` under its first strategy, predicted as the
    rows are (its step whether it fits or not): the basis of the efficiency of a plan whose
    ``--nproc`` has no 1, or whose one device cannot hold the batch."""
    s = q.strategies[0]
    r = Row(s, 1, 1, batch, MM.predict(inputs, s, 1, batch),
            q.device_bytes.get(1, max(q.device_bytes.values())), probes=inputs.probes,
            data_samples=share(q, s, 1))
    predict_row(r, bases, q)
    return r


def set_efficiency(rows: list[Row], ones: dict[int, Row]) -> None:
    """Each predicted row's efficiency: its samples/s over N x the samples/s of ``ones[its
    batch]`` (the plan's one-device row at that batch), with the row's prediction's interval
    carried over in proportion; the one-device row's own interval added when it is drawn
    from other one-rank runs (module docstring)."""
    for r in rows:
        one = ones.get(r.batch)
        s, p = r.samples_s, r.prediction
        if p is None or not s.value or one is None or not one.samples_s.value:
            continue
        if r is one:
            r.efficiency, r.efficiency_of = M.Figure(1.0), "itself"
            continue
        o, ov = one.samples_s, one.samples_s.value
        v = s.value / (r.devices * ov)
        sp = p.speedup
        lo = v * sp.lo / sp.value if sp.lo and sp.value else None
        hi = v * sp.hi / sp.value if sp.hi and sp.value else None
        paired = r.basis_ids == one.basis_ids and r.scaled_from == one.scaled_from
        if not paired and lo is not None and hi is not None:
            lo = lo * ov / o.hi if o.hi else None
            hi = hi * ov / o.lo if o.lo else None
        r.efficiency = M.Figure(v, lo, hi)
        r.efficiency_of = one.label() + ("" if any(x is one for x in rows) else
                                         " (predicted for this ratio, not a row)")


def plan(inputs: MM.Inputs, bases: dict[int, Basis], q: Question,
         progress: Callable[[int, int], None] | None = None) -> list[Row]:
    """The question's rows: memory for each, the step for each that fits."""
    if not bases:
        raise ValueError("no one-rank run to draw the step from")
    rows = memory_rows(inputs, q)
    W.check_grid(W.Grid(list(q.strategies), list(q.nprocs), [q.nnodes], [q.link]))
    predict_steps(rows, bases, q, progress)
    return rows


# ---- the picks ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Pick:
    kind: str  # claim.FASTEST | claim.CHEAPEST
    row: Row
    runner_up: Row | None
    claim: CL.Claim | None  # None: no runner-up to hold it against


def _speed(r: Row, to_target: bool) -> M.Figure:
    """Higher is better: samples/s, or 1 / time to the target."""
    if to_target:
        t = r.time_to_target_s
        if t is None or not t.value:
            return M.Figure(None)
        return M.Figure(1 / t.value, 1 / t.hi if t.hi else None, 1 / t.lo if t.lo else None)
    return r.samples_s


def _thrift(r: Row, to_target: bool) -> M.Figure:
    """Higher is better: 1 / device-hours."""
    c = r.cost_h
    if not c.value:
        return M.Figure(None)
    return M.Figure(1 / c.value, 1 / c.hi if c.hi else None, 1 / c.lo if c.lo else None)


def candidates(rows: list[Row]) -> list[Row]:
    """The rows a pick is made from: they fit (``Row.fits``: the whole interval under the
    device; an inconclusive row is never one), their step was predicted from compute
    their ranks can have (not ``Prediction.oversubscribed``), and the runs' data holds one
    batch per rank at least (not ``Row.over_data``)."""
    return [r for r in rows if r.fits and r.prediction is not None and r.samples_s.value
            and not r.prediction.oversubscribed and not r.over_data]


def pick(rows: list[Row], kind: str, sources: Callable[[Row], tuple[CL.Source, ...]],
         to_target: bool = False) -> Pick | None:
    """The best row that fits by ``kind`` (``claim.FASTEST``: samples/s or time to the
    target; ``claim.CHEAPEST``: device-hours), held against the runner-up."""
    score = _speed if kind == CL.FASTEST else _thrift
    got = [r for r in candidates(rows) if score(r, to_target).value]
    if not got:
        return None
    got.sort(key=lambda r: (-(score(r, to_target).value or 0.0), r.devices, -r.batch))
    best = got[0]
    if len(got) == 1:
        return Pick(kind, best, None, None)
    runner = got[1]
    a, b = score(best, to_target), score(runner, to_target)
    assert a.value is not None and b.value is not None
    lo = a.lo / b.hi if a.lo and b.hi else None
    hi = a.hi / b.lo if a.hi and b.lo else None
    n = min(best.runs, runner.runs)
    iv = (Interval(a.value / b.value, lo, hi, max(n, 1), "predicted intervals, pick's end "
                   "against the runner-up's") if lo is not None and hi is not None else None)
    what = ("1 / time to the target" if to_target else "samples/s") if kind == CL.FASTEST \
        else ("1 / device-hours to the target" if to_target else "1 / device-hours per sample")
    both = tuple(dict.fromkeys(sources(best) + sources(runner)))  # a run named once
    claim = CK.plan_pick(kind, best.label(), runner.label(), a.value / b.value, iv,
                         (best.runs, runner.runs), both, what)
    return Pick(kind, best, runner, claim)
