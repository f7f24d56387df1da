"""Run configuration: one frozen, validated dataclass per component.

A configuration is built from, in increasing priority: the defaults below, a TOML file,
command-line flags, and ``--set section.key=value`` overrides. Keys may be written in full
(``train.batch_size``) or by their short alias (``batch_size``), in TOML files, in sweep
grids and in ``--set``. ``RunConfig.to_dict()`` is saved with every result.

Each field is declared once, with ``option`` (config/knobs.py): its type (the annotation), default,
one line of help and the values it accepts (a range or choices). Every value, wherever it
comes from, is checked against that declaration before use (``check_value``), and a mismatch
is one line naming the key, what it expects and what was given; ``validate`` then checks the
combinations of keys. ``--help`` shows the same defaults and choices.

The declarations are ``config/sections.py`` and the reading of keys and files
``config/keys.py``.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from pathlib import Path
from typing import Any

from scaleprobe.config.keys import check_value, flatten, resolve_key
from scaleprobe.config.rules import check_combinations
from scaleprobe.config.sections import (
    KNOBS,
    SECTIONS,
    TOP_LEVEL,
    DataConfig,
    ModelConfig,
    RunConfig,
    ScriptConfig,
)


def build(overrides: dict[str, Any] | None = None, base: RunConfig | None = None) -> RunConfig:
    """Apply flat ``{key: value}`` overrides (aliases allowed) to ``base`` and validate."""
    cfg = base or RunConfig()
    per_section: dict[str, dict[str, Any]] = {}
    top: dict[str, Any] = {}
    for k, v in (overrides or {}).items():
        full = resolve_key(k)
        v = check_value(full, v)
        if full in TOP_LEVEL:
            top[full] = v
        else:
            sec, name = full.split(".")
            per_section.setdefault(sec, {})[name] = v
    changes = {sec: replace(getattr(cfg, sec), **vals) for sec, vals in per_section.items()}
    given = {f"{sec}.{name}" for sec, vals in per_section.items() for name in vals}
    cfg = _task_default_model(replace(cfg, **changes, **top), given)
    if base is None:  # a base already holds its task's defaults (or the user's choice)
        cfg = _task_defaults(cfg, {resolve_key(k) for k in overrides or {}})
    validate(cfg)
    return cfg


# tasks whose models are not classifiers: the default --model stands for the task's own default
TASK_DEFAULT_MODELS = {"detection": "ssdlite320_mobilenet_v3_large", "lm": "gpt_tiny"}
# tasks that read no images: the default --dataset stands for the task's own default
TASK_DEFAULT_DATASETS = {"lm": "text"}


# a task's own defaults for keys the user did not set (shown in `run --help`). --task lm:
# AdamW at 3e-3 with a linear warm-up over 10 untimed steps, then 50 timed steps, bring gpt_tiny
# on the text corpus below the held-out context-free baseline (measured 2026-11-28: held-out
# 3.23 after 40 steps, 3.13 after 50, against a baseline of 3.288; docs/TASKS.md). The step
# count applies when neither --epochs nor --target sets the length.
TASK_DEFAULT_KEYS: dict[str, dict[str, Any]] = {
    "lm": {"train.optimizer": "adamw", "train.lr": 3e-3, "train.lr_warmup": "linear",
           "train.warmup_steps": 10, "train.steps": 50},
}
LENGTH_KEYS = ("train.steps", "train.epochs", "train.target")


def _task_defaults(cfg: RunConfig, given: set[str]) -> RunConfig:
    """``cfg`` with its task's TASK_DEFAULT_KEYS in place of the keys not in ``given``."""
    per_section: dict[str, dict[str, Any]] = {}
    for key, value in TASK_DEFAULT_KEYS.get(cfg.task.task, {}).items():
        if key in given or (key in LENGTH_KEYS and given & set(LENGTH_KEYS)):
            continue
        sec, name = key.split(".")
        per_section.setdefault(sec, {})[name] = value
    return replace(cfg, **{sec: replace(getattr(cfg, sec), **vals)
                           for sec, vals in per_section.items()})


def task_default_text(key: str) -> str:
    """``; --task lm: adamw`` for a key a task sets otherwise, else ``""`` (help texts)."""
    return "".join(f"; --task {task}: {keys[key]}" for task, keys in TASK_DEFAULT_KEYS.items()
                   if key in keys)


def _task_default_model(cfg: RunConfig, given: Collection[str] = ()) -> RunConfig:
    """The model (and dataset) that will really be used, so the saved config, its key and
    every table name it (a detection run left at the default model records its detector, not
    digits_cnn; an lm run left at the default dataset records text, not digits). Only a key
    left out stands for the task's default: ``--task lm --dataset digits`` given is refused by
    the task's rules, not trained on text without a word."""
    model = TASK_DEFAULT_MODELS.get(cfg.task.task)
    if model is not None and cfg.model.name == ModelConfig.name and "model.name" not in given:
        cfg = replace(cfg, model=replace(cfg.model, name=model))
    dataset = TASK_DEFAULT_DATASETS.get(cfg.task.task)
    if (dataset is not None and cfg.data.dataset == DataConfig.dataset
            and "data.dataset" not in given):
        cfg = replace(cfg, data=replace(cfg.data, dataset=dataset))
    return cfg


def from_dict(d: dict[str, Any]) -> RunConfig:
    """Rebuild a RunConfig from ``to_dict()`` output (as saved in config.json)."""
    return build(flatten(d))


# run options that apply to a script (the rest: the script builds its own model and data)
SCRIPT_KEYS = ("dist.nnodes", "dist.node_rank", "dist.rdzv_endpoint", "dist.master_port",
               "dist.timeout_s", "dist.threads_per_rank", "dist.force", "dist.gloo_io",
               "train.warmup_steps",
               "train.steps", "measure.monitor_interval_s", "measure.progress",
               "measure.summary_every", "measure.profile_every", "out", "name")
# and in an experiment spec: the script itself, its arguments and its process count
SPEC_KEYS = (*SCRIPT_KEYS, "script.path", "script.args", "dist.nproc")


def script_name(target: list[str]) -> str:
    """A short name for a script or module: its file's stem, or the module's last part."""
    return target[1].rsplit(".", 1)[-1] if target[0] == "-m" else Path(target[0]).stem


def script_defaults(flat: dict[str, Any]) -> dict[str, Any]:
    """A script's run options (full keys, with ``script.path``) completed with what wrap sets
    for every script: the script named as the model, its data as the script's own, and the
    launched ranks given DDP's traits (one process per rank, shards audited)."""
    world = int(flat.get("dist.nproc", 1)) * int(flat.get("dist.nnodes", 1))
    name = script_name(ScriptConfig(flat["script.path"]).target())
    return {"model.name": f"script:{name}", "data.dataset": "script",
            "dist.strategy": "ddp" if world > 1 else "single", "dist.calibrate_comm": False,
            **flat}


# keys a printed command leaves out: where results go, the label, the progress bar, where
# the ranks met (each run finds its own)
COMMAND_LEAVES_OUT = frozenset({"out", "name", "measure.progress", "dist.master_port",
                                "dist.rdzv_endpoint", "dist.node_rank"})


def command_options(config: dict[str, Any], leave_out: Any = ()) -> list[str]:
    """``--set KEY=VALUE`` for every key of a recorded configuration (``RunConfig.to_dict()``
    form) that is not at its default, so that a printed command runs the same configuration
    as printed (keys this version does not know, and ``leave_out``, are left out)."""
    out: list[str] = []
    skip = COMMAND_LEAVES_OUT | set(leave_out)
    for sec, vals in config.items():
        pairs = vals.items() if isinstance(vals, dict) and sec in SECTIONS else [(None, vals)]
        for name, v in pairs:
            full = sec if name is None else f"{sec}.{name}"
            if full not in KNOBS or full in skip or v == KNOBS[full].default:
                continue
            text = ("null" if v is None else str(v).lower() if isinstance(v, bool) else str(v))
            out += ["--set", f"{full}={text}"]
    return out


def check_types(cfg: RunConfig) -> None:
    """Every field of ``cfg`` has its declared type and is in its range (a config built in code,
    not through ``build``, is held to the same rules)."""
    for full, knob in KNOBS.items():
        sec, _, name = full.rpartition(".")
        knob.check(getattr(getattr(cfg, sec) if sec else cfg, name), parse=False)


def validate(cfg: RunConfig) -> None:
    """Types and ranges of every key, then the combinations of keys (``config_rules``)."""
    check_types(cfg)
    check_combinations(cfg)
