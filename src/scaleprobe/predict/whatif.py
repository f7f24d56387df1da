"""What if: one measured one-rank run's step predicted for other process counts, hosts,
links and strategies (``scaleprobe predict --from``, the report's what-if section).

    plan(sample, Grid(strategies, nprocs, nnodes, links))  ->  one Row per combination

Each Row holds the prediction (``predict/stepmodel.Prediction``: step, speedup, efficiency,
where the time goes) and the slowest link that would give 90% efficiency. Links are specs as
``--link`` takes them (``features/links.py``); per-rank items (``1gbit,rank2=100mbit``) put a
rank behind a link of its own. FSDP's units come from the model (its sharding rule, on the
meta device, by ``scaleprobe predict``: no weights), each unit's share of compute taken as
its share of the parameters (an assumption, noted with the prediction). No torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from scaleprobe.core.errors import ConfigError
from scaleprobe.core.result_model import RunResult
from scaleprobe.core.traits import traits_of
from scaleprobe.features.links import Link, parse_spec, resolve_link
from scaleprobe.predict import sample as S
from scaleprobe.predict import stepmodel as M
from scaleprobe.predict import timeline as T

STRATEGIES = ("ddp", "ps", "localsgd", "fsdp")
DEFAULT_STRATEGIES = ("ddp", "ps", "localsgd")
UNITS_NOTE = ("fsdp: each unit's share of forward and backward taken as its share of the "
              "parameters (not measured per unit)")


@dataclass
class Row:
    link_spec: str
    nproc: int
    nnodes: int
    prediction: M.Prediction
    needed_gbit_s: float | None
    needed_reason: str | None


def parse_counts(text: str | int | None, what: str) -> list[int]:
    """``"2,4,8"`` -> [2, 4, 8]; a ConfigError for anything below 1 or not a number."""
    if text is None:
        return [1]
    try:
        vals = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"{what} takes numbers separated by commas, e.g. 2,4,8; got "
                          f"'{text}'") from None
    if not vals or min(vals) < 1:
        raise ConfigError(f"{what} must be at least 1, got '{text}'")
    return vals


def parse_strategies(text: str | None) -> list[str]:
    names = [x.strip().lower() for x in (text or ",".join(DEFAULT_STRATEGIES)).split(",")
             if x.strip()]
    bad = [x for x in names if x not in STRATEGIES]
    if bad:
        raise ConfigError(f"no step model for strategy '{bad[0]}' (choices: "
                          f"{', '.join(STRATEGIES)})")
    return names


def check_ranks(spec: str | None, world: int) -> None:
    """A ConfigError when ``spec`` puts a rank behind its own link that ``world`` processes
    do not have (``1gbit,rank9=100mbit`` for 2 processes)."""
    bad = sorted(r for r in parse_spec(spec).per_rank if r >= world)
    if bad:
        raise ConfigError(f"--link names rank {bad[0]}, but {world} process"
                          f"{'es have ranks 0..' + str(world - 1) if world > 1 else ' has rank 0'}")


def check_gpu_link(on_cuda: bool, links: Sequence[str | None], nnodes: Sequence[int],
                   nprocs: Sequence[int]) -> None:
    """A run on a GPU, asked for several of them on one host with no ``--link``: the default
    (``loopback``: CPU processes over gloo, measured on the CPU) would price GPU-to-GPU
    collectives as a CPU's, several times too slow for PCIe or NVLink. Refused, naming the
    ways to say it."""
    if (on_cuda and any(x is None for x in links) and 1 in nnodes
            and max(nprocs, default=1) > 1):
        raise ConfigError(
            "the run was on a GPU, and the link between the GPUs of one host is not known "
            "here (the default, loopback, is CPU processes over gloo): give --link nvlink "
            "(nominal NVLink 4), a rate such as 100gbit, or measured:DIR from `scaleprobe "
            "comm --nproc N --out DIR` run on that host")


def check_grid(grid: Grid) -> None:
    """Before anything is simulated: every per-rank link names a rank of the largest world
    asked for, and no world is beyond what the step model answers in seconds."""
    big = max(grid.nprocs) * max(grid.nnodes)
    for spec in grid.links:
        check_ranks(spec, big)
    for strategy in grid.strategies:
        cap = M.max_world(strategy)
        if big > cap:
            raise ConfigError(
                f"{big:,} processes (--nproc x --nnodes): the step model lays out every "
                f"rank's timeline and answers {strategy} up to {cap} processes in seconds; "
                "for more, the closed-form model: scaleprobe predict --params N --nproc N "
                "--compute-time S")


def as_run(run: RunResult) -> dict[str, Any]:
    """What every prediction from ``run`` takes from it beyond its steps, as ``scenario``'s
    keywords: batches copied to a device where it had one (``prefetch``) and its model's
    buffers (DDP's broadcasts; None where not recorded). One place for ``predict``, ``plan``
    and the report's What if (bug caught: the report priced no broadcast of digits_cnn's
    BatchNorm buffers and said they were not recorded, where ``predict`` priced them)."""
    return {"prefetch": str(run.env.get("cuda_available")).lower() == "true",
            "buffers": S.recorded_buffers(run)}


def scenario(strategy: str, nproc: int, nnodes: int, spec: str | None,
             average_every: int = 4, prefetch: bool = False,
             units: tuple[T.Unit, ...] = (),
             buffers: tuple[int, ...] | None = None) -> M.Scenario:
    parts = parse_spec(spec)
    base = resolve_link(parts.base, nnodes)
    ranks = {r: resolve_link(x, nnodes) for r, x in parts.per_rank.items()}
    return M.Scenario(strategy, nproc, nnodes, base, ranks, average_every, prefetch,
                      units=units, buffers=buffers)


def needed(sample: S.RunSample, sc: M.Scenario, target: float) -> tuple[float | None, str | None]:
    """The slowest link for ``target`` efficiency, or None with the reason."""
    if sc.trainers / sc.world < target:
        return None, (f"unreachable: the server takes no batch, so at most "
                      f"{sc.trainers / sc.world:.0%} with {sc.world} processes")
    got = M.needed_link_gbit_s(sample, sc, target)
    if got is not None:
        return got, None
    free = M.free_link_efficiency(sample, sc)
    if free < target:
        return None, (f"unreachable: even on a link that costs nothing, {free:.0%}: waiting "
                      f"for the slowest of {sc.trainers} ranks (the run's own step-to-step "
                      "spread, drawn per rank) and the strategy's local work")
    wake = max((x.wake_s for x in (sc.link, *sc.rank_links.values())), default=0.0)
    woken = (f" and its wake-up after compute ({wake * 1e3:.2f} ms a collective)"
             if wake > 0 and sample.on_cpu else "")
    return None, f"unreachable: the link's latency{woken} alone keeps it below the target"


@dataclass(frozen=True)
class Grid:
    """The question: every combination of ``links``, host counts, processes per host and
    ``strategies``; local SGD averaging every ``average_every`` steps, ``prefetch`` where the
    run had a device to copy batches to, ``units`` an FSDP model's shard units."""

    strategies: list[str]
    nprocs: list[int]
    nnodes: list[int]
    links: list[str | None]
    average_every: int = 4
    prefetch: bool = False
    units: tuple[T.Unit, ...] = ()
    # the model's buffers, bytes per dtype: DDP's broadcasts (None: not recorded)
    buffers: tuple[int, ...] | None = None


def plan(sample: S.RunSample, grid: Grid, target: float = 0.9,
         with_needed: bool = True) -> list[Row]:
    """One row a combination of the grid, with the devices needed for ``target``."""
    check_grid(grid)
    rows = []
    g = grid
    for spec in g.links:
        for nodes in g.nnodes:
            for n in g.nprocs:
                for strategy in g.strategies:
                    if n * nodes < traits_of(strategy).min_world:
                        continue
                    sc = scenario(strategy, n, nodes, spec, g.average_every, g.prefetch, g.units,
                                  g.buffers)
                    s = fresh(sample)
                    pred = M.predict(s, sc)
                    if traits_of(strategy).shards_state:
                        pred.notes.append(UNITS_NOTE if g.units else
                                          "fsdp: the model's units unknown: one unit")
                    got, why = needed(fresh(sample), sc, target) if with_needed else (None,
                                                                                       None)
                    rows.append(Row(spec or "default", n, nodes, pred, got, why))
    return rows


def fresh(s: S.RunSample) -> S.RunSample:
    """A copy whose notes start empty (each prediction notes what it assumed)."""
    return replace(s, notes=[])


def link_line(spec: str | None, nnodes: int = 1) -> str:
    """``name = 3.1 Gbit/s, 12 us per hop (its source)`` for a spec's links."""
    parts = parse_spec(spec)
    out = []
    for label, x in ((None, parts.base), *parts.per_rank.items()):
        if x is None and label is not None:
            continue
        link: Link = resolve_link(x, nnodes)
        who = f"rank {label}: " if label is not None else ""
        out.append(f"{who}{link.name} = {link.bandwidth_gbit_s:.3g} Gbit/s, "
                   f"{link.alpha_s * 1e6:.0f} us per hop ({link.source})")
    return "; ".join(out)
