"""A multi-rank step predicted from one measured run: the timeline (``predict/timeline.py``) run
over many steps whose compute is drawn from the run's own timed steps, one independent draw
per rank and step, so that ranks wait for the slowest as they do. No torch.

It gives the predicted median step (``step_s``) with its 95% interval (a bootstrap over the
run's steps, the link fit's error, and for 2 or more processes the model's own), the speedup
over the one-rank run (mean steps, weak scaling) and efficiency, and the phases on the median
step's basis. The scenario and its costs on the links are ``predict/layout.py``'s;
docs/COMMUNICATION.md ("Costs on the link", "Intervals") gives the link costs, how pooled
runs are resampled and what one run's interval cannot hold.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from scaleprobe.core.errors import ConfigError
from scaleprobe.core.traits import traits_of
from scaleprobe.features.links import MMAP_BYTES
from scaleprobe.predict import layout as L
from scaleprobe.predict import sample as S
from scaleprobe.predict import timeline as T
from scaleprobe.predict.layout import Scenario as Scenario  # the scenario: part of this API
from scaleprobe.predict.layout import Simulator, simulator

SIM_STEPS = 200  # steps simulated for the point estimate
REPLICATES = 100  # bootstrap resamples for the interval
REPLICATE_STEPS = 20  # steps per resample: about as many as a run times
DEFAULT_PASS_S_PER_BYTE = 1.0 / 2e9  # 2 GB/s: one fp32 pass, 1 CPU thread (assumed)
PHASES = ("data", "h2d", "forward", "backward", "optimizer", "comm")
FREE = 1e-9  # the link's costs scaled to nothing: what remains of the comm phase
NEEDED_FLOOR_GBIT_S = 1e-3  # the slowest link searched: 1 Mbit/s (slower: "< 1 Mbit/s")
# The most processes a prediction lays out: every rank's timeline is simulated, step by step
# (SIM_STEPS + 2 x REPLICATES x REPLICATE_STEPS steps). Measured on the 2-core reference
# machine under load, 2026-11-28: ddp 2.3 s, localsgd 1.1 s, fsdp 2.4 s at 128 processes
# (6.3 s for ddp at 256); the parameter server shares its link among the pushes (fluid.py),
# which grows with the square: 2.6 s at 32, 12.8 s at 64, 119 s at 256.
MAX_WORLD = 128
ONE_RUN_NOTE = ("one one-rank run: the interval holds its own step-to-step spread and the "
                "model's error as validated, not the drift between runs (what else the cores "
                "do: other ranks, the collective's threads, other jobs); pool two or more "
                "one-rank runs of the setting for it")
MAX_WORLD_BY_PATTERN = {"ps": 32}
# The step model's own error, added to every multi-rank prediction's interval in quadrature on
# the log scale (``with_model_error``). Set from the validation grid's two quiet 27-point
# grids of 2026-11-29 (2 CPU ranks on one host over three links, gloo's socket threads at
# SCHED_BATCH, pooled one-rank runs): what each point's bootstrap interval lacked to hold its
# measured step. The measured steps came out longer than predicted far more often than
# shorter (the ranks' lockstep on one host's memory, not priced), so the two ends differ:
# 10% above and 5% below held 52 of those 54 points and 77 of 81 on three earlier grids
# (docs/COMMUNICATION.md, "Intervals"). Not validated beyond 2 ranks, nor on a GPU.
MODEL_LONGER = 0.10  # measured steps up to this much longer than predicted (log scale)
MODEL_SHORTER = 0.05  # and up to this much shorter


@dataclass
class Figure:
    value: float | None
    lo: float | None = None
    hi: float | None = None

    def to_dict(self) -> dict[str, float | None]:
        return {"value": self.value, "lo": self.lo, "hi": self.hi}


@dataclass
class Prediction:
    strategy: str
    world: int
    trainers: int
    link: str
    link_source: str
    bandwidth_gbit_s: float
    alpha_s: float
    step_s: Figure
    step_mean_s: float | None
    one_rank_step_s: float | None
    speedup: Figure
    efficiency: Figure
    phases: dict[str, float]
    comm_busy_s: float  # the link's time per step (all of it, hidden or not)
    # the comm phase on a link that costs nothing: waiting for the slowest rank (the run's
    # own spread, drawn per rank) and the strategy's local work
    comm_free_link_s: float
    threads: int | None
    notes: list[str]
    # its ranks on one host need more cores than the host has, at the run's threads per rank
    # (``oversubscribed``): the compute it is drawn from is not theirs
    oversubscribed: bool = False

    def to_dict(self) -> dict[str, object]:
        out = dict(self.__dict__)
        for k in ("step_s", "speedup", "efficiency"):
            out[k] = getattr(self, k).to_dict()
        return out


def max_world(strategy: str) -> int:
    """The most processes the step model lays out for ``strategy`` in seconds."""
    pattern = traits_of(strategy).comm_pattern
    return MAX_WORLD if pattern is None else MAX_WORLD_BY_PATTERN.get(pattern, MAX_WORLD)


def _draw(rows: Sequence[T.Compute], steps: int, ranks: int,
          rng: np.random.Generator) -> list[list[T.Compute]]:
    idx = rng.integers(0, len(rows), size=(steps, ranks))
    return [[rows[i] for i in row] for row in idx]


def _head(steps: list[list[T.RankStep]]) -> list[T.RankStep]:
    return [row[0] for row in steps]


@dataclass
class Run:
    """A simulated sequence of steps: the first training rank's."""

    head: list[T.RankStep]

    @property
    def median(self) -> float:
        return float(np.median([h.step_s for h in self.head]))

    @property
    def mean(self) -> float:
        return float(np.mean([h.step_s for h in self.head]))


def _simulate(sim: Simulator, rows: Sequence[T.Compute], sc: Scenario, steps: int,
              scale: float, rng: np.random.Generator, every_row: bool = False) -> Run:
    """``steps`` steps drawn from ``rows`` per training rank; with one training rank and
    ``every_row``, each row once instead (no rank waits for another: the rows as they are,
    without the draw's noise: a heavy-tailed run's mean over 200 draws moved by 8%)."""
    drawn = ([[r] for r in rows] if every_row and sc.trainers == 1
             else _draw(rows, steps, sc.trainers, rng))
    return Run(_head(sim(drawn, scale, sc.world)))


def _phases(head: list[T.RankStep], median: float) -> dict[str, float]:
    """Each phase's mean over the steps, laid over the median step (the run's basis)."""
    total = sum(h.step_s for h in head)
    return {p: sum(getattr(h, p) for h in head) / total * median for p in PHASES}


def predict(s: S.RunSample, sc: Scenario, seed: int = 0,
            replicates: int = REPLICATES) -> Prediction:
    """The step of ``sc`` from the one-rank run ``s`` (``replicates``: bootstrap resamples
    for the interval). The speedup is samples per second (the mean step: local SGD's
    averaging steps count) over the run's own, as measured."""
    if sc.world < max(1, sc.traits.min_world):
        raise ConfigError(f"{sc.strategy} needs at least {max(1, sc.traits.min_world)} "
                          f"processes, not {sc.world}")
    copies = sc.traits.explicit_comm  # ps and local SGD copy flat buffers (memory passes)
    pass_s = s.pass_s_per_byte or DEFAULT_PASS_S_PER_BYTE
    if s.pass_s_per_byte is None and copies:
        s.notes.append(f"memory pass assumed {1 / DEFAULT_PASS_S_PER_BYTE / 1e9:g} GB/s (the "
                       "run measured none: no memory probe, no DDP bucket of 4 MiB or more)")
    elif (s.fresh_s_per_byte is None and s.grad_bytes >= MMAP_BYTES
          and copies):
        s.notes.append("copies into fresh buffers priced as passes over touched memory (the "
                       "run measured no first-touch cost): low for buffers over 32 MiB")
    sim, rows = simulator(sc, s, pass_s)
    _straggler_note(s, sc)
    crowded = oversubscribed(s, sc)
    if crowded:
        s.notes.append(crowded)
    if sc.world > 1:  # a fit measured under load: said with every prediction it prices
        s.notes.extend(x.caveat for x in (sc.link, *sc.rank_links.values()) if x.caveat)
    rng = np.random.default_rng(seed)
    one = [c.total for c in s.rows]  # the run as measured: every strategy's baseline
    run = _simulate(sim, rows, sc, SIM_STEPS, 1.0, rng, every_row=True)
    step = run.median
    groups = s.groups if s.groups is not None and len(s.groups) == len(rows) else None
    if groups is None and sc.world > 1:
        s.notes.append(ONE_RUN_NOTE)
    iv = _interval(sim, rows, one, sc, rng, replicates, groups)
    ratio = [sc.trainers * float(np.mean(one)) / run.mean, *(sc.trainers * r for r in iv.ratio)]
    step_lo, step_hi = iv.step
    if sc.world > 1:  # one process is the run itself: no model between them
        step_lo, step_hi = with_model_error(step, step_lo, step_hi, MODEL_SHORTER, MODEL_LONGER)
        ratio[1:] = with_model_error(ratio[0], ratio[1], ratio[2], MODEL_LONGER, MODEL_SHORTER)
    sp = Figure(*ratio)
    eff = Figure(*(v / sc.world for v in ratio))
    free = (_simulate(sim, rows, sc, SIM_STEPS, FREE, rng, every_row=True) if sc.world > 1
            else run)
    slow = L.slowest(sc)
    return Prediction(
        strategy=sc.strategy, world=sc.world, trainers=sc.trainers, link=slow.name,
        link_source=slow.source, bandwidth_gbit_s=slow.bandwidth_gbit_s, alpha_s=slow.alpha_s,
        step_s=Figure(step, step_lo, step_hi), step_mean_s=run.mean, one_rank_step_s=float(
            np.median(one)), speedup=sp, efficiency=eff, phases=_phases(run.head, step),
        comm_busy_s=_busy(sim, sc), comm_free_link_s=_phases(free.head, free.median)["comm"],
        threads=s.threads, notes=list(dict.fromkeys(s.notes)), oversubscribed=bool(crowded))


def oversubscribed(s: S.RunSample, sc: Scenario) -> str | None:
    """Why ``sc``'s ranks cannot compute as the CPU run ``s`` did, or None: ``nproc`` of them
    on one host, at the run's threads each, need more cores than the run's host has. They
    would share cores the run had to itself, and the prediction, drawn from its steps, is
    not theirs (a like-for-like basis: a one-rank run at the threads each would get)."""
    if not s.on_cpu or not s.threads or not s.cores or sc.nproc * s.threads <= s.cores:
        return None
    each = s.cores // sc.nproc
    where = (f"a one-rank run with --set dist.threads_per_rank={each} is the like-for-like "
             "basis" if each >= 1 else "more processes than cores: no run of one rank is "
             "like them")
    cores = f"{s.cores} core{'s' if s.cores > 1 else ''}"
    return (f"{sc.nproc} processes x {s.threads} thread(s) on a host of {cores}, as the run "
            "had them: its ranks would share cores the run had to itself and compute slower "
            f"than it did, which this prediction does not hold ({where})")


def with_model_error(value: float, lo: float, hi: float, below: float,
                     above: float) -> tuple[float, float]:
    """``lo``, ``hi`` around ``value`` widened by the model's own relative error (``below``
    under the value, ``above`` over it), each end's log distance and the error's added in
    quadrature; an end on the wrong side of the value counts as none."""
    if not value > 0:
        return lo, hi
    down = math.log(value / lo) if lo and 0 < lo < value else 0.0
    up = math.log(hi / value) if hi and hi > value else 0.0
    return (value * math.exp(-math.hypot(down, below)),
            value * math.exp(math.hypot(up, above)))


def _straggler_note(s: S.RunSample, sc: Scenario) -> None:
    """Which rank the others wait for, when a rank sits behind a slower link of its own."""
    slow = [(link.bandwidth_gbit_s, r) for r, link in sc.rank_links.items()
            if 0 < r < sc.world and link.bandwidth_gbit_s < sc.link.bandwidth_gbit_s]
    if not slow:
        return
    gbit, rank = min(slow)
    if sc.traits.has_server:
        s.notes.append(f"straggler: rank {rank} (behind {gbit:g} Gbit/s): its push reaches the "
                       "server last and its pull leaves last; the others wait for it")
    else:
        s.notes.append(f"straggler: rank {rank} (behind {gbit:g} Gbit/s) holds the ring to its "
                       "cable's rate")


@dataclass(frozen=True)
class Interval:
    step: tuple[float, float]  # the median step's
    ratio: tuple[float, float]  # the run's mean step / the mean step, paired per resample


def _resample(n: int, groups: Sequence[int] | None, rng: np.random.Generator) -> list[int]:
    """Indices of one bootstrap resample of ``n`` steps; with ``groups`` (the run of each
    step, two runs or more) the runs are drawn with replacement first, then steps within
    each drawn run: a two-level bootstrap, whose spread holds the runs' drift."""
    if groups is None or len(set(groups)) < 2:
        return [int(i) for i in rng.integers(0, n, size=n)]
    by: dict[int, list[int]] = {}
    for i, g in enumerate(groups):
        by.setdefault(g, []).append(i)
    runs = list(by.values())
    out: list[int] = []
    for k in rng.integers(0, len(runs), size=len(runs)):
        members = runs[int(k)]
        out += [members[int(j)] for j in rng.integers(0, len(members), size=len(members))]
    return out


def _interval(sim: Simulator, rows: list[T.Compute], one: list[float], sc: Scenario,
              rng: np.random.Generator, replicates: int,
              groups: Sequence[int] | None = None) -> Interval:
    """Percentiles 2.5 / 97.5 over bootstrap resamples of the run's steps (``_resample``:
    runs first where several are pooled): of the median step (the link's costs scaled down
    by the spread for the low end, up for the high end), and of the run's mean step over the
    predicted mean (same resample; the high costs for the low end)."""
    lows, highs, r_lo, r_hi = [], [], [], []
    for _ in range(replicates if len(rows) > 1 else 1):
        pick = _resample(len(rows), groups, rng)
        pool = [rows[i] for i in pick]
        base = float(np.mean([one[i] for i in pick]))
        lo = _simulate(sim, pool, sc, REPLICATE_STEPS, 1 - sc.spread, rng)
        hi = _simulate(sim, pool, sc, REPLICATE_STEPS, 1 + sc.spread, rng)
        lows.append(lo.median)
        highs.append(hi.median)
        r_lo.append(base / hi.mean)
        r_hi.append(base / lo.mean)
    return Interval((float(np.percentile(lows, 2.5)), float(np.percentile(highs, 97.5))),
                    (float(np.percentile(r_lo, 2.5)), float(np.percentile(r_hi, 97.5))))


def _busy(sim: Simulator, sc: Scenario) -> float:
    """The link's time per step with compute taken away (zero compute, one step): what the
    communication costs whether hidden or not."""
    if sc.world < 2:
        return 0.0
    return sim([[T.Compute()] * sc.trainers], 1.0, sc.world)[0][0].step_s


def free_link_efficiency(s: S.RunSample, sc: Scenario) -> float:
    """The efficiency on a link that costs nothing (no bandwidth limit, no latency): what the
    ranks' waiting for the slowest and the strategy's local work leave."""
    sim, rows = simulator(sc, s, s.pass_s_per_byte or DEFAULT_PASS_S_PER_BYTE)
    step = _simulate(sim, rows, sc, SIM_STEPS, FREE, np.random.default_rng(0),
                     every_row=True).mean
    return sc.trainers * float(np.mean([c.total for c in s.rows])) / step / sc.world


def needed_link_gbit_s(s: S.RunSample, sc: Scenario, target: float = 0.9) -> float | None:
    """The slowest link (Gbit/s, the scenario's latency kept) at which the predicted
    efficiency reaches ``target``; None when no bandwidth does (latency, a server that takes
    no batch, or the run's compute alone). Bisection on a log scale, point estimates, each
    simulated as ``predict``'s point estimate is (its steps, its draw, the buffers'
    broadcasts), so that at the row's own bandwidth it gives the row's efficiency: the link
    needed for 90% is never at or under a link whose row says less."""
    one = float(np.mean([c.total for c in s.rows]))

    def eff_at(gbit: float) -> float:
        # the bandwidth searched is every collective's (the link's own per-op fits dropped)
        link = replace(sc.link, bandwidth_gbit_s=gbit, spread=0.0, ops=())
        sc2 = replace(sc, link=link, rank_links={})
        sim, rows = simulator(sc2, s, s.pass_s_per_byte or DEFAULT_PASS_S_PER_BYTE)
        step = _simulate(sim, rows, sc2, SIM_STEPS, 1.0, np.random.default_rng(0),
                         every_row=True).mean
        return sc.trainers * one / step / sc.world

    lo, hi = NEEDED_FLOOR_GBIT_S, 1e5
    if sc.world < 2:
        return 0.0
    if eff_at(hi) < target:
        return None
    if eff_at(lo) >= target:
        return lo
    for _ in range(40):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if eff_at(mid) < target else (lo, mid)
        if hi / lo < 1.02:
            break
    return hi
