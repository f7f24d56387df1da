"""Run configuration: one frozen, validated dataclass per component.

A configuration is built from, in increasing priority: the defaults below, a TOML file,
command-line flags, and ``--set section.key=value`` overrides. Keys may be written in full
(``train.batch_size``) or by their short alias (``batch_size``), in TOML files, in sweep
grids and in ``--set``. ``RunConfig.to_dict()`` is saved with every result.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from scaleprobe.errors import ConfigError
from scaleprobe.registry import suggest
from scaleprobe.traits import TRAITS, traits_of


@dataclass(frozen=True)
class ModelConfig:
    name: str = "digits_cnn"  # torchvision name, digits_cnn, mlp, or path.py:fn / pkg.mod:fn
    channels_last: bool = False  # NHWC memory format for conv nets
    pretrained: bool = False  # never downloads; only meaningful with cached weights


@dataclass(frozen=True)
class DataConfig:
    dataset: str = "digits"  # see `scaleprobe datasets`
    data_dir: str | None = None  # root of on-disk datasets (imagefolder, cifar10, mnist, voc, lfw)
    download: bool = False  # allow torchvision to download (needs a network)
    image_size: int | None = None  # side in pixels; None = the dataset's natural size
    num_samples: int = 2048  # synthetic / jpeg-synth: samples in the dataset
    num_classes: int | None = None  # None = the dataset's own
    val_fraction: float = 0.2  # held-out split for --eval when the dataset has no test split
    loader: str = "pipelined"  # naive (synchronous, in-process) | pipelined (worker processes)
    workers: int = 2  # pipelined: loader worker processes
    prefetch: int = 2  # pipelined: batches queued per worker
    transform: str = "light"  # light (convert + normalise) | heavy (crop + flip + colour jitter)
    skip_bad_samples: bool = False  # skip and count unreadable images instead of failing
    cache_dir: str | None = None  # where generated datasets are cached (jpeg-synth)


@dataclass(frozen=True)
class TrainConfig:
    batch_size: int = 64  # per device (weak scaling)
    global_batch: int | None = None  # split across devices instead (strong scaling)
    steps: int | str | None = None  # timed steps, or "auto"; None with epochs=None means "auto"
    epochs: int | None = None  # whole epochs instead of steps
    lr: float = 0.05  # learning rate for the (global) reference batch
    lr_scaling: str = "none"  # none | linear (Goyal et al., with warm-up)
    optimizer: str = "sgd"  # sgd | adamw
    momentum: float = 0.9
    weight_decay: float = 0.0
    amp: str = "off"  # off | bf16 | fp16
    seed: int = 0
    warmup_steps: int = 5  # untimed steps before the measuring window
    eval: bool = False  # top-1 / task metric on the held-out split after training
    max_steps: int = 200  # cap for steps="auto"
    max_seconds: float = 120.0  # cap on the timed window's wall time for steps="auto"
    min_steps: int = 10  # steps="auto" never stops before this


@dataclass(frozen=True)
class TaskConfig:
    task: str = "classification"  # classification | face | detection
    loss: str = "softmax"  # face: triplet | softmax
    embedding_dim: int = 128  # face: embedding size
    images_per_identity: int = 4  # face/triplet: images of one identity in each batch


@dataclass(frozen=True)
class DistConfig:
    strategy: str = "single"  # single | dp | ddp | ps | localsgd
    nproc: int = 1  # processes on this host (ddp, ps, localsgd)
    nnodes: int = 1  # hosts
    node_rank: int = 0  # this host's index
    rdzv_endpoint: str | None = None  # HOST:PORT for several hosts; chosen for one host
    master_port: int | None = None  # one host: the rendezvous port on 127.0.0.1 (None: a free one)
    timeout_s: float = 30.0  # collective timeout: a lost rank ends the job within this
    backend: str | None = None  # None = nccl on CUDA, gloo on CPU
    audit: bool = True  # shard audit over the training ranks (ddp, localsgd, ps workers)
    calibrate_comm: bool = True  # measure exposed communication with a no_sync phase
    calibration_steps: int = 8  # steps of each kind (sync, no_sync) in calibration; >= 2
    ps_mode: str = "sync"  # parameter server: sync | async
    ps_device: str = "auto"  # parameter server's parameters: auto | cpu
    average_every: int = 4  # local SGD: average every K steps
    parity: bool = False  # compare accuracy on 1 and N processes
    bucket_cap_mb: float = 25.0  # DDP gradient bucket size
    link: str | None = None  # network the prediction assumes: 1gbit, 10gbit, 200mbit, or a
    # `scaleprobe comm` results file; None = loopback on one host, 10gbit across hosts
    sampler: str = "distributed"  # ddp, localsgd, ps: distributed | same_batch | no_set_epoch
    # (the last two inject the classic sharding bugs, to check that the shard audit catches them)


@dataclass(frozen=True)
class MeasureConfig:
    monitor_interval_s: float = 0.5  # background sampler period
    stable_rel_ci: float = 0.02  # steps="auto": stop when the median's 95% CI half-width <= this
    profile_every: float | None = None  # seconds between torch.profiler captures (off)
    summary_every: float | None = None  # seconds between TensorBoard summaries (off)
    memory_limit: str | None = None  # CPU: cap the process's memory, e.g. "2GiB"
    progress: bool = True  # live progress bar


@dataclass(frozen=True)
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    dist: DistConfig = field(default_factory=DistConfig)
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    out: str = "scaleprobe-out"  # results folder
    name: str | None = None  # label for this run in tables

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def key(self) -> str:
        """A stable hash of everything that affects the measurement (not the output folder, not
        the run's label)."""
        d = self.to_dict()
        d.pop("out", None)
        d.pop("name", None)
        d["measure"].pop("progress", None)
        d["dist"].pop("master_port", None)  # where the ranks meet, not what they measure
        blob = json.dumps(d, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def world_size(self) -> int:
        return self.dist.nproc * self.dist.nnodes

    @property
    def training_ranks(self) -> int:
        """Processes that compute gradients: all of them, less the parameter server."""
        return traits_of(self.dist.strategy).training_ranks(self.world_size)

    def per_device_batch(self, devices: int | None = None) -> int:
        devices = devices or self.training_ranks
        if self.train.global_batch is not None:
            return self.train.global_batch // devices
        return self.train.batch_size


SECTIONS: dict[str, type] = {
    "model": ModelConfig,
    "data": DataConfig,
    "train": TrainConfig,
    "task": TaskConfig,
    "dist": DistConfig,
    "measure": MeasureConfig,
}
TOP_LEVEL = ("out", "name")


def _aliases() -> dict[str, str]:
    out: dict[str, str] = {}
    for sec, cls in SECTIONS.items():
        for f in fields(cls):
            out.setdefault(f.name, f"{sec}.{f.name}")
    out["model"] = "model.name"
    out["task"] = "task.task"
    out["strategy"] = "dist.strategy"
    out["dataset"] = "data.dataset"
    return out


ALIASES = _aliases()
ALL_KEYS = sorted(
    [f"{s}.{f.name}" for s, c in SECTIONS.items() for f in fields(c)] + list(TOP_LEVEL)
)


def resolve_key(key: str) -> str:
    """Map ``batch_size`` or ``train.batch_size`` (or dashes) to the full dotted key."""
    key = key.strip().replace("-", "_")
    if key in TOP_LEVEL or key in ALL_KEYS:
        return key
    if key in ALIASES:
        return ALIASES[key]
    near = suggest(key, list(ALIASES) + ALL_KEYS)
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    raise ConfigError(f"unknown config key '{key}'{hint}")


def _field_type(full: str) -> str:
    if full in TOP_LEVEL:
        return "str | None"
    sec, name = full.split(".")
    for f in fields(SECTIONS[sec]):
        if f.name == name:
            return str(f.type)
    raise ConfigError(f"unknown config key '{full}'")


def parse_value(full: str, raw: Any) -> Any:
    """Convert a string from --set or the command line to the field's type."""
    if not isinstance(raw, str):
        return raw
    typ = _field_type(full)
    text = raw.strip()
    if text.lower() in ("none", "null") and "None" in typ:
        return None
    try:
        if typ.startswith("bool"):
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(text)
        if typ.startswith("int | str"):
            return text if text == "auto" else int(text)
        if typ.startswith("int"):
            return int(text)
        if typ.startswith("float"):
            return float(text)
    except ValueError:
        raise ConfigError(f"{full}: '{raw}' is not a valid {typ.split(' ')[0]}") from None
    return text


def load_toml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        with p.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {p}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"cannot parse {p}: {e}") from None
    except OSError as e:
        raise ConfigError(f"cannot read {p}: {e.strerror}") from None


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"train": {"lr": 1}}`` -> ``{"train.lr": 1}``; keys are resolved through aliases."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and not prefix and k in SECTIONS:
            for kk, vv in v.items():
                out[resolve_key(f"{k}.{kk}")] = vv
        else:
            out[resolve_key(prefix + k)] = v
    return out


def build(overrides: dict[str, Any] | None = None, base: RunConfig | None = None) -> RunConfig:
    """Apply flat ``{key: value}`` overrides (aliases allowed) to ``base`` and validate."""
    cfg = base or RunConfig()
    per_section: dict[str, dict[str, Any]] = {}
    top: dict[str, Any] = {}
    for k, v in (overrides or {}).items():
        full = resolve_key(k)
        v = parse_value(full, v)
        if full in TOP_LEVEL:
            top[full] = v
        else:
            sec, name = full.split(".")
            per_section.setdefault(sec, {})[name] = v
    changes = {sec: replace(getattr(cfg, sec), **vals) for sec, vals in per_section.items()}
    cfg = _task_default_model(replace(cfg, **changes, **top))
    validate(cfg)
    return cfg


# tasks whose models are not classifiers: the default --model stands for the task's own default
TASK_DEFAULT_MODELS = {"detection": "ssdlite320_mobilenet_v3_large"}


def _task_default_model(cfg: RunConfig) -> RunConfig:
    """The model that will really be built, so the saved config, its key and every table name
    it (a detection run left at the default model records its detector, not digits_cnn)."""
    default = TASK_DEFAULT_MODELS.get(cfg.task.task)
    if default is None or cfg.model.name != ModelConfig.name:
        return cfg
    return replace(cfg, model=replace(cfg.model, name=default))


def from_dict(d: dict[str, Any]) -> RunConfig:
    """Rebuild a RunConfig from ``to_dict()`` output (as saved in config.json)."""
    return build(flatten(d))


def parse_size(text: str) -> int:
    """'2GiB' -> bytes. Accepts K/M/G/T with optional 'i' and 'B' (powers of 1024) or digits."""
    t = text.strip().upper().replace("IB", "").replace("B", "")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    try:
        if t and t[-1] in mult:
            return int(float(t[:-1]) * mult[t[-1]])
        return int(float(t))
    except ValueError:
        raise ConfigError(f"cannot read size '{text}' (e.g. 512MiB, 2GiB)") from None


def _choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        near = suggest(value, list(choices))
        hint = f"; did you mean {', '.join(near)}?" if near else f" (choices: {', '.join(choices)})"
        raise ConfigError(f"unknown {name} '{value}'{hint}")


def validate(cfg: RunConfig) -> None:
    t, d, ds = cfg.train, cfg.data, cfg.dist
    if t.batch_size <= 0:
        raise ConfigError(f"batch size must be positive, got {t.batch_size}")
    if t.global_batch is not None:
        if t.global_batch <= 0:
            raise ConfigError(f"global batch must be positive, got {t.global_batch}")
        if t.global_batch % cfg.training_ranks:
            raise ConfigError(f"global batch {t.global_batch} does not split evenly over "
                              f"{cfg.training_ranks} training processes")
    if isinstance(t.steps, str) and t.steps != "auto":
        raise ConfigError(f"steps must be a positive number or 'auto', got '{t.steps}'")
    if isinstance(t.steps, int) and t.steps <= 0:
        raise ConfigError(f"steps must be positive, got {t.steps}")
    if t.epochs is not None and t.epochs <= 0:
        raise ConfigError(f"epochs must be positive, got {t.epochs}")
    if t.epochs is not None and t.steps is not None:
        raise ConfigError("give either --steps or --epochs, not both")
    if t.warmup_steps < 0:
        raise ConfigError("warmup steps cannot be negative")
    if t.lr <= 0:
        raise ConfigError(f"learning rate must be positive, got {t.lr}")
    _choice("optimizer", t.optimizer, ("sgd", "adamw"))
    _choice("amp mode", t.amp, ("off", "bf16", "fp16"))
    _choice("lr scaling", t.lr_scaling, ("none", "linear"))
    _choice("loader", d.loader, ("naive", "pipelined"))
    _choice("transform", d.transform, ("light", "heavy"))
    if d.workers < 0 or d.prefetch < 1:
        raise ConfigError("workers must be >= 0 and prefetch >= 1")
    if d.loader == "pipelined" and d.workers == 0:
        raise ConfigError("--loader pipelined needs --workers >= 1 (use --loader naive for none)")
    if d.image_size is not None and d.image_size < 8:
        raise ConfigError(f"image size must be at least 8 pixels, got {d.image_size}")
    if not 0 < d.val_fraction < 1:
        raise ConfigError("val_fraction must be between 0 and 1")
    if d.num_samples <= 0:
        raise ConfigError("num_samples must be positive")
    _choice("task", cfg.task.task, ("classification", "face", "detection"))
    _choice("loss", cfg.task.loss, ("softmax", "triplet"))
    _choice("strategy", ds.strategy, tuple(TRAITS))
    _choice("ps mode", ds.ps_mode, ("sync", "async"))
    _choice("ps device", ds.ps_device, ("auto", "cpu"))
    _choice("sampler", ds.sampler, ("distributed", "same_batch", "no_set_epoch"))
    if ds.nproc < 1 or ds.nnodes < 1:
        raise ConfigError("nproc and nnodes must be at least 1")
    if not 0 <= ds.node_rank < ds.nnodes:
        raise ConfigError(f"node rank {ds.node_rank} is outside 0..{ds.nnodes - 1}")
    if ds.nnodes > 1 and not ds.rdzv_endpoint:
        raise ConfigError("several hosts need --rdzv-endpoint HOST:PORT")
    tr = traits_of(ds.strategy)
    if tr.in_process and ds.nproc * ds.nnodes > 1:
        raise ConfigError(f"--strategy {ds.strategy} runs in one process; use ddp for --nproc > 1")
    if tr.towers and cfg.task.task == "detection":
        raise ConfigError(f"--strategy {ds.strategy} cannot scatter detection targets (a list of "
                          "boxes per image) over its towers; use --strategy ddp")
    if tr.needs_any_source_recv and ds.backend == "nccl":
        raise ConfigError(f"--strategy {ds.strategy} needs --backend gloo: its server receives "
                          "from whichever worker is ready, which nccl cannot do")
    if not tr.fp16_loss_scaling and t.amp == "fp16":
        raise ConfigError(f"--strategy {ds.strategy} with --amp fp16 is not supported: the loss "
                          "scale lives in each worker while the server applies the gradients; "
                          "use --amp bf16")
    if cfg.world_size < tr.min_world:
        raise ConfigError(f"--strategy {ds.strategy} needs --nproc >= {tr.min_world} (one server "
                          "and at least one worker)")
    if ds.average_every < 1:
        raise ConfigError("average_every must be at least 1")
    if ds.calibration_steps < 2:
        raise ConfigError("calibration_steps must be at least 2 (the first step of each kind is "
                          f"dropped), got {ds.calibration_steps}")
    if ds.timeout_s <= 0:
        raise ConfigError("timeout must be positive")
    if ds.master_port is not None and not 1 <= ds.master_port <= 65535:
        raise ConfigError(f"--master-port must be 1..65535, got {ds.master_port}")
    if cfg.measure.memory_limit is not None:
        parse_size(cfg.measure.memory_limit)
