"""The blocks of a run's record that are not figures: the environment it ran in, the user's
script under ``wrap``, and the configuration it ran (a ``RunConfig``). Torch-free.

A record's ``config`` is written as ``RunConfig.to_dict()``. Read back, each key this version
declares becomes the typed field, a key the record lacks (an older record) is listed in
``ConfigRead.absent``, and a key this version does not know, or a value of another type (a
damaged or foreign file), is kept as it was in ``ConfigRead.unknown``: ``RunResult.cfg`` then
answers what the record says, and writing the record back loses nothing.

This module imports nothing of the configuration at run time: its rules (core/config_rules.py)
import feature modules that build records, so ``core/config.py`` hands its declarations to
``ConfigBlock`` and installs it as ``RunResult.codec`` when it is imported."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scaleprobe.core.record import Record

if TYPE_CHECKING:
    from scaleprobe.core.config import RunConfig
    from scaleprobe.core.schema import Knob


@dataclass
class RunEnv(Record):
    """Everything a figure depends on (``measure.env.collect_env``): host, CPU, versions, GPUs
    ({index, name, memory_total_bytes} each), driver, world."""

    host: str | None = None
    cores: int | None = None
    cpu_model: str | None = None
    mem_total_bytes: int | None = None
    python: str | None = None
    platform: str | None = None
    torch: str | None = None
    torchvision: str | None = None
    cuda: str | None = None  # the CUDA runtime in use; null on a host without one
    cuda_build: str | None = None  # the CUDA torch was built with
    cudnn: int | None = None
    cuda_available: bool | None = None
    gpus: list[dict[str, Any]] = field(default_factory=list)
    driver: str | None = None
    nvml: str | None = None
    threads: int | None = None  # the first training rank's compute threads once assembled
    shm_bytes: int | None = None
    world_size: int | None = None
    local_world_size: int | None = None
    rank: int | None = None
    nnodes: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def collected(self) -> bool:
        """Was anything read? (a run that failed before it read its environment has not)"""
        return any(v not in (None, []) for v in self.to_dict().values())


@dataclass
class ScriptRun(Record):
    """``scaleprobe wrap``: the user's script as it ran (run/script.py)."""

    target: list[str] | None = None  # the command line after ``wrap --``
    exit_code: int | None = None
    loader: dict[str, Any] | None = None  # the training DataLoader (wrap/hooks.py facts)
    stopped_after: int | None = None  # steps, when --steps ended the script early
    sampler_note: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ConfigRead:
    """How a record's ``config`` block was read: keys of this version it lacked (``absent``:
    dotted keys, or a whole section's name) and what this version could not read (``unknown``:
    dotted key, or section or top-level name, to the value as written)."""

    absent: frozenset[str] = frozenset()
    unknown: dict[str, Any] = field(default_factory=dict)


class ConfigBlock:
    """How ``RunResult`` reads, writes and answers its ``config`` block, on the declarations
    of ``core/config.py`` (``RunConfig``, its sections and their knobs)."""

    def __init__(self, cls: type[RunConfig], sections: dict[str, type],
                 knobs: dict[str, Knob]) -> None:
        self.cls, self.sections, self.knobs = cls, sections, knobs

    def _fits(self, full: str, v: Any) -> bool:
        """Is ``v`` of the declared type of key ``full``? (ranges and choices not asked: a
        value this version would refuse is still the value the run ran with)"""
        knob = self.knobs[full]
        if v is None:
            return knob.nullable
        return any(isinstance(v, bool) if k is bool else
                   isinstance(v, int) and not isinstance(v, bool) if k is int else
                   isinstance(v, int | float) and not isinstance(v, bool) if k is float else
                   isinstance(v, k) for k in knob.kinds)

    def read(self, raw: Any) -> tuple[RunConfig | None, ConfigRead]:
        """A record's ``config`` block as the ``RunConfig`` it ran, and how it was read; None
        for a record without one (``{}`` or missing)."""
        if not isinstance(raw, dict) or not raw:
            return None, ConfigRead()
        absent: set[str] = set()
        unknown: dict[str, Any] = {}
        top: dict[str, Any] = {}
        for sec, cls in self.sections.items():
            vals = raw.get(sec)
            if not isinstance(vals, dict):
                absent.add(sec)
                if sec in raw:
                    unknown[sec] = vals
                continue
            got: dict[str, Any] = {}
            for name in (f.name for f in dataclasses.fields(cls)):
                full = f"{sec}.{name}"
                if name not in vals:
                    absent.add(full)
                elif self._fits(full, vals[name]):
                    got[name] = vals[name]
                else:
                    unknown[full] = vals[name]
            unknown.update({f"{sec}.{k}": v for k, v in vals.items()
                            if f"{sec}.{k}" not in self.knobs})
            top[sec] = cls(**got)
        for k, v in raw.items():
            if k not in self.sections:
                if k in self.knobs and self._fits(k, v):
                    top[k] = v
                else:
                    unknown[k] = v
        absent.update(k for k in self.knobs if "." not in k and k not in raw)
        return self.cls(**top), ConfigRead(frozenset(absent), unknown)

    @staticmethod
    def write(cfg: RunConfig | None, read: ConfigRead) -> dict[str, Any]:
        """The ``config`` block: ``cfg.to_dict()`` as a run writes it; for a record read back,
        the keys it held, as it held them."""
        out = cfg.to_dict() if cfg is not None else {}
        for key in read.absent:
            sec, _, name = key.partition(".")
            if not name:
                out.pop(sec, None)
            elif isinstance(out.get(sec), dict):
                out[sec].pop(name, None)
        for key, v in read.unknown.items():
            sec, _, name = key.partition(".")
            if name and isinstance(out.get(sec), dict):
                out[sec][name] = v
            else:
                out[key] = v
        return out

    def value(self, cfg: RunConfig | None, read: ConfigRead, dotted: str, default: Any) -> Any:
        """``dotted``'s value as the record holds it (a section: its dict); ``default`` where
        it is missing or null."""
        sec, _, name = dotted.partition(".")
        if dotted in read.unknown:
            v = read.unknown[dotted]
        elif cfg is None or dotted in read.absent or sec in read.absent:
            v = None
        elif not name:
            v = self.write(cfg, read).get(sec) if sec in self.sections else getattr(cfg, sec, None)
        else:
            v = getattr(getattr(cfg, sec, None), name, None) if sec in self.sections else None
        return default if v is None else v
