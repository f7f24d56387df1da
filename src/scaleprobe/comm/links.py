"""Links for the cost model: a bandwidth and a per-message latency.

A link is described by two numbers, both per direction of the slowest link on the path:

    bandwidth_gbit_s   bytes per second the link carries, in Gbit/s (full duplex)
    alpha_s            the fixed cost of one message hop: wire latency plus software

Where they come from:

    1gbit, 10gbit, 25gbit, 100gbit   nominal Ethernet rates; latencies typical of TCP on such
                                     links (assumed, not measured)
    200mbit, 2.5gbit, ...            any rate written as <number>mbit or <number>gbit
    loopback                         gloo over 127.0.0.1 between 2 processes on this project's
                                     reference machine (2-core CPU), measured 2026-11-22
    PATH                             a results.jsonl / folder / record written by
                                     ``scaleprobe comm``: its all_reduce fit is turned into a
                                     link (bus bandwidth and per-hop latency)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scaleprobe.errors import ConfigError


@dataclass(frozen=True)
class Link:
    name: str
    bandwidth_gbit_s: float
    alpha_s: float
    source: str

    @property
    def bandwidth_byte_s(self) -> float:
        return self.bandwidth_gbit_s * 1e9 / 8.0


PRESETS: dict[str, Link] = {
    "1gbit": Link("1gbit", 1.0, 50e-6, "preset: nominal 1 GbE, 50 us per hop assumed"),
    "10gbit": Link("10gbit", 10.0, 20e-6, "preset: nominal 10 GbE, 20 us per hop assumed"),
    "25gbit": Link("25gbit", 25.0, 10e-6, "preset: nominal 25 GbE, 10 us per hop assumed"),
    "100gbit": Link("100gbit", 100.0, 5e-6, "preset: nominal 100 Gbit/s, 5 us per hop assumed"),
    # gloo all_reduce between 2 processes over 127.0.0.1 on the 2-core reference machine,
    # 2026-11-22: 0.79-1.0 GB/s at 16-256 MiB (6.3-8.0 Gbit/s), 0.39-0.54 ms at 1 KiB
    # (2 hops): see docs/COMMUNICATION.md
    "loopback": Link("loopback", 7.5, 200e-6,
                     "measured: gloo over 127.0.0.1, 2 processes, 2-core CPU, 2026-11-22"),
}
DEFAULT_MULTI_HOST = "10gbit"
GENERIC_ALPHA_S = 30e-6
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([mg])bit(?:/s)?\s*$", re.IGNORECASE)


def _all_reduce_factor(world: int) -> float:
    return 2.0 * (world - 1) / world


def link_from_comm(rec: dict[str, Any], source: str = "") -> Link:
    """A link from a ``kind == "comm"`` record: its all_reduce fit, turned into the bus
    bandwidth (``2(n-1)/n / beta``) and the latency of one of the ring's ``2(n-1)`` hops."""
    fit = (rec.get("fit") or {}).get("all_reduce")
    world = int(rec.get("world_size") or 0)
    if not fit or world < 2:
        where = f" in {source}" if source else ""
        raise ConfigError(f"no all_reduce fit{where}; run `scaleprobe comm --ops all_reduce` first")
    beta = float(fit.get("beta_s_per_byte") or 0.0)
    if beta <= 0:
        raise ConfigError("the all_reduce fit in the comm results has no bandwidth term "
                          "(sizes too small); run `scaleprobe comm` with sizes up to 16M or more")
    gbit = 8.0 * _all_reduce_factor(world) / beta / 1e9
    alpha_hop_s = float(fit.get("alpha_s") or 0.0) / (2 * (world - 1))
    where = source or "comm record"
    backend = rec.get("backend", "?")
    nodes = int(rec.get("nnodes") or 1)
    across = f" on {nodes} nodes" if nodes > 1 else ""
    return Link(f"measured ({backend}, {world} ranks{across})", gbit, alpha_hop_s,
                f"measured: {where}")


def _from_path(path: Path, nnodes: int = 1) -> Link:
    """The latest comm record of ``path`` that crossed the same kind of link as the
    prediction: between nodes for ``nnodes > 1`` (a record of several nodes, e.g. from
    ``comm --nnodes 2 --executor slurm``), within one host otherwise. A record of the other
    kind is used only when there is no other, and the link's source says so."""
    from scaleprobe.results import find_results

    try:
        recs = [r for r in find_results(path) if r.get("kind") == "comm"]
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read comm results {path}: {e}") from None
    if not recs:
        raise ConfigError(f"no comm results in {path}; run `scaleprobe comm --out DIR` first")
    across = nnodes > 1
    same = [r for r in recs if (int(r.get("nnodes") or 1) > 1) == across]
    link = link_from_comm((same or recs)[-1], str(path))
    if not same:
        what = ("measured within one host: the network between nodes was not crossed" if across
                else "measured across nodes, for a prediction within one host")
        link = Link(link.name, link.bandwidth_gbit_s, link.alpha_s, f"{link.source} ({what})")
    return link


def parse_rate(text: str) -> Link | None:
    """``"200mbit"`` / ``"2.5gbit"`` -> a link with the generic latency; None if not a rate."""
    m = _RATE.match(text)
    if not m:
        return None
    gbit = float(m.group(1)) * (1.0 if m.group(2).lower() == "g" else 1e-3)
    if gbit <= 0:
        raise ConfigError(f"link rate must be positive, got '{text}'")
    return Link(text.strip().lower(), gbit, GENERIC_ALPHA_S,
                f"rate {gbit:g} Gbit/s, {GENERIC_ALPHA_S * 1e6:.0f} us per hop assumed")


def resolve_link(spec: Any = None, nnodes: int = 1) -> Link:
    """A Link from a preset name, a rate, a comm record or results path, or None (default:
    ``loopback`` on one host, ``10gbit`` across hosts)."""
    if isinstance(spec, Link):
        return spec
    if isinstance(spec, dict):
        return link_from_comm(spec)
    if spec is None or spec == "":
        return PRESETS["loopback" if nnodes <= 1 else DEFAULT_MULTI_HOST]
    text = str(spec)
    if text.lower() in PRESETS:
        return PRESETS[text.lower()]
    rate = parse_rate(text)
    if rate is not None:
        return rate
    path = Path(text).expanduser()
    if path.exists():
        return _from_path(path, nnodes)
    from scaleprobe.registry import suggest

    near = suggest(text.lower(), list(PRESETS))
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    raise ConfigError(f"unknown link '{text}': give {', '.join(PRESETS)}, a rate like 200mbit, "
                      f"or a comm results file{hint}")


def with_alpha(link: Link, alpha_s: float) -> Link:
    if alpha_s < 0:
        raise ConfigError(f"latency must not be negative, got {alpha_s}")
    return Link(link.name, link.bandwidth_gbit_s, alpha_s, f"{link.source}; latency set to "
                f"{alpha_s * 1e6:g} us")
