"""The run options shared by ``run``, ``worker``, ``scale`` and the experiments: flags mapped
to config keys, a TOML file underneath, ``--set section.key=value`` on top.

Each flag's type, default, help and accepted values are those of its config key, declared
once in ``config.py``; argparse converts and checks the value with the key's own check, so a
bad value is one line naming the flag. A flag left out is absent from the parsed arguments,
which means "take the value from the TOML file or spec, else the config's default": the
default ``--help`` shows never overrides a file.
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import sys
import textwrap
from collections.abc import Callable, Iterable
from typing import Any

from scaleprobe.config import runconfig as C
from scaleprobe.config.keys import check_value, load_flat, resolve_key
from scaleprobe.config.knobs import BadValue, show
from scaleprobe.config.rules import unused
from scaleprobe.config.sections import ALL_KEYS, KNOBS, RunConfig
from scaleprobe.core.errors import ConfigError

# flag, config key, other spellings of the flag
RUN_FLAGS: list[tuple[str, str, tuple[str, ...]]] = [
    ("--model", "model.name", ()),
    ("--channels-last", "model.channels_last", ()),
    ("--compile", "model.compile", ()),
    ("--compile-mode", "model.compile_mode", ()),
    ("--compile-backend", "model.compile_backend", ()),
    ("--threads-per-rank", "dist.threads_per_rank", ()),
    ("--layers", "model.layers", ()),
    ("--width", "model.width", ()),
    ("--heads", "model.heads", ()),
    ("--dataset", "data.dataset", ()),
    ("--data-dir", "data.data_dir", ()),
    ("--download", "data.download", ()),
    ("--image-size", "data.image_size", ()),
    ("--num-samples", "data.num_samples", ()),
    ("--seq-len", "data.seq_len", ()),
    ("--loader", "data.loader", ()),
    ("--workers", "data.workers", ()),
    ("--prefetch", "data.prefetch", ()),
    ("--transform", "data.transform", ()),
    ("--skip-bad-samples", "data.skip_bad_samples", ()),
    ("--batch-size", "train.batch_size", ()),
    ("--global-batch", "train.global_batch", ()),
    ("--steps", "train.steps", ()),
    ("--min-steps", "train.min_steps", ()),
    ("--max-steps", "train.max_steps", ()),
    ("--max-seconds", "train.max_seconds", ()),
    ("--epochs", "train.epochs", ()),
    ("--lr", "train.lr", ()),
    ("--lr-scaling", "train.lr_scaling", ()),
    ("--optimizer", "train.optimizer", ()),
    ("--momentum", "train.momentum", ()),
    ("--weight-decay", "train.weight_decay", ()),
    ("--amp", "train.amp", ()),
    ("--seed", "train.seed", ()),
    ("--warmup-steps", "train.warmup_steps", ()),
    ("--warmup-epochs", "train.warmup_epochs", ()),
    ("--eval", "train.eval", ()),
    ("--target", "train.target", ()),
    ("--eval-every", "train.eval_every", ()),
    ("--max-epochs", "train.max_epochs", ()),
    ("--task", "task.task", ()),
    ("--loss", "task.loss", ()),
    ("--strategy", "dist.strategy", ()),
    ("--nproc", "dist.nproc", ("--nproc-per-node", "--nproc_per_node")),  # torchrun's names
    ("--nnodes", "dist.nnodes", ()),
    ("--node-rank", "dist.node_rank", ()),
    ("--rdzv-endpoint", "dist.rdzv_endpoint", ()),
    ("--master-port", "dist.master_port", ()),
    ("--backend", "dist.backend", ()),
    ("--timeout", "dist.timeout_s", ()),
    ("--force", "dist.force", ()),
    ("--gloo-io", "dist.gloo_io", ()),
    ("--ps-mode", "dist.ps_mode", ()),
    ("--ps-device", "dist.ps_device", ()),
    ("--average-every", "dist.average_every", ()),
    ("--bucket-cap-mb", "dist.bucket_cap_mb", ()),
    ("--link", "dist.link", ()),
    ("--parity", "dist.parity", ()),
    ("--parity-tolerance", "dist.parity_tolerance", ()),
    ("--monitor-interval", "measure.monitor_interval_s", ()),
    ("--memory-limit", "measure.memory_limit", ()),
    ("--profile-every", "measure.profile_every", ()),
    ("--summary-every", "measure.summary_every", ()),
    ("--progress", "measure.progress", ()),
    ("--memory-probe", "measure.memory_probe", ()),
    ("--gns", "measure.gns", ()),
    ("--out", "out", ()),
    ("--name", "name", ()),
]
FILE_NOTE = "A flag left out takes its value from the TOML file, else the default shown."
SPEC_NOTE = ("A flag overrides the spec's [base] for every point; left out, the spec's value "
             "applies, else the default shown.")


def _dest(flag: str) -> str:
    return "opt_" + flag.lstrip("-").replace("-", "_")


def converter(key: str) -> Callable[[str], Any]:
    """argparse ``type=`` for a config key: its own conversion and check."""
    def convert(text: str) -> Any:
        try:
            return check_value(key, text)
        except BadValue as e:
            raise argparse.ArgumentTypeError(e.problem) from None

    return convert


def repeats(text: str) -> int:
    """argparse ``type=`` for ``--repeats`` (0 ran the default number of repeats while saying
    nothing) and any other count: a whole number >= 1."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {show(text)}")
    return n


def flag_help(key: str, default: str | None = None) -> str:
    """The key's help with its default (``default`` replaces the config's, e.g. for scale)."""
    knob = KNOBS[key]
    text = f"{knob.help} (default: {default or knob.default_text()}{C.task_default_text(key)})"
    return text.replace("%", "%%")  # argparse formats help with %


def add_run_options(p: argparse.ArgumentParser, config_file: bool = True,
                    defaults: dict[str, str] | None = None) -> None:
    """The run flags, each with its default from the config (or ``defaults``: the text of a
    command's own default for a key), and the other keys with theirs in the epilog."""
    if config_file:
        p.add_argument("config", nargs="?", help="TOML file with run options (flags override it)")
    g = p.add_argument_group("run options", FILE_NOTE if config_file else SPEC_NOTE)
    defaults = defaults or {}
    for flag, key, other in RUN_FLAGS:
        knob, text = KNOBS[key], flag_help(key, defaults.get(key))
        if bool in knob.kinds:
            g.add_argument(flag, *other, dest=_dest(flag), action=argparse.BooleanOptionalAction,
                           default=argparse.SUPPRESS, help=text)
            continue
        metavar = ("{" + ",".join(knob.choices) + "}" if knob.choices and str in knob.kinds
                   and int not in knob.kinds else flag.lstrip("-").upper().replace("-", "_"))
        if len(metavar) > 40:  # a long list of choices: named in the help, not the usage line
            text += f" (one of: {', '.join(knob.choices)})"
            metavar = flag.lstrip("-").upper().replace("-", "_")
        g.add_argument(flag, *other, dest=_dest(flag), type=converter(key), metavar=metavar,
                       default=argparse.SUPPRESS, help=text)
    g.add_argument("--set", dest="opt_set", action="append", default=[], metavar="KEY=VALUE",
                   help="any config key, e.g. --set train.momentum=0.8 (repeatable; the keys "
                        "without a flag are listed below)")
    p.epilog = other_keys_text()


def other_keys_text() -> str:
    """The config keys that have no flag, with their help and defaults (for ``--help``)."""
    return _other_keys_text(min(max(shutil.get_terminal_size().columns - 2, 60), 100))


@functools.cache  # five commands show it: filled once per terminal width
def _other_keys_text(cols: int) -> str:
    flagged = {key for _f, key, _o in RUN_FLAGS}
    keys = [k for k in ALL_KEYS if k not in flagged]
    width = max(map(len, keys)) + 4
    lines = [textwrap.fill(f"{KNOBS[k].help} (default: {KNOBS[k].default_text()}"
                           f"{C.task_default_text(k)})",
                           cols, initial_indent=f"  {k:{width - 2}s}",
                           subsequent_indent=" " * width) for k in keys]
    return ("keys without a flag (--set KEY=VALUE, or in a TOML file):\n" + "\n".join(lines))


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """Flags and --set as flat ``{full.key: value}``, each value checked and converted."""
    out: dict[str, Any] = {}
    for flag, key, _other in RUN_FLAGS:
        if hasattr(args, _dest(flag)):  # given (`--backend none` too: it unsets the file's)
            out[key] = getattr(args, _dest(flag))
    for item in getattr(args, "opt_set", []) or []:
        k, sep, v = item.partition("=")
        if not sep:
            raise ConfigError(f"--set needs KEY=VALUE, got {show(item)}")
        key = resolve_key(k)
        try:
            out[key] = check_value(key, v)
        except BadValue as e:
            raise ConfigError(f"--set {key}: {e.problem}") from None
    return out


def config_from_args(args: argparse.Namespace,
                     defaults: dict[str, Any] | None = None) -> RunConfig:
    """Defaults <- ``defaults`` <- TOML file <- flags <- --set; validated."""
    merged: dict[str, Any] = dict(defaults or {})
    path = getattr(args, "config", None)
    given: dict[str, Any] = load_flat(path) if path else {}
    given.update(overrides_from_args(args))
    merged.update(given)
    if merged.get("script.path") is not None:  # the user's own script, under wrap
        for key in merged:
            if key not in C.SPEC_KEYS:
                raise ConfigError(f"{key} does not apply to a script (it builds its own model, "
                                  f"data and training); a script takes "
                                  f"{', '.join(sorted(C.SPEC_KEYS))}")
        merged = C.script_defaults(merged)
    cfg = C.build(merged)
    warn_unused(cfg, given)
    return cfg


def warn_unused(cfg: RunConfig, given: Iterable[str]) -> None:
    """One line on stderr for each option the user set that this run does not use, and for
    more loader workers than this host's cores (in place of torch's own four-line warning,
    printed twice by every loader: data/loader.py silences it)."""
    lines = list(unused(cfg, given))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    workers = cfg.data.workers if cfg.data.loader == "pipelined" else 0
    unused_workers = any(line.startswith("--workers") for line in lines)  # no loader at all
    if cores and workers > cores and not unused_workers:  # torch's check: one loader, this host
        lines.append(f"--workers {workers} on {cores} cores: the loader workers time-share the "
                     "cores with training, so data wait and step times measure that "
                     "contention")
    for line in lines:
        print(f"scaleprobe: warning: {line}", file=sys.stderr, flush=True)
