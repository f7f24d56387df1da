"""Which combinations of configuration keys a run can have: each key alone is checked
against its declaration (``config.check_types``); these rules check keys together, with one
line that says what to change."""

from __future__ import annotations

import os
import platform
import shlex
from collections.abc import Iterable
from typing import TYPE_CHECKING

from scaleprobe.config.catalog import BUILT_IN_DATA, DATASETS, DEVICE_RESIDENT, check_names
from scaleprobe.core.errors import ConfigError
from scaleprobe.core.traits import traits_of
from scaleprobe.features.gns import check_config as check_gns
from scaleprobe.features.links import rates_mbit
from scaleprobe.features.lmspec import check_run
from scaleprobe.features.target import check_task, parse_target

if TYPE_CHECKING:
    from scaleprobe.config.sections import RunConfig


def check_combinations(cfg: RunConfig) -> None:
    """The combinations of keys a run cannot have, each a one-line ``ConfigError``."""
    t, d, ds = cfg.train, cfg.data, cfg.dist
    if t.global_batch is not None and t.global_batch % cfg.training_ranks:
        raise ConfigError(f"global batch {t.global_batch} does not split evenly over "
                          f"{cfg.training_ranks} training processes")
    if t.epochs is not None and t.steps is not None:
        raise ConfigError("give either --steps or --epochs, not both")
    if t.target is not None:
        _validate_target(cfg)
    if cfg.model.compile_mode != "default" and cfg.model.compile_backend != "inductor":
        raise ConfigError(f"--compile-mode {cfg.model.compile_mode} is inductor's; --compile-backend "
                          f"{cfg.model.compile_backend} takes the default mode only")
    if cfg.model.compile and t.warmup_steps < 1:
        raise ConfigError("--compile needs --warmup-steps 1 or more: the first step compiles the "
                          "forward and backward, which must not be timed")
    if cfg.script.args is not None:
        if cfg.script.path is None:
            raise ConfigError("script.args needs script.path (the script they are passed to)")
        try:
            shlex.split(cfg.script.args)
        except ValueError as e:
            raise ConfigError(f"script.args: {e}: {cfg.script.args!r}") from None
    if cfg.script.path is None:  # language models with tokens, image models with images

        check_names(cfg)  # a mistyped name, before torch is imported (catalog.py)
        check_run(cfg)
    if d.dataset == "synthetic" and (cfg.task.task != "classification" or d.transform != "light"):
        what = (f"--task {cfg.task.task} draws its own batches" if cfg.task.task != "classification"
                else f"--transform {d.transform} runs in the input pipeline")
        raise ConfigError(f"--dataset synthetic makes one classification batch on the device and "
                          f"has no input pipeline; {what}: use --dataset synthetic-loader")
    _check_unrelated(cfg)
    if cfg.train.malloc == "steady" and platform.libc_ver()[0] != "glibc":
        raise ConfigError("train.malloc=steady sets glibc's allocator, which this Python does "
                          "not use: leave train.malloc at default")
    if ds.gloo_io == "batch" and not hasattr(os, "SCHED_BATCH"):
        raise ConfigError("dist.gloo_io=batch sets a Linux scheduling policy (SCHED_BATCH), "
                          "which this system has not: leave dist.gloo_io at default")
    if d.loader == "pipelined" and d.workers == 0:
        raise ConfigError("--loader pipelined needs --workers >= 1 (use --loader naive for none)")
    if not 0 <= ds.node_rank < ds.nnodes:
        raise ConfigError(f"node rank {ds.node_rank} is outside 0..{ds.nnodes - 1}")
    if ds.nnodes > 1 and not ds.rdzv_endpoint:
        raise ConfigError("several hosts need --rdzv-endpoint HOST:PORT")
    tr = traits_of(ds.strategy)
    if tr.in_process and ds.nproc * ds.nnodes > 1:
        many = (f"--nproc {ds.nproc}" if ds.nnodes == 1 else
                f"--nproc {ds.nproc} on --nnodes {ds.nnodes}")
        raise ConfigError(f"{many} starts {ds.nproc * ds.nnodes} processes: add --strategy ddp "
                          f"(or ps, localsgd, fsdp); --strategy {ds.strategy} runs in one process")
    if tr.towers and cfg.task.task == "detection":
        raise ConfigError(f"--strategy {ds.strategy} cannot scatter detection targets (a list of "
                          "boxes per image) over its towers; use --strategy ddp")
    if tr.needs_any_source_recv and ds.backend == "nccl":
        raise ConfigError(f"--strategy {ds.strategy} needs --backend gloo: its server receives "
                          "from whichever worker is ready, which nccl cannot do")
    if not tr.fp16_loss_scaling and t.amp == "fp16":
        why = ("its gradients are sharded DTensors, which the loss scaler does not unscale "
               "across ranks" if tr.shards_state else
               "the loss scale lives in each worker while the server applies the gradients")
        raise ConfigError(f"--strategy {ds.strategy} with --amp fp16 is not supported: {why}; "
                          "use --amp bf16")
    check_gns(cfg)
    if ds.link and "rank" in str(ds.link).lower():
        _check_rank_links(cfg)
    if cfg.world_size < tr.min_world:
        raise ConfigError(f"--strategy {ds.strategy} needs --nproc >= {tr.min_world} (one server "
                          "and at least one worker)")


def _check_rank_links(cfg: RunConfig) -> None:
    """--link rankN=RATE: ranks of the built-in loop, launched on one host (netlab/ranknet.py)."""
    ds = cfg.dist
    if rates_mbit(ds.link, ds.nproc, ds.nnodes) is None:
        return
    if cfg.script.path is not None:
        raise ConfigError("--link rankN=... puts the built-in loop's ranks in network "
                          "namespaces; a wrapped script's ranks are not placed")
    if traits_of(ds.strategy).in_process:
        raise ConfigError(f"--link rankN=... needs launched ranks (ddp, ps, localsgd, fsdp), "
                          f"not --strategy {ds.strategy}")


def _validate_target(cfg: RunConfig) -> None:
    """--target: the metric fits the task, the run's length is the target's to decide, and
    every training rank can stop at the same step."""
    t = cfg.train
    check_task(parse_target(t.target), cfg.task.task)  # type: ignore[arg-type]
    if t.epochs is not None or t.steps is not None:
        given = "--epochs" if t.epochs is not None else "--steps"
        raise ConfigError(f"--target trains until the target is reached; {given} cannot also "
                          "set the length (cap it with --max-epochs)")
    if traits_of(cfg.dist.strategy).has_server:
        raise ConfigError("--target needs ranks that stop at the same step; the parameter "
                          "server's workers do not: use --strategy ddp or localsgd")


def _check_unrelated(cfg: RunConfig) -> None:
    """Options that belong to another dataset or task: an error, since the run would measure
    something else than the one asked for (a folder of images never read, a softmax run
    labelled triplet)."""
    d = cfg.data
    if d.data_dir is not None and d.dataset in BUILT_IN_DATA:
        readers = [n for n in DATASETS if n not in BUILT_IN_DATA]
        raise ConfigError(f"--data-dir is read by --dataset {', '.join(readers)}; --dataset "
                          f"{d.dataset} is built in and reads no folder: name the format of "
                          f"{d.data_dir} with --dataset, or leave --data-dir out")
    if cfg.task.loss != "softmax" and cfg.task.task != "face":
        raise ConfigError(f"--loss {cfg.task.loss} trains face embeddings: add --task face "
                          f"(this run's task is {cfg.task.task})")


# keys that configure the loader; a dataset made once on the device has none (catalog.py)
LOADER_KEYS = {"data.workers": "--workers", "data.loader": "--loader",
               "data.prefetch": "--prefetch"}


def unused(cfg: RunConfig, given: Iterable[str]) -> list[str]:
    """The options in ``given`` (full keys the user set) that this run does not use, one line
    each. A warning, not an error: the run measures what it names (a base file shared with
    loader runs may carry them), but the user should know the setting did nothing."""
    d = cfg.data
    if d.dataset not in DEVICE_RESIDENT:
        return []
    flags = [flag for key, flag in LOADER_KEYS.items() if key in set(given)]
    if not flags:
        return []
    other = "tokens or text" if d.dataset == "tokens-synthetic" else "synthetic-loader"
    return [f"{' and '.join(flags)} do{'es' * (len(flags) == 1)} nothing with --dataset "
            f"{d.dataset}: it has no loader (one batch made once on the device); use "
            f"--dataset {other} to measure an input pipeline"]
