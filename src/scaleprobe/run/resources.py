"""Before launching N ranks on this host: do they fit its cores and its memory? A job that
does not fit measures nothing useful and can take the machine down with it (64 ranks on a
2-core, 24 GiB host left it with 228 MiB free and no answer in 405 s), so it is refused in one
line with the figures (ConfigError, exit 2) unless ``--force`` (``dist.force``) says to start
it anyway.

Cores: on the CPU every rank computes on the host's cores; more than ``RANKS_PER_CORE`` ranks
a core time-share them, and what is timed is the sharing, not the job. With CUDA each rank
has its device (``--nproc`` is at most the devices, checked beside this) and the core count
is not held against it.

Memory: each rank holds at least what this process holds of its own with torch loaded (its
unique set size, measured here: 281 MiB on the 2-core test machine, torch 2.14 CPU), before
any model or data; N of those must fit in the memory available now. The model, its gradients,
optimizer state, activations and loader workers come on top, so passing this check does not
promise the job fits: it refuses the jobs that cannot. A built-in GPT on the CPU is held to
more: its model state and the activations its blocks keep for backward, counted from its
shape (``check_memory_floor``), a floor as well.
"""

from __future__ import annotations

import os
from typing import Any

import psutil

from scaleprobe.core.errors import ConfigError
from scaleprobe.core.traits import traits_of
from scaleprobe.features.lmspec import memory_floor, shape_of
from scaleprobe.measure import env as envmod

# ranks per core beyond which a CPU job is refused without --force: 2 lets the README's
# `scale --nproc 1,2,4` run on a 2-core laptop, and refuses 6 ranks there and 64 anywhere
# below 32 cores
RANKS_PER_CORE = 2


def host_cores() -> int:
    """The cores this process may run on (its affinity; the CPU count elsewhere)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def rank_floor_bytes() -> int | None:
    """Memory a rank holds of its own at least: this process's unique set size with torch
    loaded (the ranks import it too); None where it cannot be read."""
    # heavy: torch: loaded only to measure what it costs a rank (preflight's memory check)
    import torch  # noqa: F401  (what every rank holds before its model)

    try:
        return int(psutil.Process().memory_full_info().uss)
    except (psutil.Error, AttributeError, OSError):
        return None


def available_bytes() -> int:
    return int(psutil.virtual_memory().available)


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"


def check_fits(nproc: int, on_cpu: bool, force: bool, flag: str = "--nproc") -> None:
    """Refuse ``nproc`` ranks on this host when they cannot fit its cores (``on_cpu``) or
    its memory; ``force``: start them anyway. One line naming the figures."""
    if force or nproc < 2:
        return
    problems: list[str] = []
    cores = host_cores()
    if on_cpu and nproc > RANKS_PER_CORE * cores:
        problems.append(f"{nproc} ranks on {cores} cores is {nproc / cores:.1f} per core "
                        f"(at most {RANKS_PER_CORE}: more time-share the cores)")
    floor, free = rank_floor_bytes(), available_bytes()
    if floor is not None and nproc * floor > free:
        problems.append(f"{nproc} ranks need at least {nproc} x {_gib(floor)} = "
                        f"{_gib(nproc * floor)} of memory (each holds what this process "
                        f"holds with torch loaded, measured) and {_gib(free)} is available")
    if problems:
        raise ConfigError(f"{flag} {nproc} does not fit this machine: "
                          + "; ".join(problems) + "; use fewer ranks, or --force to start "
                          "them anyway")


def launches(cfg: Any) -> bool:
    """Does a run of ``cfg`` start ranks of its own (a script, or a launched strategy)?"""
    return cfg.script.path is not None or traits_of(cfg.dist.strategy).launched


def check_config(cfg: Any, launched: bool) -> None:
    """``check_fits`` for a run's configuration: its ranks on this host, when launched; and
    a built-in GPT's memory floor on the CPU (``check_memory_floor``)."""
    check_memory_floor(cfg, launched)
    if not launched:
        return

    check_fits(cfg.dist.nproc, not envmod.cuda_available(), cfg.dist.force)


def check_memory_floor(cfg: Any, launched: bool) -> None:
    """On the CPU, a built-in GPT run whose floor (``features/lmspec.memory_floor``: model
    state and the activations saved for backward, counted from its shape) for each of its
    processes on this host exceeds the memory available now is refused in one line naming
    the batch that fits, unless ``--force``. On a GPU, running out of device memory is a
    recorded ``oom``; here, the host swaps and stops answering. Bug caught: `run --task lm
    --model gpt2_small` at its defaults (64 x 1024 tokens: 36 GiB of activations at
    least) grew to 22 GiB of the 24 GiB host and answered neither its step nor Ctrl+C for
    20 minutes."""
    if cfg.dist.force or envmod.cuda_available():
        return
    floor = memory_floor(cfg)
    if floor is None:
        return
    procs = cfg.dist.nproc if launched else 1
    free = available_bytes()
    if procs * floor.total <= free:
        return
    each = f" for each of {procs} processes" if procs > 1 else ""
    fits = floor.largest_batch(free // procs)
    advice = (f"a batch of {fits} per process fits that floor (--batch-size {fits})" if fits
              else "no batch does at this size: lower --seq-len or the model's size")
    raise ConfigError(
        f"--model {cfg.model.name} at a batch of {floor.batch} x {shape_of(cfg).context} "
        f"tokens needs at least {_gib(floor.total)}{each} ({_gib(floor.state_bytes)} of "
        f"model state, {_gib(floor.per_sample_bytes * floor.batch)} of activations kept for "
        f"backward) and {_gib(free)} is available now: {advice}, or --force to start it "
        "anyway")
