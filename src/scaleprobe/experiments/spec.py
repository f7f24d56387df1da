"""Sweep specifications: a ``[base]`` run configuration, a ``[grid]`` of axes, and the points
their cartesian product gives.

A spec is a TOML file (or the same structure as a dict) with ``[sweep]`` (id, kind, repeats,
the ``batch_size = "auto"`` search's bounds, ``skip_invalid``), ``[base]`` (any run option)
and ``[grid]`` (a list of values per option); docs/EXPERIMENTS.md gives it in full.

No torch import here: the sweep parent stays light, each point runs in its own process.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scaleprobe.config import runconfig as C
from scaleprobe.config.keys import (
    args_text,
    check_flat,
    check_value,
    flatten_in,
    join_args,
    load_toml,
    resolve_key,
)
from scaleprobe.config.knobs import show
from scaleprobe.config.rules import unused
from scaleprobe.config.sections import BATCH_KEYS, SECTIONS, RunConfig
from scaleprobe.core.errors import ConfigError
from scaleprobe.core.registry import suggest
from scaleprobe.measure.env import threads_for

SWEEP_OPTIONS: dict[str, type[Any]] = {
    "id": str, "batch_start": int, "batch_max": int, "max_probes": int, "batch_round": int,
    "skip_invalid": bool, "kind": str, "repeats": int,
}
DEFAULT_REPEATS = 3  # three processes per point: the fewest that give a spread to judge by
KINDS = ("sweep", "scale")


@dataclass(frozen=True)
class Axis:
    key: str  # full dotted config key, e.g. train.batch_size
    label: str  # as the spec wrote it, e.g. batch_size
    values: tuple[Any, ...]  # () when auto
    auto: bool = False  # batch_size = "auto": searched, not listed


@dataclass(frozen=True)
class Point:
    axes: dict[str, Any]  # label -> value, stored as the run record's experiment.point
    overrides: dict[str, Any]  # full key -> value, applied on top of the base


@dataclass
class SweepSpec:
    sweep_id: str
    base: dict[str, Any]  # flat {full key: value}
    axes: list[Axis]
    batch_start: int = 16
    batch_max: int = 4096
    max_probes: int = 12
    batch_round: int = 8
    skip_invalid: bool = False
    kind: str = "sweep"  # the experiment kind its run records carry: sweep | scale
    repeats: int = DEFAULT_REPEATS  # each point's runs, interleaved across the points
    dropped: list[str] = field(default_factory=list)  # invalid points left out (skip_invalid)
    unused: list[str] = field(default_factory=list)  # [base] options no point uses (warnings)

    @property
    def batch_axis(self) -> Axis | None:
        return next((a for a in self.axes if a.key in BATCH_KEYS), None)

    @property
    def auto(self) -> bool:
        return bool(self.batch_axis and self.batch_axis.auto)

    def base_config(self, out: str | None = None) -> RunConfig:
        """The base with the first value of each axis: an axis may be what makes a base key
        apply (a script axis, ``data_dir`` under a dataset axis); where that first point is
        invalid (``skip_invalid``), the base alone."""
        over = {**self.base, "measure.progress": False, **({"out": out} if out else {})}
        first = {a.key: a.values[0] for a in self.axes if a.values and a.key not in over}
        try:
            return C.build(_complete({**over, **first}))
        except ConfigError:
            if not first or "script.path" in first:
                raise
            return C.build(_complete(over))

    def config(self, point: Point, out: str | None = None) -> RunConfig:
        """The point's run configuration; unless the base names the runs, each is labelled by
        its point (``loader=naive, transform=heavy``) so tables tell the points apart."""
        label = {} if self.base.get("name") else {"name": describe(point.axes)}
        over = {**self.base, **label, **point.overrides, "measure.progress": False,
                **({"out": out} if out is not None else {})}
        if point.overrides.get(ARGS_KEY) and self.base.get(ARGS_KEY):  # a point's own flags
            over[ARGS_KEY] = f"{self.base[ARGS_KEY]} {point.overrides[ARGS_KEY]}"  # go last
        return C.build(_complete(over))


def _complete(flat: dict[str, Any]) -> dict[str, Any]:
    """A point of a script (``script.path`` set) gets what ``wrap`` sets for every script."""
    if flat.get("script.path") is None:
        return flat
    return C.script_defaults(flat)


ARGS_KEY = "script.args"


def _check_script_keys(base: dict[str, Any], axes: list[Axis], where: str) -> None:
    """A spec that runs a script takes only the options a script can take."""
    if base.get("script.path") is None and not any(a.key == "script.path" for a in axes):
        return
    for key, what in [*((k, "[base]") for k in base), *((a.key, "[grid]") for a in axes)]:
        if key not in C.SPEC_KEYS:
            raise ConfigError(f"{where}: {what} {key} does not apply to a script (it builds "
                              "its own model, data and training); a script's spec takes "
                              f"{', '.join(sorted(C.SPEC_KEYS))}")


def _table(doc: dict[str, Any], name: str, where: str) -> dict[str, Any]:
    v = doc.get(name, {})
    if not isinstance(v, dict):
        raise ConfigError(f"{where}: [{name}] must be a table")
    return v


def _sweep_options(opts: dict[str, Any], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in opts.items():
        if k not in SWEEP_OPTIONS:
            near = suggest(k, SWEEP_OPTIONS)
            hint = f"; did you mean {', '.join(near)}?" if near else ""
            raise ConfigError(f"{where}: unknown [sweep] option '{k}'{hint}")
        typ = SWEEP_OPTIONS[k]
        if not isinstance(v, typ) or (typ is int and isinstance(v, bool)):
            raise ConfigError(f"{where}: [sweep] {k} must be a {typ.__name__}, got {v!r}")
        if typ is int and v < 1:
            raise ConfigError(f"{where}: [sweep] {k} must be at least 1, got {v}")
        out[k] = v
    if out.get("kind", "sweep") not in KINDS:
        raise ConfigError(f"{where}: [sweep] kind must be one of {', '.join(KINDS)}, "
                          f"got {out['kind']!r}")
    if out.get("batch_start", 16) > out.get("batch_max", 4096):
        raise ConfigError(f"{where}: batch_start is larger than batch_max")
    return out


def _axes(grid: dict[str, Any], where: str) -> list[Axis]:
    if not grid:
        raise ConfigError(f"{where}: the [grid] is empty; give at least one axis, "
                          "e.g. batch_size = [16, 32, 64]")
    labels = _labels(grid)
    axes: list[Axis] = []
    for key, values in flatten_in(grid, f"{where}: [grid]").items():
        label = labels.get(key, key)
        if key == ARGS_KEY and isinstance(values, list):
            values = [args_text(v, f"{where}: grid axis '{label}'") for v in values]
        if values == "auto" and key == "train.batch_size":
            axes.append(Axis(key, label, (), auto=True))
            continue
        if not isinstance(values, list):
            raise ConfigError(f"{where}: grid axis '{label}' must be a list of values "
                              f"(or \"auto\" for batch_size), got {show(values)}")
        if not values:
            raise ConfigError(f"{where}: grid axis '{label}' has no values")
        if len(set(map(repr, values))) != len(values):
            raise ConfigError(f"{where}: grid axis '{label}' repeats a value: {show(values)}")
        try:
            vals = [check_value(key, v) for v in values]
        except ConfigError as e:
            raise ConfigError(f"{where}: grid axis '{label}': {e}") from None
        if key in BATCH_KEYS:
            vals = sorted(vals)  # each already checked: a whole number >= 1
        axes.append(Axis(key, label, tuple(vals)))
    if sum(a.key in BATCH_KEYS for a in axes) > 1:
        raise ConfigError(f"{where}: sweep either batch_size or global_batch, not both")
    # the batch axis varies fastest, so an out-of-memory size skips the larger ones after it
    return [a for a in axes if a.key not in BATCH_KEYS] + [a for a in axes if a.key in BATCH_KEYS]


def _labels(grid: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in grid.items():
        if isinstance(v, dict) and k in SECTIONS:
            for kk in v:
                out[resolve_key(f"{k}.{kk}")] = kk
        else:
            out[resolve_key(k)] = k.replace("-", "_")
    return out


def read_doc(spec: str | Path | dict[str, Any], kind: str, tables: tuple[str, ...]
             ) -> tuple[dict[str, Any], str, str]:
    """An experiment spec (a TOML file or the same structure as a dict) as ``(document, where
    for messages, default id)``; a table other than ``tables`` is a one-line error."""
    if isinstance(spec, dict):
        doc, where, stem = spec, f"{kind} spec", kind
    else:
        doc, where, stem = load_toml(spec), str(spec), Path(spec).stem
    unknown = sorted(set(doc) - {t.strip("[]") for t in tables})
    if unknown:
        raise ConfigError(f"{where}: unknown table(s) {', '.join(unknown)}; "
                          f"a {kind} spec has {', '.join(tables[:-1])} and {tables[-1]}")
    return doc, where, stem


def load_spec(spec: str | Path | dict[str, Any],
              overrides: dict[str, Any] | None = None, repeats: int | None = None) -> SweepSpec:
    """Read and check a sweep spec. ``overrides`` (flat run options, e.g. from command-line
    flags) replace the base's values; they may not name a grid axis."""
    doc, where, stem = read_doc(spec, "sweep", ("[sweep]", "[base]", "[grid]"))
    opts = _sweep_options(_table(doc, "sweep", where), where)
    in_base = f"{where}: [base]"
    base = check_flat(join_args(flatten_in(_table(doc, "base", where), in_base), in_base),
                        in_base)
    axes = _axes(_table(doc, "grid", where), where)
    _check_script_keys(base, axes, where)
    for full, v in check_flat(overrides or {}).items():
        axis = next((a for a in axes if a.key == full), None)
        if axis is not None:
            raise ConfigError(f"'{axis.label}' is a grid axis in {where}; "
                              "change the grid instead of overriding it")
        base[full] = v
    if repeats is not None:
        if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
            raise ConfigError(f"--repeats must be a whole number of at least 1, got {repeats!r}")
        opts["repeats"] = repeats
    _threads_like_for_like(base, axes)
    sp = SweepSpec(sweep_id=opts.pop("id", stem), base=base, axes=axes, **opts)
    sp.base_config()  # the base alone must be valid
    return sp


THREADS_KEY = "dist.threads_per_rank"


def _threads_like_for_like(base: dict[str, Any], axes: list[Axis]) -> None:
    """A grid over process counts compares its points like for like: every point gets the
    compute threads per rank of the largest count (cores / processes), unless the spec sets
    them, so the 1-process baseline is not an oversubscribed OpenMP team beside ranks of one
    thread each (bug caught: 22-25 samples/s with 2 threads against 210-214 with 1 under
    load, every 2-process point then 4-9x "faster")."""
    nproc = next((a for a in axes if a.key == "dist.nproc"), None)
    if nproc is None or THREADS_KEY in base or any(a.key == THREADS_KEY for a in axes):
        return
    counts = [v for v in nproc.values if isinstance(v, int) and v >= 1]
    if counts:
        base[THREADS_KEY] = threads_for(max(counts))


def points(sp: SweepSpec, batch_size: int | None = None) -> list[Point]:
    """The grid's points in run order (batch axis fastest). For an auto batch axis, the
    points of the other axes at ``batch_size`` (default: the search's first size)."""
    lists = []
    for a in sp.axes:
        if a.auto:
            lists.append([(a, batch_size or sp.batch_start)])
        else:
            lists.append([(a, v) for v in a.values])
    return [Point({a.label: v for a, v in combo}, {a.key: v for a, v in combo})
            for combo in itertools.product(*lists)]


def check_points(sp: SweepSpec, out: str | None = None) -> list[Point]:
    """Validate every point (all of them, before anything runs). An invalid combination is an
    error naming the point, or, with ``skip_invalid``, left out and listed in ``sp.dropped``."""
    good: list[Point] = []
    sp.dropped, sp.unused = [], []
    for p in points(sp):
        try:
            cfg = sp.config(p, out)
        except ConfigError as e:
            label = describe(p.axes)
            if not sp.skip_invalid:
                raise ConfigError(f"grid point {label}: {e} "
                                  "(set skip_invalid = true in [sweep] to leave such points out)"
                                  ) from None
            sp.dropped.append(f"{label}: {e}")
            continue
        _check_axes_used(sp, cfg, p)
        sp.unused += [u for u in unused(cfg, sp.base) if u not in sp.unused]
        good.append(p)
    if not good:
        raise ConfigError("no valid point in the grid")
    return good


def _check_axes_used(sp: SweepSpec, cfg: RunConfig, p: Point) -> None:
    """A grid axis the point's run does not use makes points that measure the same thing
    (``workers = [1, 2]`` with ``dataset = "synthetic"``): an error naming the axis."""
    for a in sp.axes:
        why = unused(cfg, [a.key])
        if why:
            raise ConfigError(f"grid axis '{a.label}' changes nothing at {describe(p.axes)}: "
                              f"{why[0]}")


def describe(axes: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in axes.items())


def group_key(p: Point, batch_label: str | None) -> tuple[tuple[str, str], ...]:
    """The point's values on every axis except the batch axis (points that share a group
    differ only in batch size)."""
    return tuple((k, repr(v)) for k, v in p.axes.items() if k != batch_label)
