"""Links for the cost model: a bandwidth and a per-message latency.

A link is described by two numbers, both per direction of the slowest link on the path:

    bandwidth_gbit_s   bytes per second the link carries, in Gbit/s (full duplex)
    alpha_s            the fixed cost of one message hop: wire latency plus software

The presets, any ``<number>mbit``/``gbit`` rate, ``loopback`` (measured), ``measured:PATH``
(a ``scaleprobe comm`` fit), ``NAME=GBIT,US`` and ``nvlink``, with the figures and where each
comes from, are docs/COMMUNICATION.md's table of links.

A spec may also name links per rank, for a rank behind a slower cable (seed 000's topology):
``rank2=100mbit`` (the others: the default), ``1gbit,rank2=100mbit`` (the others 1gbit).
``parse_spec`` splits such a spec; ``resolve_link`` answers with its slowest link (what a
ring all-reduce is held to).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from scaleprobe.core.errors import ConfigError
from scaleprobe.core.registry import suggest
from scaleprobe.core.results import find_results


@dataclass(frozen=True)
class Link:
    name: str
    bandwidth_gbit_s: float
    alpha_s: float
    source: str
    # relative uncertainty of the link's costs: a comm fit's worst relative error over its
    # points; 0 for nominal or given figures (no measured spread)
    spread: float = 0.0
    # the all-reduce's CPU time per byte on each rank (a comm fit's, measured on the CPU;
    # 0: not measured): what it takes from compute it overlaps on the same cores
    cpu_s_per_byte: float = 0.0
    # collectives measured on this link with fits of their own, (op, per-hop latency s, bus
    # bandwidth Gbit/s, from bytes): FSDP's "all_gather" and "reduce_scatter" over gloo move a
    # byte up to 5x slower than its all-reduce (gloo splits, flattens and copies them into
    # buffers of its own, which above glibc's mmap threshold are fresh pages every call): a
    # fit per size range, each from its ``from bytes`` up; () where not measured
    ops: tuple[tuple[str, float, float, float], ...] = ()
    ops_source: str = ""
    # what a collective costs more when it starts on an idle link, right after compute (a
    # comm fit's ``wake_s``, measured on the CPU: gloo's threads woken from sleep); 0: not
    # measured
    wake_s: float = 0.0
    # why the link's costs may be off, said with every prediction made from it: a comm fit
    # measured under load ("" where there is nothing to say)
    caveat: str = ""
    # how its gloo socket threads ran when it was measured (``scaleprobe comm --gloo-io``):
    # "default" or "batch"; a run with the other does not meet the same link
    gloo_io: str = "default"

    def for_op(self, op: str, nbytes: float = 0.0) -> Link:
        """The link as the collective ``op`` of ``nbytes`` sees it: its own fit for that size
        where one was measured on this link, else the link (its all-reduce's)."""
        mine = [x for x in self.ops if x[0] == op]
        if not mine:
            return self
        _, alpha, gbit, _ = max((x for x in mine if x[3] <= nbytes), key=lambda x: x[3],
                                default=min(mine, key=lambda x: x[3]))
        return replace(self, bandwidth_gbit_s=gbit, alpha_s=alpha, ops=(),
                       source=self.ops_source or self.source)  # wake_s: the link's

    @property
    def bandwidth_byte_s(self) -> float:
        return self.bandwidth_gbit_s * 1e9 / 8.0


# FSDP's collectives as gloo runs them over 127.0.0.1 between 2 processes on the 2-core reference
# machine, 2026-11-28 20:03 UTC, load average 1.2-1.8 (scaleprobe comm --nproc 2 --ops
# all_gather_flat,reduce_scatter --sizes 64K,...,128M; docs/COMMUNICATION.md): (op, per-hop
# latency s, bus bandwidth Gbit/s, from bytes), fitted below 32 MiB (64 KiB-24 MiB) and from
# it (40-128 MiB), where gloo's buffers come fresh from the system each call
LOOPBACK_OPS: tuple[tuple[str, float, float, float], ...] = (
    ("all_gather", 252e-6, 4.73, 0), ("all_gather", 0.0, 2.24, 32 << 20),
    ("reduce_scatter", 401e-6, 2.89, 0), ("reduce_scatter", 57.2e-3, 3.29, 32 << 20))
# the all-reduce's CPU time per byte on each rank there (its fit's ``cpu_s_per_byte``, the
# same measurement: 0.69 ns per byte, 2026-11-28 20:03 and 20:01 alike), which two ranks on
# two cores take from the backward it overlaps
LOOPBACK_CPU_S_PER_BYTE = 0.69e-9
# what a collective there costs more right after compute than after a barrier (gloo's threads
# woken from sleep): the median of 12 sizes' differences (1 KiB-1 MiB, 40 calls each, three
# runs of scaleprobe comm --nproc 2 --ops all_reduce,all_gather_flat,reduce_scatter --sizes
# 1K,64K,256K,1M --iters 40, 2026-11-28 21:58 UTC, load average 0.5-0.8; quartiles 1.8 and
# 4.1 ms): 2.5 ms, where a hot all-reduce of 256 KiB takes 0.5-0.8 ms
LOOPBACK_WAKE_S = 2.5e-3
LOOPBACK_OPS_SOURCE = ("measured: gloo all_gather_into_tensor / reduce_scatter_tensor over "
                       "127.0.0.1, 2 processes, 2-core CPU, 2026-11-28")

PRESETS: dict[str, Link] = {
    "1gbit": Link("1gbit", 1.0, 50e-6, "preset: nominal 1 GbE, 50 us per hop assumed"),
    "10gbit": Link("10gbit", 10.0, 20e-6, "preset: nominal 10 GbE, 20 us per hop assumed"),
    "25gbit": Link("25gbit", 25.0, 10e-6, "preset: nominal 25 GbE, 10 us per hop assumed"),
    "100gbit": Link("100gbit", 100.0, 5e-6, "preset: nominal 100 Gbit/s, 5 us per hop assumed"),
    # gloo all_reduce between 2 processes over 127.0.0.1 on the 2-core reference machine,
    # 2026-11-22: 0.79-1.0 GB/s at 16-256 MiB (6.3-8.0 Gbit/s), 0.39-0.54 ms at 1 KiB
    # (2 hops): see docs/COMMUNICATION.md
    "loopback": Link("loopback", 7.5, 200e-6,
                     "measured: gloo over 127.0.0.1, 2 processes, 2-core CPU, 2026-11-22",
                     cpu_s_per_byte=LOOPBACK_CPU_S_PER_BYTE, ops=LOOPBACK_OPS,
                     ops_source=LOOPBACK_OPS_SOURCE, wake_s=LOOPBACK_WAKE_S),
    "nvlink": Link("nvlink", 3600.0, 3e-6,
                   "preset: nominal NVLink 4 (H100 SXM), 450 GB/s per direction, 3 us per "
                   "hop assumed"),
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
    batch = (rec.get("settings") or {}).get("gloo_io") == "batch"
    io = ", gloo's socket threads at SCHED_BATCH" if batch else ""
    return Link(f"measured ({backend}, {world} ranks{across}{io})", gbit, alpha_hop_s,
                f"measured: {where}", float(fit.get("max_rel_err") or 0.0),
                float(fit.get("cpu_s_per_byte") or 0.0), op_fits(rec.get("fit") or {}, world),
                f"measured: {where}, each collective's own fit", float(fit.get("wake_s") or 0.0),
                _under_load(rec.get("load"), where), "batch" if batch else "default")


UNDER_LOAD_HEAD = "the link's fit ("  # how a fit's under-load caveat begins


def _under_load(load: Any, where: str) -> str:
    """The caveat of a fit measured under load (its record's ``load`` block), or ""."""
    if not isinstance(load, dict) or not load.get("flag"):
        return ""
    return (f"{UNDER_LOAD_HEAD}{where}) was measured under load: {load.get('reason')}; its "
            "costs may be high: measure the link again on a quiet machine")


# glibc's largest mmap threshold: gloo's buffers this big come fresh from the system at each
# call, and its collectives move a byte up to twice as slowly from here up (the loopback
# fits' ranges, a comm record's ``ranges``, which may also split off the latency-bound sizes)
MMAP_BYTES = 32 << 20

# the step model's collectives -> the benchmark's operation that calls them as FSDP does
OP_BENCH = {"all_gather": "all_gather_flat", "reduce_scatter": "reduce_scatter"}


def op_fits(fits: dict[str, Any], world: int) -> tuple[tuple[str, float, float, float], ...]:
    """(op, per-hop latency, bus Gbit/s, from bytes) of each of ``OP_BENCH``'s collectives a
    comm record fitted (``time = alpha + beta * size``, size the full tensor: ``(n-1)`` hops,
    bus bandwidth ``(n-1)/n / beta``): a fit per size range where the record has them
    (``ranges``: the latency-bound sizes, up to ``MMAP_BYTES``, from it), else one over every
    size. A range whose time did not grow with size (beta 0: latency-bound) is all latency,
    its bandwidth infinite."""
    out = []
    for op, bench in OP_BENCH.items():
        fit = fits.get(bench) or {}
        ranged = bool(fit.get("ranges"))
        for part in fit.get("ranges") or [dict(fit, from_bytes=0)]:
            beta = float(part.get("beta_s_per_byte") or 0.0)
            if world > 1 and (beta > 0 or (ranged and part.get("alpha_s"))):
                out.append((op, float(part.get("alpha_s") or 0.0) / (world - 1),
                            8.0 * (world - 1) / world / beta / 1e9 if beta > 0 else math.inf,
                            float(part.get("from_bytes") or 0)))
    return tuple(out)


def _from_path(path: Path, nnodes: int = 1) -> Link:
    """The latest comm record of ``path`` that crossed the same kind of link as the
    prediction: between nodes for ``nnodes > 1`` (a record of several nodes, e.g. from
    ``comm --nnodes 2 --executor slurm``), within one host otherwise. A record of the other
    kind is used only when there is no other, and the link's source says so."""
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
        link = replace(link, source=f"{link.source} ({what})")
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


_CUSTOM = re.compile(r"^\s*([A-Za-z][\w.-]*)\s*=\s*(\d+(?:\.\d+)?)\s*,\s*(\d+(?:\.\d+)?)\s*$")
_RANK_ITEM = re.compile(r"^\s*rank(\d+)\s*=\s*(.+)$", re.IGNORECASE)
_ITEMS = re.compile(r",(?=\s*rank\d+\s*=)", re.IGNORECASE)


def parse_custom(text: str) -> Link | None:
    """``NAME=GBIT,US`` -> a link of that name; None if ``text`` is not of that form."""
    m = _CUSTOM.match(text)
    if not m or _RANK_ITEM.match(text):
        return None
    gbit, us = float(m.group(2)), float(m.group(3))
    if gbit <= 0:
        raise ConfigError(f"link rate must be positive, got '{text}'")
    return Link(m.group(1), gbit, us * 1e-6, f"given: {gbit:g} Gbit/s, {us:g} us per hop")


@dataclass(frozen=True)
class LinkSpec:
    """A link spec split: the link every rank has (``base``: None = the default) and the
    ranks behind links of their own (``per_rank``: rank -> that link's spec text)."""

    base: str | None
    per_rank: dict[int, str]


def parse_spec(spec: str | None) -> LinkSpec:
    """``"1gbit,rank2=100mbit"`` -> LinkSpec("1gbit", {2: "100mbit"}); a plain spec has no
    per-rank part."""
    if not spec:
        return LinkSpec(None, {})
    base: str | None = None
    per_rank: dict[int, str] = {}
    for item in _ITEMS.split(str(spec)):  # every item after the first starts with rankN=
        m = _RANK_ITEM.match(item)
        if m:
            per_rank[int(m.group(1))] = m.group(2).strip()
        elif item.strip():
            base = item.strip()
    return LinkSpec(base, per_rank)


def resolve_link(spec: Any = None, nnodes: int = 1) -> Link:
    """A Link from a preset name, a rate, ``NAME=GBIT,US``, ``measured:PATH`` (or a comm
    record or results path), or None (default: ``loopback`` on one host, ``10gbit`` across
    hosts). A spec with per-rank links gives its slowest."""
    if isinstance(spec, Link):
        return spec
    if isinstance(spec, dict):
        return link_from_comm(spec)
    if spec is None or spec == "":
        return PRESETS["loopback" if nnodes <= 1 else DEFAULT_MULTI_HOST]
    parts = parse_spec(str(spec))
    if parts.per_rank:
        links = [resolve_link(x, nnodes) for x in (parts.base, *parts.per_rank.values()) if x]
        slow = min(links, key=lambda k: k.bandwidth_gbit_s)
        return Link(str(spec), slow.bandwidth_gbit_s, max(k.alpha_s for k in links),
                    f"the slowest of the per-rank links: {slow.name} ({slow.source})",
                    slow.spread)
    return _resolve_one(str(spec), nnodes)


def _resolve_one(text: str, nnodes: int) -> Link:
    if text.lower() in PRESETS:
        return PRESETS[text.lower()]
    for parse in (parse_rate, parse_custom):
        link = parse(text)
        if link is not None:
            return link
    measured = text[len("measured:"):] if text.lower().startswith("measured:") else None
    path = Path(measured if measured is not None else text).expanduser()
    if path.exists():
        return _from_path(path, nnodes)
    if measured is not None:
        raise ConfigError(f"no comm results at '{path}' (measured:PATH names a folder or "
                          "results.jsonl written by `scaleprobe comm`)")

    near = suggest(text.lower(), list(PRESETS))
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    raise ConfigError(f"unknown link '{text}': give {', '.join(PRESETS)}, a rate like 200mbit, "
                      f"NAME=GBIT,US, or measured:PATH to comm results{hint}")


def with_alpha(link: Link, alpha_s: float) -> Link:
    if alpha_s < 0:
        raise ConfigError(f"latency must not be negative, got {alpha_s}")
    return replace(link, alpha_s=alpha_s, source=f"{link.source}; latency set to "
                   f"{alpha_s * 1e6:g} us", cpu_s_per_byte=0.0, ops=(), wake_s=0.0)


def rates_mbit(spec: str | None, nproc: int, nnodes: int = 1) -> list[float | None] | None:
    """Per rank, the rate of its cable in Mbit/s (None: unshaped), or None when ``spec``
    names no per-rank link. ConfigError for a spec that cannot be shaped."""
    parts = parse_spec(spec)
    if not parts.per_rank:
        return None
    if nnodes != 1:
        raise ConfigError("--link rankN=... shapes ranks on one host (network namespaces); "
                          "across real hosts, their own network decides")
    bad = [r for r in parts.per_rank if r >= nproc]
    if bad:
        raise ConfigError(f"--link names rank {bad[0]}, but the job has ranks 0..{nproc - 1}")
    base = _mbit(parts.base) if parts.base else None
    return [_mbit(parts.per_rank[r]) if r in parts.per_rank else base for r in range(nproc)]


def _mbit(text: str) -> float:
    if text.lower().startswith("measured:"):
        raise ConfigError(f"cannot shape a cable to '{text}': give a rate (100mbit, 1gbit)")
    link = resolve_link(text)
    return link.bandwidth_gbit_s * 1000.0
