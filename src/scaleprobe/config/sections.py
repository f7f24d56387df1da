"""A run's configuration as declared: one frozen dataclass per section (model, data, train,
task, dist, measure, script) and ``RunConfig`` over them, every field declared once with
``option`` (config/knobs.py): its type, default, help and accepted values; and the tables read
from those declarations (``SECTIONS``, ``KNOBS`` by full key, ``ALIASES``). Reading keys and
files is ``config/keys.py``; building and checking a configuration is ``config/runconfig.py``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shlex
from dataclasses import dataclass, field, fields
from typing import Any

from scaleprobe.config.knobs import Knob, knobs, option
from scaleprobe.core.errors import ConfigError
from scaleprobe.core.result_model import RunResult
from scaleprobe.core.run_blocks import ConfigBlock
from scaleprobe.core.traits import TRAITS, traits_of

# train.malloc=steady: glibc's mmap threshold at the largest its own adjustment reaches on
# 64-bit, and a trim threshold of 256 MiB; and the environment that sets the same in a script
STEADY_MMAP_BYTES, STEADY_TRIM_BYTES = 32 << 20, 256 << 20
STEADY_MALLOC_ENV = (f"MALLOC_MMAP_THRESHOLD_={STEADY_MMAP_BYTES} "
                     f"MALLOC_TRIM_THRESHOLD_={STEADY_TRIM_BYTES}")
# dist.gloo_io: gloo's socket thread, one per gloo device (process group), named by gloo
GLOO_IO_THREAD = "gloo_tcp_loop"


def parse_size(text: str) -> int:
    """'2GiB' -> bytes. Accepts K/M/G/T with optional 'i' and 'B' (powers of 1024) or digits."""
    t = text.strip().upper().replace("IB", "").replace("B", "")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    try:
        n = int(float(t[:-1]) * mult[t[-1]]) if t and t[-1] in mult else int(float(t))
    except (ValueError, OverflowError):  # not a number; inf
        n = 0
    if n <= 0:
        raise ConfigError(f"cannot read size '{text}' (e.g. 512MiB, 2GiB)")
    return n


def _is_size(text: str) -> bool:
    try:
        return parse_size(text) > 0
    except ConfigError:
        return False


def _is_target(text: str) -> bool:
    """METRIC=VALUE in shape; ``validate`` names what is wrong with the metric or the value."""
    return "=" in text


@dataclass(frozen=True)
class ModelConfig:
    name: str = option("digits_cnn", "torchvision name, digits_cnn, mlp, mlp_large, linear, "
                       "gpt_tiny, "
                       "gpt2_small (--task lm), or FILE.py:FUNC / package.module:FUNC "
                       "(`scaleprobe models`)", text="a model name")
    channels_last: bool = option(False, "NHWC memory format for conv nets")
    pretrained: bool = option(False, "cached weights only; never downloads")
    compile: bool = option(False, "torch.compile the model (after DDP's wrapper, so its graphs "
                           "split at the gradient buckets); compiling happens in the untimed "
                           "warm-up and is reported apart (metrics.compile_time_s)")
    compile_mode: str = option("default", "--compile: torch.compile's mode",
                               choices=("default", "reduce-overhead", "max-autotune",
                                        "max-autotune-no-cudagraphs"))
    compile_backend: str = option("inductor", "--compile: torch.compile's backend; inductor "
                                  "generates kernels, aot_eager traces forward and backward "
                                  "graphs without generating code (seconds, not minutes, on a "
                                  "CPU: to check graphs and recompiles, not to measure speed)",
                                  choices=("inductor", "aot_eager", "eager"))
    layers: int | None = option(None, "GPT models: transformer blocks", ge=1,
                                unset="the named model's own")
    width: int | None = option(None, "GPT models: model width (d_model), a multiple of heads",
                               ge=1, unset="the named model's own")
    heads: int | None = option(None, "GPT models: attention heads", ge=1,
                               unset="the named model's own")


@dataclass(frozen=True)
class DataConfig:
    dataset: str = option("digits", "digits, synthetic (made once on the device), "
                          "synthetic-loader, jpeg-synth, imagefolder, cifar10, mnist, voc, lfw; "
                          "--task lm: text, tokens, tokens-synthetic (`scaleprobe datasets`)",
                          text="a dataset name")
    data_dir: str | None = option(None, "root folder of an on-disk dataset (imagefolder, "
                                  "cifar10, mnist, voc, lfw, tokens, text)")
    download: bool = option(False, "let torchvision download (needs a network)")
    image_size: int | None = option(None, "input side in pixels", ge=8,
                                    unset="the dataset's own size")
    num_samples: int = option(2048, "samples in synthetic / jpeg-synth / tokens-synthetic "
                              "data", ge=1)
    num_classes: int | None = option(None, "classes", ge=1, unset="the dataset's own")
    val_fraction: float = option(0.2, "held-out split for --eval when the dataset has no test "
                                 "split", gt=0, lt=1)
    loader: str = option("pipelined", "naive (in-process, synchronous) | pipelined (worker "
                         "processes)", choices=("naive", "pipelined"))
    workers: int = option(2, "pipelined: loader worker processes", ge=0)
    prefetch: int = option(2, "pipelined: batches queued per worker", ge=1)
    transform: str = option("light", "light (convert + normalise) | heavy (crop + flip + colour "
                            "jitter)", choices=("light", "heavy"))
    skip_bad_samples: bool = option(False, "skip and count unreadable images instead of failing")
    cache_dir: str | None = option(None, "where generated datasets (jpeg-synth, text) and the "
                                   "digits are cached",
                                   unset="$XDG_CACHE_HOME/scaleprobe or ~/.cache/scaleprobe")
    seq_len: int | None = option(None, "--task lm: tokens per sample, also the model's context",
                                 ge=2, unset="the model's context (gpt_tiny 128, gpt2_small 1024)")
    vocab_size: int | None = option(None, "--task lm: vocabulary size (token files: at least "
                                    "their largest token + 1)", ge=2,
                                    unset="the data's own (meta.json, else largest token + 1; "
                                    "text: 256; tokens-synthetic: the model's)")
    eval_windows: int | None = option(256, "--task lm: held-out samples evaluated, spread "
                                      "evenly over the held-out split (none: all)", ge=1,
                                      unset="every sample of the held-out split")


@dataclass(frozen=True)
class TrainConfig:
    batch_size: int = option(64, "samples per device per step (weak scaling)", ge=1)
    global_batch: int | None = option(None, "one batch split across devices instead (strong "
                                      "scaling)", ge=1, unset="--batch-size per device")
    steps: int | str | None = option(None, "timed steps, or auto: stop when the median step is "
                                     "stable, after --min-steps, by --max-steps or "
                                     "--max-seconds", ge=1, choices=("auto",),
                                     unset="auto unless --epochs")
    epochs: int | None = option(None, "whole epochs instead of steps", ge=1)
    lr: float = option(0.05, "learning rate for the (global) reference batch", gt=0)
    lr_scaling: str = option("none", "none | linear (Goyal et al., with warm-up)",
                             choices=("none", "linear"))
    optimizer: str = option("sgd", "sgd | adamw", choices=("sgd", "adamw"))
    momentum: float = option(0.9, "SGD momentum", ge=0, lt=1)
    weight_decay: float = option(0.0, "L2 penalty", ge=0)
    amp: str = option("off", "mixed precision: off | bf16 | fp16", choices=("off", "bf16", "fp16"))
    seed: int = option(0, "random seed", ge=0, lt=2**32)
    warmup_steps: int = option(5, "untimed steps before the measuring window", ge=0)
    warmup_epochs: float | None = option(None, "--lr-scaling linear: ramp the learning rate "
                                         "linearly over this many epochs (Goyal et al. 2017 "
                                         "use 5)", ge=0, unset="over the --warmup-steps steps")
    lr_warmup: str = option("none", "learning-rate warm-up: none | linear (from lr / w up to "
                            "--lr over the w = --warmup-steps untimed steps, or "
                            "--warmup-epochs)", choices=("none", "linear"))
    eval: bool = option(False, "task metric on the held-out split after training")
    max_steps: int = option(200, "steps=auto: at most this many timed steps", ge=1)
    max_seconds: float = option(120.0, "steps=auto: at most this many seconds of timed steps",
                                gt=0)
    min_steps: int = option(10, "steps=auto: never stop before this many timed steps", ge=1)
    target: str | None = option(None, "train until the task metric reaches this, e.g. "
                                "accuracy=0.95 (also verification_accuracy, map50, and for "
                                "--task lm loss or perplexity, lower is better); records "
                                "the time to it (docs/TIME_TO_TARGET.md)", unset="off",
                                valid=_is_target, text="METRIC=VALUE, e.g. accuracy=0.95")
    eval_every: int | None = option(None, "--target: evaluate every this many steps", ge=1,
                                    unset="at the end of every epoch")
    max_epochs: int = option(20, "--target: stop after this many epochs if not reached", ge=1)
    target_copies: int = option(32, "--target: copies of the model kept between two "
                                "evaluations (in host memory, at most 2 GiB together), evaluated "
                                "after the hit to narrow the step it was reached at; 0: none",
                                ge=0)
    malloc: str = option("default", "glibc's allocator in the ranks: default (its mmap and "
                         "trim thresholds move as the process frees memory: a fresh process "
                         "of one configuration can re-fault its freed memory every step or "
                         "not, and its step differed by up to 28% from the next) | steady "
                         "(thresholds fixed at 32 MiB and 256 MiB, as MALLOC_MMAP_THRESHOLD_ "
                         "and MALLOC_TRIM_THRESHOLD_ set them: freed memory stays in the "
                         "process; docs/REPORTS.md)", choices=("default", "steady"))


@dataclass(frozen=True)
class TaskConfig:
    task: str = option("classification", "classification | face | detection | lm",
                       choices=("classification", "face", "detection", "lm"))
    loss: str = option("softmax", "face: triplet | softmax", choices=("softmax", "triplet"))
    embedding_dim: int = option(128, "face: embedding size", ge=2)
    images_per_identity: int = option(4, "face/triplet: images of one identity in each batch",
                                      ge=1)


@dataclass(frozen=True)
class DistConfig:
    strategy: str = option("single", "single | dp | ddp | ps | localsgd | fsdp",
                           choices=tuple(TRAITS))
    nproc: int = option(1, "processes on this host (ddp, ps, localsgd, fsdp)", ge=1)
    nnodes: int = option(1, "hosts", ge=1)
    node_rank: int = option(0, "this host's index (0 = the rendezvous host)", ge=0)
    rdzv_endpoint: str | None = option(None, "HOST:PORT of host 0 (several hosts)",
                                       unset="chosen for one host")
    master_port: int | None = option(None, "one host: the rendezvous port on 127.0.0.1",
                                     ge=1, le=65535, unset="a free one")
    timeout_s: float = option(30.0, "collective timeout in seconds: a lost rank ends the job "
                              "within this (wrap: a rank with no step, batch or forward pass "
                              "for this long ends it as stalled)", gt=0, le=86400)
    force: bool = option(False, "start the ranks even when they do not fit this host (more "
                         "than 2 per core on the CPU, or more memory than is available)")
    backend: str | None = option(None, "gloo | nccl", choices=("gloo", "nccl"),
                                 unset="nccl on CUDA, gloo on CPU")
    audit: bool = option(True, "shard audit over the training ranks (ddp, fsdp, localsgd, ps "
                         "workers)")
    calibrate_comm: bool = option(True, "measure exposed communication with a no_sync phase")
    calibration_steps: int = option(8, "steps of each kind (sync, no_sync) in calibration; the "
                                    "first of each is dropped", ge=2)
    ps_mode: str = option("sync", "parameter server: sync | async", choices=("sync", "async"))
    ps_device: str = option("auto", "parameter server's parameters: auto | cpu",
                            choices=("auto", "cpu"))
    average_every: int = option(4, "local SGD: average every K steps", ge=1)
    parity: bool = option(False, "also train on 1 process and compare accuracy")
    parity_tolerance: float = option(0.01, "--parity: the accuracy difference (N - 1, "
                                     "absolute) that still counts as parity; the verdict's "
                                     "margin, never derived from the noise", gt=0, lt=1)
    bucket_cap_mb: float = option(25.0, "DDP gradient bucket size in MB", gt=0)
    threads_per_rank: int | None = option(None, "compute threads of each rank "
                                          "(torch.set_num_threads; OMP_NUM_THREADS for a "
                                          "script); scale and sweeps over nproc set every "
                                          "point to the largest count's cores / processes",
                                          ge=1, unset="cores / processes on this host")
    gloo_io: str = option("default", "gloo's socket threads in the ranks: default | batch "
                          "(SCHED_BATCH: woken, a socket thread no longer takes the core from "
                          "the thread about to post the receive it polls for, a stall that "
                          "lasted to the kernel's next tick: FSDP of gpt_tiny on 2 CPU ranks "
                          "took 0.71x the step, DDP of resnet18 0.94x; docs/COMMUNICATION.md)",
                          choices=("default", "batch"))
    link: str | None = option(None, "network the comm prediction assumes: 1gbit, 10gbit, "
                              "200mbit, measured:DIR (`scaleprobe comm` results); rankN=RATE "
                              "(e.g. rank2=100mbit, root) puts each rank in a network "
                              "namespace of its own, rank N behind a cable of that rate",
                              unset="loopback on one host, 10gbit across hosts")
    sampler: str = option("distributed", "distributed | same_batch | no_set_epoch (the last two "
                          "inject the classic sharding bugs the shard audit must catch)",
                          choices=("distributed", "same_batch", "no_set_epoch"))


@dataclass(frozen=True)
class MeasureConfig:
    monitor_interval_s: float = option(0.5, "background sampler period in seconds", gt=0,
                                       le=3600)
    stable_rel_ci: float = option(0.02, "steps=auto: stable when the median's 95% CI "
                                  "half-width is within this fraction", ge=0, lt=1)
    profile_every: float | None = option(None, "seconds between torch.profiler captures", gt=0,
                                         unset="off")
    summary_every: float | None = option(None, "seconds between TensorBoard summaries", gt=0,
                                         unset="off")
    memory_limit: str | None = option(None, "CPU: cap the process's memory, e.g. 2GiB",
                                      unset="no cap", valid=_is_size,
                                      text="a size such as 512MiB or 2GiB")
    progress: bool = option(True, "live progress bar")
    memory_probe: bool = option(True, "after the window, untimed probe steps at three batch "
                                "sizes (the batch, its half and quarter) for the memory "
                                "prediction, `predict --memory` (docs/MEMORY.md); off: "
                                "memory_facts null")
    gns: bool | None = option(None, "gradient noise scale B_noise (McCandlish et al. 2018; "
                              "docs/CRITICAL_BATCH.md): under ddp from its all-reduce hook, "
                              "on one process from two half-batches per step",
                              unset="on under ddp with 2+ processes, off otherwise")


def _script_text(text: str) -> bool:
    return text.startswith("-m ") and len(text.split()) == 2 or not text.startswith("-")


@dataclass(frozen=True)
class ScriptConfig:
    path: str | None = option(None, "your own training script, run under `wrap` instead of the "
                              "built-in loop: FILE.py or -m package.module (docs/WRAP.md)",
                              unset="the built-in loop", text="FILE.py or -m package.module",
                              valid=_script_text)
    args: str | None = option(None, "the script's arguments, split as a shell splits them (in a "
                              "TOML file also a list of strings)", unset="none")

    def target(self) -> list[str]:
        """The command line after ``wrap --``: ``[FILE.py, *args]`` or ``[-m, module, *args]``."""
        assert self.path is not None
        head = self.path.split() if self.path.startswith("-m ") else [self.path]
        return head + shlex.split(self.args or "")

    @staticmethod
    def from_target(target: list[str]) -> dict[str, Any]:
        """The keys of a ``wrap -- ...`` command line (the inverse of :meth:`target`)."""
        n = 2 if target[0] == "-m" else 1
        rest = target[n:]
        return {"script.path": " ".join(target[:n]),
                "script.args": shlex.join(rest) if rest else None}


@dataclass(frozen=True)
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    dist: DistConfig = field(default_factory=DistConfig)
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    script: ScriptConfig = field(default_factory=ScriptConfig)
    out: str = option("scaleprobe-out", "results folder")
    name: str | None = option(None, "label for this run in tables", unset="model-dataset-batch, e.g. digits_cnn-digits-b64")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def key(self) -> str:
        """A stable hash of everything that affects the measurement (not the output folder, not
        the run's label)."""
        d = self.to_dict()
        d.pop("out", None)
        d.pop("name", None)
        d["measure"].pop("progress", None)
        d["measure"].pop("memory_probe", None)  # after the window: not in what is timed
        d["dist"].pop("force", None)  # how the ranks were let start, not what they measure
        d["dist"].pop("master_port", None)  # where the ranks meet, not what they measure,
        d["dist"].update(rdzv_endpoint=None, node_rank=0)  # nor which host wrote the record
        if d["script"]["path"] is None:  # the built-in loop: keys as before scripts had a section
            d.pop("script")
        if not d["model"]["compile"]:  # eager: keys as before --compile existed
            del d["model"]["compile"], d["model"]["compile_mode"], d["model"]["compile_backend"]
        for full in LATER_KEYS:  # at their defaults: keys as before these existed
            sec, name = full.split(".")
            if name in d[sec] and d[sec][name] == KNOBS[full].default:
                d[sec].pop(name)
        blob = json.dumps(d, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def default_name(self) -> str:
        """The run's label when ``name`` is not set: model-dataset-batch, the task when it is
        not classification (a face run on lfw is not named like a classifier on lfw), and
        the strategy and world size when several devices train
        (``digits_cnn-digits-b64-ddpx2``, ``resnet18-lfw-b64-face-triplet``)."""
        d, t, k = self.dist, self.train, self.task
        b = f"gb{t.global_batch}" if t.global_batch else f"b{t.batch_size}"
        task = "" if k.task == "classification" else f"-{k.task}"
        if k.task == "face" and k.loss != "softmax":
            task += f"-{k.loss}"
        tr = traits_of(d.strategy)
        n = f"-{d.strategy}x{self.world_size}" if tr.launched or tr.towers else ""
        return f"{self.model.name.rsplit(':', 1)[-1]}-{self.data.dataset}-{b}{task}{n}"

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
    "script": ScriptConfig,
}
TOP_LEVEL = ("out", "name")
# the keys that set the batch: a sweep over one of them is a batch sweep (its own table)
BATCH_KEYS = ("train.batch_size", "train.global_batch")


def _aliases() -> dict[str, str]:
    out: dict[str, str] = {}
    for sec, cls in SECTIONS.items():
        for f in fields(cls):
            out.setdefault(f.name, f"{sec}.{f.name}")
    out["model"] = "model.name"
    out["task"] = "task.task"
    out["strategy"] = "dist.strategy"
    out["dataset"] = "data.dataset"
    out["script"] = "script.path"
    return out


ALIASES = _aliases()
# every key's declared type, default, help and accepted values (schema.Knob), by full key
KNOBS: dict[str, Knob] = {k: v for sec, cls in SECTIONS.items()
                          for k, v in knobs(cls, f"{sec}.").items()}
KNOBS.update({k: v for k, v in knobs(RunConfig).items() if k in TOP_LEVEL})
ALL_KEYS = sorted(KNOBS)
# a run record's config block is read as a RunConfig on these declarations (core/run_blocks.py)
RunResult.codec = ConfigBlock(RunConfig, SECTIONS, KNOBS)
# keys added after results were written: left out of RunConfig.key() while at their defaults,
# so a sweep resumes the points it finished before they existed (--task lm's sizes and data)
LATER_KEYS = ("model.layers", "model.width", "model.heads", "data.seq_len", "data.vocab_size",
              "data.eval_windows", "measure.gns", "dist.threads_per_rank",
              "dist.parity_tolerance", "model.compile_backend", "train.lr_warmup",
              "train.target_copies", "train.malloc", "dist.gloo_io")
# what a record from before each of them ran with: its default
LATER_DEFAULTS = {k: KNOBS[k].default for k in LATER_KEYS}
SECTION_ONLY = tuple(s for s in SECTIONS if s not in ALIASES)  # train, data, dist, measure
