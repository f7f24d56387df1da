"""The blocks of a run's record that are not figures: the environment it ran in, the user's
script under ``wrap``, and the configuration it ran (a ``RunConfig``, written as
``RunConfig.to_dict()``). Torch-free.

This module imports nothing of the configuration at run time: its rules (config/rules.py)
import feature modules that build records, so ``config/runconfig.py`` hands its declarations to
``ConfigBlock`` and installs it as ``RunResult.codec`` when it is imported."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scaleprobe.core.record import Record

if TYPE_CHECKING:
    from scaleprobe.config.knobs import Knob
    from scaleprobe.config.sections import RunConfig


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
    loader: dict[str, Any] | None = None  # the training DataLoader (wrap/loaderlog.py facts)
    stopped_after: int | None = None  # steps, when --steps ended the script early
    sampler_note: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ConfigRead:
    """A record's ``config`` block as it was read (``raw``) and the ``RunConfig`` read from it
    (``typed``): while ``RunResult.config`` is that one, the record answers ``cfg`` and writes
    its block as it was read (an older record's missing keys missing, a newer one's kept)."""

    raw: dict[str, Any] | None = None
    typed: RunConfig | None = None


class ConfigBlock:
    """Reads a record's ``config`` block as a ``RunConfig``, on the declarations of
    ``config/sections.py`` (the class, its sections and their knobs): each key of the declared type
    as recorded, any other at this version's default (ranges and choices not asked: a value
    this version would refuse is still the value the run ran with)."""

    def __init__(self, cls: type[RunConfig], sections: dict[str, type],
                 knobs: dict[str, Knob]) -> None:
        self.cls, self.sections, self.knobs = cls, sections, knobs

    def _fits(self, full: str, v: Any) -> bool:
        knob = self.knobs.get(full)
        if knob is None or v is None:
            return knob is not None and knob.nullable
        return any(isinstance(v, bool) if k is bool else
                   isinstance(v, int) and not isinstance(v, bool) if k is int else
                   isinstance(v, int | float) and not isinstance(v, bool) if k is float else
                   isinstance(v, k) for k in knob.kinds)

    def read(self, raw: dict[str, Any]) -> ConfigRead:
        top: dict[str, Any] = {k: v for k, v in raw.items() if self._fits(k, v)}  # out, name
        for sec, cls in self.sections.items():
            vals = raw.get(sec)
            if isinstance(vals, dict):
                top[sec] = cls(**{k: v for k, v in vals.items() if self._fits(f"{sec}.{k}", v)})
        return ConfigRead(raw, self.cls(**top))
