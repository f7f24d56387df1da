"""The run options shared by ``run``, ``worker``, ``scale`` and the experiments: flags mapped
to config keys, a TOML file underneath, ``--set section.key=value`` on top."""

from __future__ import annotations

import argparse
from typing import Any

from scaleprobe import config as C
from scaleprobe.errors import ConfigError

# flag, config key, type, help
RUN_FLAGS: list[tuple[str, str, Any, str]] = [
    ("--model", "model.name", str, "torchvision name, digits_cnn, mlp, linear, or FILE.py:FUNC"),
    ("--channels-last", "model.channels_last", "flag", "NHWC memory format"),
    ("--dataset", "data.dataset", str, "digits (default), synthetic, jpeg-synth, imagefolder, "
     "cifar10, mnist, voc, lfw"),
    ("--data-dir", "data.data_dir", str, "root folder of an on-disk dataset"),
    ("--download", "data.download", "flag", "let torchvision download (needs a network)"),
    ("--image-size", "data.image_size", int, "input side in pixels"),
    ("--num-samples", "data.num_samples", int, "samples in synthetic / jpeg-synth data"),
    ("--loader", "data.loader", str, "naive (in-process, synchronous) | pipelined (workers)"),
    ("--workers", "data.workers", int, "pipelined: loader worker processes"),
    ("--prefetch", "data.prefetch", int, "pipelined: batches queued per worker"),
    ("--transform", "data.transform", str, "light | heavy (crop + flip + colour jitter)"),
    ("--skip-bad-samples", "data.skip_bad_samples", "flag", "skip and count unreadable images"),
    ("--batch-size", "train.batch_size", int, "per device (each device gets its own batch)"),
    ("--global-batch", "train.global_batch", int, "split one batch across devices instead"),
    ("--steps", "train.steps", str, "timed steps, or 'auto' (stop when the median is stable)"),
    ("--epochs", "train.epochs", int, "whole epochs instead of steps"),
    ("--lr", "train.lr", float, "learning rate"),
    ("--lr-scaling", "train.lr_scaling", str, "none | linear (Goyal et al., with warm-up)"),
    ("--optimizer", "train.optimizer", str, "sgd | adamw"),
    ("--amp", "train.amp", str, "off | bf16 | fp16"),
    ("--seed", "train.seed", int, "random seed"),
    ("--warmup-steps", "train.warmup_steps", int, "untimed steps before the window"),
    ("--eval", "train.eval", "flag", "task metric on the held-out split after training"),
    ("--task", "task.task", str, "classification | face | detection"),
    ("--loss", "task.loss", str, "face: triplet | softmax"),
    ("--strategy", "dist.strategy", str, "single | dp | ddp | ps | localsgd"),
    ("--nproc", "dist.nproc", int, "processes on this host"),
    ("--nnodes", "dist.nnodes", int, "hosts"),
    ("--node-rank", "dist.node_rank", int, "this host's index (0 = the rendezvous host)"),
    ("--rdzv-endpoint", "dist.rdzv_endpoint", str, "HOST:PORT of host 0 (several hosts)"),
    ("--master-port", "dist.master_port", int, "one host: rendezvous port on 127.0.0.1 "
     "(default: a free one)"),
    ("--backend", "dist.backend", str, "gloo | nccl (default: nccl on CUDA, gloo on CPU)"),
    ("--timeout", "dist.timeout_s", float, "collective timeout in seconds"),
    ("--ps-mode", "dist.ps_mode", str, "parameter server: sync | async"),
    ("--ps-device", "dist.ps_device", str, "parameter server's parameters: auto | cpu"),
    ("--average-every", "dist.average_every", int, "local SGD: average every K steps"),
    ("--bucket-cap-mb", "dist.bucket_cap_mb", float, "DDP gradient bucket size"),
    ("--link", "dist.link", str, "network the comm prediction assumes: 1gbit, 10gbit, "
     "200mbit or a `scaleprobe comm` results file"),
    ("--parity", "dist.parity", "flag", "also train on 1 process and compare accuracy"),
    ("--monitor-interval", "measure.monitor_interval_s", float, "sampler period in seconds"),
    ("--memory-limit", "measure.memory_limit", str, "CPU: cap process memory, e.g. 2GiB"),
    ("--profile-every", "measure.profile_every", float, "seconds between profiler captures"),
    ("--summary-every", "measure.summary_every", float, "seconds between TensorBoard summaries"),
    ("--out", "out", str, "results folder (default scaleprobe-out)"),
    ("--name", "name", str, "label for this run in tables"),
]


def _dest(flag: str) -> str:
    return "opt_" + flag.lstrip("-").replace("-", "_")


def add_run_options(p: argparse.ArgumentParser, config_file: bool = True) -> None:
    if config_file:
        p.add_argument("config", nargs="?", help="TOML file with run options (flags override it)")
    g = p.add_argument_group("run options")
    for flag, _key, typ, help_ in RUN_FLAGS:
        if typ == "flag":
            g.add_argument(flag, dest=_dest(flag), action="store_const", const=True, help=help_)
        else:
            g.add_argument(flag, dest=_dest(flag), type=str, metavar=flag.lstrip("-").upper()
                           .replace("-", "_"), help=help_)
    g.add_argument("--set", dest="opt_set", action="append", default=[], metavar="KEY=VALUE",
                   help="any config key, e.g. --set train.momentum=0.8 (repeatable)")
    g.add_argument("--no-progress", dest="opt_no_progress", action="store_true",
                   help="no live progress bar")


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """Flags and --set as flat ``{full.key: value}`` (strings are converted by config.build)."""
    out: dict[str, Any] = {}
    for flag, key, _typ, _help in RUN_FLAGS:
        v = getattr(args, _dest(flag), None)
        if v is not None:
            out[key] = v
    for item in getattr(args, "opt_set", []) or []:
        k, sep, v = item.partition("=")
        if not sep:
            raise ConfigError(f"--set needs KEY=VALUE, got '{item}'")
        out[C.resolve_key(k)] = v
    if getattr(args, "opt_no_progress", False):
        out["measure.progress"] = False
    return out


def config_from_args(args: argparse.Namespace,
                     defaults: dict[str, Any] | None = None) -> C.RunConfig:
    """Defaults <- ``defaults`` <- TOML file <- flags <- --set; validated."""
    merged: dict[str, Any] = dict(defaults or {})
    path = getattr(args, "config", None)
    if path:
        merged.update(C.flatten(C.load_toml(path)))
    merged.update(overrides_from_args(args))
    return C.build(merged)
