"""How a scenario's step is laid out for the step model (``predict/stepmodel.py``): each
strategy's collectives priced on its links (a ring's all-reduce, a broadcast's tree, FSDP's
per-operation fits, a server's paths, DDP's buffers, an idle link's wake), as a simulator
over the ranks' compute rows (``predict/timeline.py``). No torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from scaleprobe.core.errors import ConfigError
from scaleprobe.core.traits import StrategyTraits, traits_of
from scaleprobe.features.links import MMAP_BYTES, PRESETS, Link
from scaleprobe.predict import sample as S
from scaleprobe.predict import timeline as T


@dataclass(frozen=True)
class Scenario:
    """What to predict: ``nproc`` processes on each of ``nnodes`` hosts joined by ``link``
    (one host: the link between its processes); ``rank_links``: ranks behind a link of
    their own."""

    strategy: str
    nproc: int
    nnodes: int
    link: Link
    rank_links: dict[int, Link] = field(default_factory=dict)
    average_every: int = 4
    prefetch: bool = False  # fsdp: collectives on their own stream (CUDA)
    intra: Link = PRESETS["loopback"]
    units: tuple[T.Unit, ...] = ()  # fsdp: the units (bytes, compute share)
    # ddp: the model's buffers, bytes per dtype, each broadcast before every forward (None:
    # not known, not priced)
    buffers: tuple[int, ...] | None = None

    @property
    def world(self) -> int:
        return self.nproc * self.nnodes

    @property
    def spread(self) -> float:
        """The links' relative uncertainty (a comm fit's worst error; 0: nominal figures)."""
        return max(x.spread for x in (self.link, *self.rank_links.values()))

    @property
    def trainers(self) -> int:
        return self.traits.training_ranks(self.world)

    @property
    def traits(self) -> StrategyTraits:
        return traits_of(self.strategy)


def _ring(link: Link, n: int, scale: float, factor: float = 2.0) -> T.Cost:
    a, bw = link.alpha_s, link.bandwidth_byte_s
    return lambda b: scale * (factor * (n - 1) * a + factor * (n - 1) / n * b / bw)


def _broadcast(link: Link, n: int, scale: float) -> T.Cost:
    """A broadcast from one rank as a binomial tree: ``ceil(log2 n)`` hops, each the link's
    per-hop latency and the whole message at its bandwidth. Over the 1 Gbit + 1 ms link a
    broadcast of 1.3 kB between 2 ranks took 2.15 ms inside DDP's forward, the fit's hop
    1.92 ms (docs/COMMUNICATION.md)."""
    hops = math.ceil(math.log2(n)) if n > 1 else 0
    a, bw = link.alpha_s, link.bandwidth_byte_s
    return lambda b: scale * hops * (a + b / bw)


def slowest(sc: Scenario) -> Link:
    links = [sc.link, *(v for r, v in sc.rank_links.items() if r < sc.world)]
    return min(links, key=lambda x: x.bandwidth_gbit_s)


def _ps_paths(sc: Scenario, scale: float) -> tuple[list[T.WorkerPath], float]:
    """Each worker's path to the server (rank 0), and the server link's rate."""
    server = sc.rank_links.get(0, sc.link)
    paths = []
    for r in range(1, sc.world):
        same_host = sc.nnodes > 1 and r < sc.nproc
        own = sc.intra if same_host else sc.rank_links.get(r, sc.link)
        paths.append(T.WorkerPath(own.bandwidth_byte_s / scale, scale * own.alpha_s))
    return paths, server.bandwidth_byte_s / scale


Simulator = Callable[[list[list[T.Compute]], float, int], list[list[T.RankStep]]]


def _fresh_s_per_byte(s: S.RunSample, pass_s: float) -> float:
    """A pass into a fresh buffer: what the run measured, for buffers large enough to be
    returned to the system when freed (glibc maps allocations over ``MMAP_BYTES``);
    smaller ones reuse memory already touched."""
    if s.grad_bytes < MMAP_BYTES or not s.fresh_s_per_byte:
        return pass_s
    return max(pass_s, s.fresh_s_per_byte)


def simulator(sc: Scenario, s: S.RunSample, pass_s: float) -> tuple[Simulator, list[T.Compute]]:
    """A function (steps, cost scale, world) -> the timeline, and the rows to draw from."""
    kind = sc.traits.comm_pattern  # the strategy's communication pattern (core/traits.py)
    if kind == "allreduce":
        rows, buckets = S.for_ddp(s, pass_s)
        slow = slowest(sc)
        cpu = slow.cpu_s_per_byte if s.on_cpu and sc.world > 1 else 0.0
        if cpu:
            s.notes.append(f"the all-reduce's CPU time ({cpu * 1e9:.2f} ns per byte, measured "
                           "with the link) taken from the backward it overlaps")
        wake = _wake(s, sc, slow)
        groups = _buffers_note(s, sc, slow)

        def ddp(st: list[list[T.Compute]], k: float, n: int) -> list[list[T.RankStep]]:
            each = _broadcast(slow, n, k)
            bcast = k * wake + sum(each(b) for b in groups) if groups else 0.0
            return T.ddp_steps(st, buckets, _ring(slow, n, k), cpu, k * wake, bcast)
        return ddp, rows
    rows = S.without_ddp(s, pass_s)
    if kind == "fsdp":
        units = sc.units or (T.Unit(s.grad_bytes, 1.0),)
        rows = S.for_fsdp(replace(s, rows=rows), [u.nbytes for u in units], sc.world,
                          pass_s, MMAP_BYTES)
    fresh = _fresh_s_per_byte(s, pass_s)
    if kind == "localsgd":
        slow = slowest(sc)
        local = (fresh + 2.0 * pass_s) * s.grad_bytes  # flatten (new), divide, copy back
        wake = _wake(s, sc, slow)
        return (lambda st, k, n: T.localsgd_steps(st, sc.average_every, _ring(slow, n, k),
                                                  s.grad_bytes, local, k * wake)), rows
    if kind == "ps":
        def run_ps(st: list[list[T.Compute]], k: float, n: int) -> list[list[T.RankStep]]:
            paths, cap = _ps_paths(sc, k)
            # the server's update each step: the optimizer of a step drawn from the run
            return T.ps_steps(st, s.grad_bytes, paths[:n - 1],
                              T.Server(cap, pass_s, None, fresh))
        return run_ps, rows
    if kind == "fsdp":
        units = sc.units or (T.Unit(s.grad_bytes, 1.0),)
        slow = slowest(sc)
        if sc.world > 1:
            s.notes.append(_fsdp_links_note(slow, units, sc.world))
        wake = _wake(s, sc, slow)
        return (lambda st, k, n: T.fsdp_steps(st, units, _per_op(slow, "all_gather", n, k),
                                              _per_op(slow, "reduce_scatter", n, k),
                                              sc.prefetch, k * wake)), rows
    raise ConfigError(f"no step model for strategy '{sc.strategy}' (ddp, ps, localsgd, fsdp)")


def _buffers_note(s: S.RunSample, sc: Scenario, link: Link) -> tuple[int, ...]:
    """DDP's broadcast of the model's buffers from rank 0 before every forward, one collective
    per dtype: the groups priced (each as a collective of its bytes on the link, after the
    idle link's wake), noted; () with one rank or none."""
    if sc.world < 2:
        return ()
    if sc.buffers is None:
        s.notes.append("ddp: the model's buffers were not recorded (an older run, or no memory "
                       "probe): DDP's broadcast of them before every forward is not priced")
        return ()
    if not sc.buffers:
        return ()
    each = _broadcast(link, sc.world, 1.0)
    s.notes.append(f"ddp: the model's buffers broadcast from rank 0 before every forward, "
                   f"{len(sc.buffers)} collective(s) (one per dtype: "
                   f"{', '.join(f'{b:,} B' for b in sc.buffers)}), "
                   f"{sum(each(b) for b in sc.buffers) * 1e3:.2f} ms on {link.name}")
    return sc.buffers


def _wake(s: S.RunSample, sc: Scenario, link: Link) -> float:
    """What a collective on an idle link costs more on the CPU (``Link.wake_s``), noted."""
    if not (s.on_cpu and sc.world > 1 and link.wake_s > 0):
        return 0.0
    s.notes.append(f"each collective that starts on an idle link costs {link.wake_s * 1e3:.2f} "
                   f"ms more (gloo's threads woken after compute, measured with {link.name})")
    return link.wake_s


def _per_op(link: Link, op: str, n: int, scale: float) -> T.Cost:
    """A ring collective of one unit (``(n-1)`` hops of ``1/n`` of its bytes) at the fit
    ``link`` has for ``op`` at that many bytes (its all-reduce's where it has none)."""
    return lambda b: _ring(link.for_op(op, b), n, scale, 1.0)(b)


def _fsdp_links_note(link: Link, units: Sequence[T.Unit], world: int) -> str:
    """How FSDP's all-gathers and reduce-scatters were priced on ``link``: each one's time
    for the largest unit on ``world`` ranks (a fit's latency and bandwidth hold only over
    the range of sizes they were fitted on, so the time is what is shown)."""
    if not link.ops:
        return (f"fsdp: all-gathers and reduce-scatters priced as ring collectives at "
                f"{link.name}'s all-reduce bandwidth (none of their own measured on it)")
    big = max(u.nbytes for u in units)
    per = ", ".join(f"{name} {_per_op(link, op, world, 1.0)(big) * 1e3:.3g} ms"
                    for name, op in (("all-gather", "all_gather"),
                                     ("reduce-scatter", "reduce_scatter")))
    return (f"fsdp: each collective priced from its own fit on {link.name} (the largest unit, "
            f"{big / 1e6:.1f} MB, on {world} ranks: {per}; {link.ops_source or link.source})")
