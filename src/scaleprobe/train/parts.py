"""A rank's training parts: model, optimizer, data, task and strategy wired together
(``setup``), and the learning-rate warm-up length; ``engine`` trains with them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from scaleprobe.config.sections import RunConfig
from scaleprobe.core.errors import ConfigError, DataError
from scaleprobe.core.rank_record import RankInfo
from scaleprobe.data.datasets import build_split
from scaleprobe.data.device import DeviceBatches
from scaleprobe.data.loader import Indexed, build_loader
from scaleprobe.data.transforms import build_eval_transform, build_transform
from scaleprobe.features.lmspec import is_gpt, resolved_data, shape_of
from scaleprobe.measure import env as envmod
from scaleprobe.measure.monitor import host_mem_baseline
from scaleprobe.models import build_model, param_count
from scaleprobe.models.build import has_lazy, init_lazy
from scaleprobe.models.gpt import padded_vocab
from scaleprobe.protocols import (
    ChecksModel,
    OwnModel,
    OwnTransforms,
    ShardedBatches,
    Strategy,
    Task,
    UsesBaseline,
)
from scaleprobe.tasks import build_task


@dataclass
class Parts:
    cfg: RunConfig
    device: torch.device
    strategy: Strategy
    task: Task
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scaler: Any
    autocast: Any
    loader: Any
    sampler: Any
    val_loader: Any
    per_process_batch: int
    lr_target: float
    info: RankInfo = field(default_factory=RankInfo)
    host_baseline: dict[str, Any] = field(default_factory=dict)  # before the model and data existed
    flops: Any = None  # measure.flops.StepFlops: counts the first warm-up step
    watch: Any = None  # target.TargetWatch with --target: evaluates on its schedule
    held: dict[str, int] | None = None  # measure/held.py: state bytes this rank holds
    gns: Any = None  # measure/gns_probe.HalfSteps: one process's --gns step (two halves)


def _autocast(device: torch.device, amp: str) -> contextlib.AbstractContextManager:
    if amp == "off":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if amp == "bf16" else torch.float16
    return torch.autocast(device.type, dtype=dtype)


def _optimizer(cfg: RunConfig, params: Any, lr: float, device: torch.device
               ) -> torch.optim.Optimizer:
    """SGD (PyTorch picks its foreach path on CUDA itself) or AdamW, fused on CUDA (one kernel
    for every parameter's update, as nanoGPT and torchtitan use it); on the CPU PyTorch's
    default implementation."""
    t = cfg.train
    if t.optimizer == "adamw":
        fused = {"fused": True} if device.type == "cuda" else {}
        return torch.optim.AdamW(params, lr=lr, weight_decay=t.weight_decay, **fused)
    return torch.optim.SGD(params, lr=lr, momentum=t.momentum, weight_decay=t.weight_decay)


def _task_transforms(task: Task, kind: str, size: int) -> tuple[Any, Any]:
    """(joint image+target transform or None, image transform): the task's own when it has
    them (detection moves boxes with the image), else the classification ones."""
    if isinstance(task, OwnTransforms):
        return task.transforms(kind, size)
    image_tf = build_eval_transform(size) if kind == "eval" else build_transform(kind, size)
    return None, image_tf


def _model(cfg: RunConfig, task: Task, split: Any, train_ds: Any, shape: Any,
           device: torch.device, strategy: Strategy, passed: Callable[[str], None]) -> Any:
    """The model on its device: built by the task (or the task's head on a registry model),
    lazy shapes from the run's own data, channels-last, wrapped by the strategy, compiled.
    ``passed``: told "model" once it is built, before the strategy wraps it."""
    size = split.image_size
    if isinstance(task, OwnModel):  # the task builds its own kind of model (detection)
        model = task.make_model(cfg.model.name, split.num_classes, size).to(device)
    else:
        model = task.build_model(build_model(cfg.model.name, split.num_classes, size,
                                             shape, split.seq_len)).to(device)
    if split.seq_len and shape is None and isinstance(task, ChecksModel):  # a user's LM
        x, y = task.collate([train_ds[0]])[:2]
        task.check_model(model, task.to_device(x, y, device, False)[0], cfg.model.name)
    if has_lazy(model):  # nn.LazyLinear & co.: shapes from one batch of the run's own data
        x, y = task.collate([train_ds[i] for i in range(min(2, len(train_ds)))])[:2]
        init_lazy(model, task.to_device(x, y, device, False)[0])
    if cfg.model.channels_last:
        model = model.to(memory_format=torch.channels_last)
    passed("model")
    strategy.configure(cfg)
    model = strategy.wrap(model)
    if cfg.model.compile:  # the wrapped model, as PyTorch advises for DDP (graphs split at buckets)
        if cfg.model.compile_backend == "inductor":
            model = torch.compile(model, mode=cfg.model.compile_mode)
        else:  # a backend other than inductor takes no mode
            model = torch.compile(model, backend=cfg.model.compile_backend)
    return model


def _loaders(cfg: RunConfig, task: Task, split: Any, train_ds: Any, batch: int, sampler: Any,
             batch_sampler: Any, device: torch.device, strategy: Strategy) -> tuple[Any, Any]:
    """The training batches (device-resident synthetic, the task's batch sampler or the
    strategy's sampler) and the held-out loader where --eval or --target needs one."""
    size = split.image_size
    if split.resident:  # synthetic: one batch made once on the device, no loader

        loader = DeviceBatches(len(train_ds), batch, sampler, size, split.num_classes,
                               cfg.train.seed, strategy.rank, device, cfg.model.channels_last,
                               seq_len=split.seq_len)
    elif batch_sampler is not None:
        loader = build_loader(train_ds, cfg.data, 1, sampler=None, shuffle=False, device=device,
                              seed=cfg.train.seed, collate=task.collate, batch_sampler=batch_sampler)
    else:
        loader = build_loader(train_ds, cfg.data, batch, sampler=sampler, shuffle=True,
                              device=device, seed=cfg.train.seed, collate=task.collate)
    val_loader = None
    if cfg.train.target and split.val is None:
        raise ConfigError(f"--target needs a held-out split to evaluate on; --dataset "
                          f"{cfg.data.dataset} has none")
    if (cfg.train.eval or cfg.train.target) and split.val is not None:
        joint, image_tf = _task_transforms(task, "eval", size)
        val_ds = Indexed(split.val, image_tf, cfg.data.skip_bad_samples, joint)
        val_loader = build_loader(val_ds, cfg.data.__class__(loader="naive", workers=0),
                                  # tokens: the training batch (its logits are vocab wide)
                                  batch if split.seq_len else max(batch, 64), sampler=None,
                                  shuffle=False, device=device,
                                  seed=0, drop_last=False, collate=task.collate)
    return loader, val_loader


def setup(cfg: RunConfig, device: torch.device, strategy: Strategy,
          passed: Callable[[str], None] = lambda mark: None) -> Parts:
    """The run's parts. ``passed`` is told each place of the setup it gets to ("data",
    "model", "wrapped": the heartbeat's ``SETUP_MARKS``)."""
    # torch (and on CUDA its context) is already resident: what the run adds is measured
    # against this baseline (``peak_mem_bytes.host_net``). torch's compiler front end is
    # imported by the first optimizer (and by DDP) whether or not anything is compiled: about
    # 130 MiB of a library's import, not the run's memory, so it is resident before the baseline
    # heavy: torch: torch._dynamo is more than `import torch` loads
    import torch._dynamo  # noqa: F401

    baseline = host_mem_baseline()
    envmod.seed_all(cfg.train.seed)
    split = build_split(resolved_data(cfg), cfg.train.seed)  # lm: seq_len from the model
    task = build_task(cfg.task, split.num_classes)
    if split.context_free is not None and isinstance(task, UsesBaseline):  # lm (lmspec)
        task.use_baseline(split.context_free)
    size = split.image_size  # token data has none: its task's transforms take none (lm)
    joint, image_tf = _task_transforms(task, cfg.data.transform, size or 0)
    train_ds = Indexed(split.train, image_tf, cfg.data.skip_bad_samples, joint)
    passed("data")
    towers = strategy.towers
    trainers = strategy.trainers * towers  # devices with a batch
    batch = cfg.per_device_batch(trainers) * towers
    shape = shape_of(cfg) if is_gpt(cfg.model.name) else None  # GPT: sizes from flags
    model = _model(cfg, task, split, train_ds, shape, device, strategy, passed)
    passed("wrapped")
    lr_target = cfg.train.lr * (trainers if cfg.train.lr_scaling == "linear"
                                and cfg.train.global_batch is None else 1)
    optimizer = _optimizer(cfg, strategy.unwrap(model).parameters(), cfg.train.lr, device)
    scaler = torch.amp.GradScaler(device.type, enabled=cfg.train.amp == "fp16"
                                  and device.type == "cuda")
    sampler = strategy.sampler(train_ds, cfg.train.seed)
    batch_sampler = task.batch_sampler(train_ds, batch, cfg.train.seed)
    if isinstance(batch_sampler, ShardedBatches):  # batches from this rank's samples only
        batch_sampler.shard = sampler
    loader, val_loader = _loaders(cfg, task, split, train_ds, batch, sampler, batch_sampler,
                                  device, strategy)
    no_full_batch(loader, len(train_ds), sampler, batch)
    info = {"num_classes": split.num_classes, "image_size": size, "dataset_source": split.source,
            "train_samples": len(train_ds), "param_count": param_count(strategy.unwrap(model)),
            "per_process_batch": batch, "lr_effective": lr_target,
            "input_mode": "device-resident" if split.resident else "loader",
            "lr_warmup_steps": lr_warmup_steps(cfg, _steps_per_epoch(loader)), **split.info}
    if shape is not None:
        info["model_shape"] = {"layers": shape.layers, "width": shape.width,
                               "heads": shape.heads, "context": shape.context,
                               # the embedding and head rows: param_count and FLOPs count these
                               "vocab_padded": padded_vocab(split.num_classes)}
    return Parts(cfg, device, strategy, task, model, optimizer, scaler,
                 _autocast(device, cfg.train.amp), loader, sampler, val_loader, batch, lr_target,
                 RankInfo.from_dict(info), baseline)


def lr_warmup_steps(cfg: RunConfig, steps_per_epoch: int | None) -> int:
    """The steps of the linear learning-rate warm-up: ``--warmup-epochs`` epochs of this
    run's steps (rounded, at least 1), else the untimed ``--warmup-steps``."""
    t = cfg.train
    if t.warmup_epochs is not None and steps_per_epoch:
        return max(1, round(t.warmup_epochs * steps_per_epoch))
    return max(1, t.warmup_steps)


def no_full_batch(loader: Any, samples: int, sampler: Any, batch: int) -> None:
    """A DataError where an epoch of this rank holds no full batch: its share of the data
    (the sampler's, under a strategy that splits it) is under one batch. Each rank drops its
    last partial batch, so without this an epoch would end at once, every time, and the run
    would spin without a step."""
    try:
        if len(loader) > 0:
            return
    except TypeError:  # a stream of unknown length
        return
    try:
        mine = len(sampler) if sampler is not None else samples
    except TypeError:
        mine = samples
    share = f", {mine:,} of them for each rank" if mine != samples else ""
    raise DataError(f"the dataset has {samples:,} samples{share}, fewer than one batch of "
                    f"{batch:,} per rank: lower --batch-size to {mine:,} or less"
                    + (", or run fewer ranks" if share else ""))


def _steps_per_epoch(loader: Any) -> int | None:
    try:
        return len(loader) or None
    except TypeError:
        return None
