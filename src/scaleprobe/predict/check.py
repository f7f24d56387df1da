"""``predict --check``: every measured multi-rank run beside its prediction from the
matching one-rank run, predicted / measured with intervals. No torch.

Matching: a one-rank run (world size 1, status ok) of the same setting, i.e. the same model,
dataset, input size, batch per device, optimizer, precision, memory format, task, threads
per rank and CPU model. Of those, the strategy the prediction is best made from: a DDP run
for DDP (its buckets), a run without DDP (single) for a parameter server or local SGD, then
the other. Of that strategy, the nearest in time: the last started before the measured run
and the first after it (within ``MAX_AFTER_S``), each with any run started within
``SIDE_BY_SIDE_S`` of it (runs made side by side); their steps are pooled.

The link: the one the run crossed (``comm.measured_link``: the spec ``--link`` named across
hosts, or loopback on one host), resolved as ``predict --link`` resolves it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime

from scaleprobe.config.sections import LATER_DEFAULTS
from scaleprobe.core.errors import ConfigError
from scaleprobe.core.machine_load import run_load
from scaleprobe.core.result_model import RunResult
from scaleprobe.features.links import parse_spec, resolve_link
from scaleprobe.predict import sample as S
from scaleprobe.predict import stepmodel as M

SIDE_BY_SIDE_S = 30.0
MAX_AFTER_S = 900.0  # a one-rank run started later than this after the measured one is not
# its "after" run (the machine's load drifts); it is used only when there is no other
SETTING_KEYS = ("model.name", "data.dataset", "data.image_size", "train.optimizer",
                "train.amp", "model.channels_last", "task.task", "data.seq_len",
                "train.malloc")
# what must match for memory: glibc's thresholds move no tensor bytes
MEMORY_SETTING_KEYS = tuple(k for k in SETTING_KEYS if k != "train.malloc")
PREFER = {"ddp": ("ddp", "single", "fsdp"), "ps": ("single", "fsdp", "ddp"),
          "localsgd": ("single", "fsdp", "ddp"), "fsdp": ("fsdp", "single", "ddp")}
GOAL_MEDIAN, GOAL_EVERY = 0.10, 0.20  # the first goal: median point, every point
# the papers' form (Echo, Proteus, Lumos report mean and tail errors): mean and median within
# 5%, the 90th percentile within 10%, and no two configurations of one setting whose measured
# steps differ by more than ORDER_MARGIN predicted in the wrong order
GOAL_MEAN, GOAL_MEDIAN_PAPERS, GOAL_P90 = 0.05, 0.05, 0.10
ORDER_MARGIN = 0.15
# timed monitor samples a run's CPU figures need (its share of the machine, the CPU used
# outside it): the sampler reads each process's CPU since its last reading, so a window of
# a sample or two reads mostly what came before or after it (the launch, the rendezvous, the
# teardown): gpt_tiny's 20 steps of 21 ms read "7% of the machine" for two ranks that each
# kept a core busy, and two one-rank runs of 0.4 and 0.9 s read 1.86 and 1.89 cores outside
# them on a machine of 2 (their last samples read a tree clock that had lost its ended rank,
# measure/outside.py: that no longer happens, but a short window stays mostly its edges)
MIN_SAMPLES = 3


def setting_values(r: RunResult, keys: tuple[str, ...] = SETTING_KEYS) -> tuple[object, ...]:
    """The run's values of ``keys``."""
    return tuple(r.cfg(k, LATER_DEFAULTS.get(k)) for k in keys)  # older records: defaults


def setting(r: RunResult) -> tuple[object, ...]:
    """What must match between a measured run and its one-rank run."""
    return (*setting_values(r), r.batch.per_device, r.env.get("threads"),
            r.env.get("cpu_model"))


def _when(r: RunResult) -> float:
    try:
        return datetime.fromisoformat(str(r.started_at).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def matching(run: RunResult, pool: list[RunResult]) -> list[RunResult]:
    """The one-rank runs ``run`` is predicted from (see the module's docstring)."""
    want = setting(run)
    ones = [r for r in pool if (r.world_size or 1) == 1 and r.status == "ok"
            and setting(r) == want]
    for strategy in PREFER.get(str(run.cfg("dist.strategy")), ("single", "ddp")):
        cands = sorted((r for r in ones if str(r.cfg("dist.strategy") or "single") == strategy),
                       key=_when)
        if cands:
            return _nearest(run, cands)
    return []


def _nearest(run: RunResult, cands: list[RunResult]) -> list[RunResult]:
    t = _when(run)
    before = [r for r in cands if _when(r) <= t]
    after = [r for r in cands if t < _when(r) <= t + MAX_AFTER_S]
    anchors = ([before[-1]] if before else []) + ([after[0]] if after else [])
    if not anchors:  # only runs long after: the first of them
        anchors = cands[:1]
    return [r for r in cands if any(abs(_when(r) - _when(a)) <= SIDE_BY_SIDE_S
                                    for a in anchors)]


def pooled(runs: list[RunResult]) -> S.RunSample:
    """One RunSample of several one-rank runs: their steps together."""
    samples = [S.from_run(r) for r in runs]
    first = samples[0]
    rows = [c for s in samples for c in s.rows]
    groups = tuple(i for i, s in enumerate(samples) for _ in s.rows)
    return replace(first, label=" + ".join(s.label for s in samples), rows=rows,
                   groups=groups if len(samples) > 1 else None,
                   rows_source="; ".join(s.rows_source for s in samples),
                   pass_s_per_byte=_mean([s.pass_s_per_byte for s in samples]),
                   fresh_s_per_byte=_mean([s.fresh_s_per_byte for s in samples]), notes=[])


def _first(xs: Iterable[tuple[int, ...] | None]) -> tuple[int, ...] | None:
    return next((x for x in xs if x is not None), None)


def _mean(xs: list[float | None]) -> float | None:
    got = [x for x in xs if x]
    return sum(got) / len(got) if got else None


def scenario_of(run: RunResult) -> M.Scenario:
    """The measured run's setting as a scenario: strategy, processes, hosts, its link."""
    c = run.comm
    named = (c.measured_link or {}).get("name") if c is not None else None
    nnodes = int(run.cfg("dist.nnodes") or 1)
    if not named:
        raise ConfigError("the link it crossed is unknown (several hosts, no --link)")
    spec = parse_spec(named)
    base = resolve_link(spec.base, nnodes) if spec.base else resolve_link(None, nnodes)
    ranks = {r: resolve_link(x, nnodes) for r, x in spec.per_rank.items()}
    return M.Scenario(str(run.cfg("dist.strategy")), int(run.cfg("dist.nproc") or 1), nnodes,
                      base, ranks, int(run.cfg("dist.average_every") or 4))


@dataclass
class Point:
    """One measured run beside its prediction."""

    run: RunResult
    bases: list[RunResult] = field(default_factory=list)
    prediction: M.Prediction | None = None
    reason: str | None = None  # why there is no prediction
    # the outside load's stretch of compute the prediction took (``load_factor``): the
    # measured run's outside CPU against its one-rank runs' (1: none, or not measured)
    load: float = 1.0
    # the link's gloo socket threads as benchmarked (``Link.gloo_io``), where it was measured
    link_gloo_io: str | None = None

    @property
    def measured_s(self) -> float | None:
        return self.run.step_median_s

    @property
    def measured_interval(self) -> tuple[float, float] | None:
        st = self.run.metrics.step_time_s
        if st is None or st.median is None or st.rel_ci is None:
            return None
        return st.median * (1 - st.rel_ci), st.median * (1 + st.rel_ci)

    @property
    def ratio(self) -> float | None:
        p, m = self.prediction, self.measured_s
        return p.step_s.value / m if p is not None and p.step_s.value and m else None

    @property
    def ratio_interval(self) -> tuple[float, float] | None:
        p, iv = self.prediction, self.measured_interval
        if p is None or iv is None or p.step_s.lo is None or p.step_s.hi is None:
            return None
        return p.step_s.lo / iv[1], p.step_s.hi / iv[0]

    @property
    def drift(self) -> float | None:
        """How far this point's one-rank runs moved while it was measured: ``|after / before
        - 1|`` of the mean median step of those started after the measured run and of those
        started before it (None without both). The machine's own drift over those minutes:
        a perfect model fed one of them would be off by as much against the other."""
        t = _when(self.run)
        before = [b.step_median_s for b in self.bases if _when(b) <= t and b.step_median_s]
        after = [b.step_median_s for b in self.bases if _when(b) > t and b.step_median_s]
        if not before or not after:
            return None
        return error((sum(after) / len(after)) / (sum(before) / len(before)))

    @property
    def under_load(self) -> bool:
        """Whether the measured run was measured under load (``core/machine_load.run_load``,
        the report's rule), whatever its error: a prediction that matches a loaded run may
        match its load, not the machine."""
        return bool(run_load(self.run)[0])

    def causes(self) -> list[str]:
        """Where prediction and measurement part, phase by phase (compute, communication);
        a measured run under load says so at any error."""
        p, bd = self.prediction, self.run.metrics.breakdown_s
        mine = str(self.run.cfg("dist.gloo_io") or "default")
        out = ([f"measured with --gloo-io {mine}, its link benchmarked with --gloo-io "
                f"{self.link_gloo_io}: gloo's small collectives differ between the two"]
               if self.link_gloo_io and self.link_gloo_io != mine else [])
        flag, reason = run_load(self.run)
        load = [f"measured under load ({reason})"] if flag else []
        if p is None or self.ratio is None or abs(self.ratio - 1) <= GOAL_MEDIAN:
            return out + load
        pc = sum(p.phases[k] for k in ("forward", "backward"))
        mc = (bd.forward or 0.0) + (bd.backward or 0.0)
        if mc and abs(pc / mc - 1) > 0.1:
            out.append(f"forward+backward measured {mc * 1e3:.0f} ms, predicted {pc * 1e3:.0f} "
                       f"ms from the 1-rank run ({pc / mc:.2f}x)")
        if bd.comm is not None and abs(p.phases["comm"] - bd.comm) > 0.1 * (self.measured_s
                                                                             or 0.0):
            out.append(f"communication measured {bd.comm * 1e3:.0f} ms, predicted "
                       f"{p.phases['comm'] * 1e3:.0f} ms")
        return out + load


def check(records: list[RunResult], seed: int = 0) -> list[Point]:
    """Every measured multi-rank run of ``records`` with its prediction, in time order."""
    ok = [r for r in records if r.status == "ok"]
    points = []
    measured = [r for r in ok if (r.world_size or 1) > 1 and r.step_median_s is not None
                and not r.cfg("dist.node_rank")]  # another host's own record has no figures
    for run in sorted(measured, key=_when):
        pt = Point(run)
        pt.bases = matching(run, ok)
        if not pt.bases:
            pt.reason = ("no matching 1-rank run (same model, data, batch per device, "
                         "threads per rank, CPU)")
        else:
            try:
                # FSDP's units (a collective each, each paying the latency); others ignore
                sc = replace(scenario_of(run), units=S.recorded_units(pt.bases[-1])
                             or S.recorded_units(run),
                             buffers=_first(S.recorded_buffers(b) for b in (*pt.bases, run)))
                if sc.link.source.startswith("measured:"):
                    pt.link_gloo_io = sc.link.gloo_io
                sample, pt.load = as_measured(run, pt.bases)
                pt.prediction = M.predict(sample, sc, seed)
            except ConfigError as e:
                pt.reason = str(e)
        points.append(pt)
    return points


def as_measured(run: RunResult, bases: list[RunResult]) -> tuple[S.RunSample, float]:
    """The one-rank runs ``bases`` pooled, their compute stretched to the outside load
    ``run`` was measured under (on the CPU: ``load_factor``), and that factor."""
    sample = pooled(bases)
    factor = load_factor(run, bases) if sample.on_cpu else 1.0
    return S.stretched(sample, factor), factor


def load_factor(run: RunResult, bases: list[RunResult]) -> float:
    """How much longer the measured run's compute took for the outside load on the machine
    during its window than its one-rank runs' did during theirs: ``(1 + u) / (1 + u1)``, ``u``
    the cores' worth of CPU that processes outside the run used (``outside_cores``,
    companions excepted), ``u1`` the one-rank runs' median; 1 where the run's or all of its
    one-rank runs' windows were too short to read.

    Outside work takes its CPU from a rank's compute where the ranks keep every core busy (a
    2-rank run on 2 cores, one thread each, as on the validation grid), and a step waits for
    its slowest rank: a thread outside using ``u`` of a core delays the step by ``u`` of its
    compute. Where cores sit idle it can run there instead: a run that left some idle is
    taken to have lost nothing to it (``outside_cores``)."""
    u = outside_cores(run)
    got = [x for x in (outside_cores(b) for b in bases) if x is not None]
    if u is None or not got:
        return 1.0
    return (1.0 + max(0.0, u)) / (1.0 + max(0.0, statistics.median(got)))


def readable_window(r: RunResult) -> bool:
    """Whether ``r``'s timed window held ``MIN_SAMPLES`` of its monitor's samples."""
    timed = (r.step_median_s or 0.0) * (r.metrics.steps_timed or 0)
    every = r.config.measure.monitor_interval_s if r.config is not None else 0.5
    return timed >= MIN_SAMPLES * every


def outside_cores(r: RunResult) -> float | None:
    """The cores' worth of CPU processes outside ``r`` used over its timed window, as far as
    it took that CPU from ``r``'s compute: where the window was long enough to read it
    (``readable_window``; None else), and 0 where ``r`` left cores idle for it to run on
    (``fills_cores``)."""
    if not readable_window(r):
        return None
    u = r.metrics.outside_cpu_cores
    return None if u is None else (u if fills_cores(r) else 0.0)


def fills_cores(r: RunResult) -> bool:
    """Whether ``r``'s ranks on this host, with the runs started together with it (its
    companions, taken to be of its size), kept a thread on every core of the machine."""
    load = r.load
    threads = r.env_number("threads")
    if load is None or not load.machine_cores or not threads:
        return False
    ranks = int(r.cfg("dist.nproc") or 1) * (1 + (load.companion_runs or 0))
    return ranks * threads >= load.machine_cores


@dataclass
class Summary:
    points: int
    median_abs_error: float | None
    worst_abs_error: float | None
    within_median_goal: int
    within_every_goal: int
    mean_abs_error: float | None = None
    p90_abs_error: float | None = None  # nearest rank: the ceil(0.9 n)-th smallest
    # the points with a predicted 95% interval, and those whose measured median step lies in
    # it: an interval that is a claim holds about 95% of them
    with_interval: int = 0
    inside_interval: int = 0
    # the points whose one-rank runs were measured both before and after them, and the
    # median and p90 (nearest rank) of their drift (``Point.drift``): the floor the machine
    # itself lays under any prediction's error
    drift_points: int = 0
    median_drift: float | None = None
    p90_drift: float | None = None
    # each strategy's mean predicted / measured over its points, and how many: where the
    # errors lean one way (below 1: predicted short), which the absolute errors do not say
    ratio_by_strategy: dict[str, tuple[float, int]] = field(default_factory=dict)

    @property
    def goal_met(self) -> bool:
        return (self.median_abs_error is not None and self.median_abs_error <= GOAL_MEDIAN
                and self.within_every_goal == self.points)

    @property
    def papers_goal_met(self) -> bool:
        """Mean and median within 5%, p90 within 10% (the ordering is ``order_pairs``')."""
        return (self.mean_abs_error is not None and self.mean_abs_error <= GOAL_MEAN
                and self.median_abs_error is not None
                and self.median_abs_error <= GOAL_MEDIAN_PAPERS
                and self.p90_abs_error is not None and self.p90_abs_error <= GOAL_P90)


def error(ratio: float) -> float:
    """A prediction's relative error ``|predicted / measured - 1|``, rounded to 9 places: a
    prediction 10% off as printed (a ratio of 1.1 is 0.10000000000000009 off in floats)
    counts within the 10% goal, as the goal's edges are inclusive."""
    return round(abs(ratio - 1), 9)


def _median(xs: list[float]) -> float | None:
    """The median of ``xs`` (None when empty)."""
    return statistics.median(xs) if xs else None


def _p90(xs: list[float]) -> float | None:
    """The 90th percentile of sorted ``xs``, nearest rank: the ceil(0.9 n)-th smallest."""
    return xs[math.ceil(0.9 * len(xs)) - 1] if xs else None


def summary(points: list[Point]) -> Summary:
    errs = sorted(error(p.ratio) for p in points if p.ratio is not None)
    mid = _median(errs)
    preds = [(pr.step_s, p.measured_s) for p in points
             if p.ratio is not None and (pr := getattr(p, "prediction", None)) is not None]
    spans = [(st.lo, st.hi, m) for st, m in preds if st.lo is not None and st.hi is not None]
    drifts = sorted(d for p in points if p.ratio is not None
                    and (d := getattr(p, "drift", None)) is not None)
    return Summary(len(errs), mid, errs[-1] if errs else None,
                   sum(e <= GOAL_MEDIAN for e in errs), sum(e <= GOAL_EVERY for e in errs),
                   round(sum(errs) / len(errs), 9) if errs else None,
                   _p90(errs), len(spans),
                   sum(lo <= m <= hi for lo, hi, m in spans if m is not None),
                   len(drifts), _median(drifts), _p90(drifts), _by_strategy(points))


def _by_strategy(points: list[Point]) -> dict[str, tuple[float, int]]:
    """Each strategy's mean ratio over its points with one, and their number."""
    got: dict[str, list[float]] = {}
    for p in points:
        if p.ratio is not None and (run := getattr(p, "run", None)) is not None:
            got.setdefault(str(run.cfg("dist.strategy")), []).append(p.ratio)
    return {k: (round(statistics.fmean(v), 9), len(v)) for k, v in sorted(got.items())}


@dataclass(frozen=True)
class Pair:
    """Two measured configurations of one setting, the slower second: measured and
    predicted slower / faster step."""

    fast: Point
    slow: Point
    measured_ratio: float
    predicted_ratio: float

    @property
    def misordered(self) -> bool:
        """The prediction puts them in the other order, or cannot tell them apart."""
        return self.predicted_ratio <= 1.0


def order_pairs(points: list[Point], margin: float = ORDER_MARGIN) -> list[Pair]:
    """Every pair of predicted points of one setting (``setting``: model, data, batch,
    threads, CPU) whose measured steps differ by more than ``margin``, with the ratio the
    prediction gives the same two."""
    got = [p for p in points if p.prediction is not None and p.prediction.step_s.value
           and p.measured_s]
    out = []
    for i, a in enumerate(got):
        for b in got[i + 1:]:
            if setting(a.run) != setting(b.run):
                continue
            fast, slow = (a, b) if (a.measured_s or 0) <= (b.measured_s or 0) else (b, a)
            m = (slow.measured_s or 0) / (fast.measured_s or 1)
            if m <= 1 + margin:
                continue
            ps, pf = slow.prediction, fast.prediction
            assert ps is not None and pf is not None
            out.append(Pair(fast, slow, m, (ps.step_s.value or 0) / (pf.step_s.value or 1)))
    return out
