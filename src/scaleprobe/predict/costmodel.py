"""The network cost model: communication time per training step, scaling efficiency, and the
slowest link that still reaches a target efficiency.

``n`` processes in all, ``S`` bytes exchanged per step (4 x parameter count), ``B`` the link's
bandwidth in bytes/s per direction, ``alpha`` one message hop's latency, ``K`` local SGD's
period, ``C`` the compute time per step. Each strategy's time ``t`` (ddp's ring all-reduce,
the parameter server's in-then-out, local SGD's all-reduce every K steps, FSDP's three
collectives), the efficiency ``C / (C + (1 - overlap) * t)`` (overlap 0 by default: nothing
hides under compute) and the link a target efficiency needs are docs/COMMUNICATION.md's table
and formulas, derived there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scaleprobe.core.errors import ConfigError
from scaleprobe.features.links import Link, resolve_link

STRATEGIES = ("allreduce", "ps", "localsgd", "fsdp")
ALIASES = {"ddp": "allreduce", "all_reduce": "allreduce", "allreduce": "allreduce",
           "ps": "ps", "localsgd": "localsgd", "fsdp": "fsdp"}
FP32_BYTES = 4
FORMULAS = {
    "allreduce": "2(n-1)*alpha + 2(n-1)/n * S/B",
    "ps": "2*alpha + 2(n-1) * S/B (push, then pull, over the server's link)",
    "localsgd": "[2(n-1)*alpha + 2(n-1)/n * S/B] / K",
    "fsdp": "3(n-1)*alpha + 3(n-1)/n * S/B (all-gather, all-gather, reduce-scatter)",
}


@dataclass(frozen=True)
class Pattern:
    """One step's communication: ``time = hops * alpha + link_bytes / B``."""

    strategy: str
    hops: float  # message latencies paid in sequence per step
    link_bytes: float  # bytes over the busiest link, per direction, per step
    formula: str
    period: int | None = None  # steps between synchronisations when not every step (K)

    def time_s(self, link: Link) -> float:
        return self.hops * link.alpha_s + self.link_bytes / link.bandwidth_byte_s


def canonical(strategy: str) -> str:
    key = strategy.strip().lower()
    if key not in ALIASES:
        raise ConfigError(f"no communication model for strategy '{strategy}' "
                          f"(choices: {', '.join(STRATEGIES)}, ddp)")
    return ALIASES[key]


def pattern(strategy: str, grad_bytes: float, world: int, nnodes: int = 1,
            average_every: int = 1) -> Pattern:
    """The communication of one step of ``strategy`` over ``world`` processes."""
    s, n = canonical(strategy), int(world)
    if n < 1 or nnodes < 1 or n % nnodes:
        raise ConfigError(f"world size {n} does not split over {nnodes} hosts")
    if average_every < 1:
        raise ConfigError("average_every must be at least 1")
    period = int(average_every) if s == "localsgd" else None  # the one periodic pattern
    if n == 1:
        return Pattern(s, 0.0, 0.0, "one process: no communication", period)
    ring_hops, ring_bytes = 2.0 * (n - 1), 2.0 * (n - 1) / n * grad_bytes
    if s == "allreduce":
        return Pattern(s, ring_hops, ring_bytes, FORMULAS[s])
    if s == "localsgd":
        k = float(average_every)
        return Pattern(s, ring_hops / k, ring_bytes / k, FORMULAS[s], period)
    if s == "fsdp":
        return Pattern(s, 3.0 * (n - 1), 3.0 * (n - 1) / n * grad_bytes, FORMULAS[s])
    senders = n - 1 if nnodes == 1 else n - n // nnodes
    return Pattern(s, 2.0, 2.0 * senders * grad_bytes, FORMULAS[s])


def comm_time_s(strategy: str, grad_bytes: float, world: int, link: Link, nnodes: int = 1,
                average_every: int = 1) -> float:
    return pattern(strategy, grad_bytes, world, nnodes, average_every).time_s(link)


def modelled_efficiency(compute_step_s: float, comm_s: float, overlap: float = 0.0) -> float:
    """``C / (C + exposed)`` with ``exposed = (1 - overlap) * comm_s``: the closed-form model's
    efficiency, which equals ``metrics.efficiency`` (speedup / N) only where compute scales
    perfectly."""
    if not 0.0 <= overlap < 1.0:
        raise ConfigError(f"overlap must be in [0, 1), got {overlap}")
    if compute_step_s <= 0:
        raise ConfigError(f"compute time per step must be positive, got {compute_step_s}")
    return compute_step_s / (compute_step_s + (1.0 - overlap) * comm_s)


def needed_bandwidth_gbit_s(pat: Pattern, alpha_s: float, compute_step_s: float,
                            target_eff: float = 0.9, overlap: float = 0.0) -> float | None:
    """The slowest link (Gbit/s) that still gives ``target_eff``; 0.0 without communication,
    None when the latency alone already exceeds the budget (no bandwidth is enough)."""
    if not 0.0 < target_eff < 1.0:
        raise ConfigError(f"target efficiency must be between 0 and 1, got {target_eff}")
    if pat.link_bytes == 0 and pat.hops == 0:
        return 0.0
    modelled_efficiency(compute_step_s, 0.0, overlap)  # validates both
    budget_s = compute_step_s * (1.0 / target_eff - 1.0) / (1.0 - overlap)
    transfer_budget_s = budget_s - pat.hops * alpha_s
    if transfer_budget_s <= 0:
        return None
    return pat.link_bytes / transfer_budget_s * 8.0 / 1e9


def predict_for_run(strategy: str, nproc: int, nnodes: int, grad_bytes: float,
                    compute_step_s: float | None, link_or_fit: Any = None,
                    average_every: int = 1, target_eff: float = 0.9,
                    overlap: float = 0.0) -> dict[str, Any]:
    """The model's figures for one run, as stored in ``result["comm"]["prediction"]``.

    ``link_or_fit``: a preset or rate name, a comm record or results path, a Link, or None
    (loopback on one host, 10gbit across hosts). ``compute_step_s`` None leaves efficiency
    and the needed link null."""
    link = resolve_link(link_or_fit, nnodes)
    world = int(nproc) * int(nnodes)
    pat = pattern(strategy, grad_bytes, world, nnodes, average_every)
    comm_s = pat.time_s(link)
    eff = needed = None
    if compute_step_s is not None and compute_step_s > 0:
        eff = modelled_efficiency(compute_step_s, comm_s, overlap)
        needed = needed_bandwidth_gbit_s(pat, link.alpha_s, compute_step_s, target_eff, overlap)
    return {
        "strategy": pat.strategy,
        "link": link.name,
        "bandwidth_gbit_s": link.bandwidth_gbit_s,
        "alpha_s": link.alpha_s,
        "grad_bytes": int(grad_bytes),
        "comm_s": comm_s,
        "efficiency": eff,
        "needed_gbit_s": needed,
        "formula": pat.formula,
        "world_size": world,
        "nnodes": int(nnodes),
        "average_every": pat.period,
        "compute_step_s": compute_step_s,
        "target_efficiency": target_eff,
        "overlap": overlap,
        "link_source": link.source,
    }
