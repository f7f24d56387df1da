"""The language-model task's names and shapes, torch-free: the GPT family's sizes, the token
datasets, and the rules that keep language models and image models apart.

The configuration checks these (``config_rules``) and the CLI lists them without importing
torch; ``models/gpt.py`` builds the model from a resolved :class:`GPTShape`.

A GPT shape's sizes are overridable one by one (``model.layers``, ``model.width``,
``model.heads``, ``data.seq_len``); an unset key takes the named model's own. ``data.seq_len``
is both the tokens of one sample and the model's context (its position embeddings).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from scaleprobe.core import claim as CL
from scaleprobe.core.errors import ConfigError


@dataclass(frozen=True)
class GPTShape:
    layers: int
    width: int  # d_model
    heads: int
    context: int  # tokens per sample = position embeddings
    vocab: int  # the model's own vocabulary, used where the data does not fix one

    def text(self) -> str:
        return (f"{self.layers} layers x {self.width} wide x {self.heads} heads, context "
                f"{self.context}")


GPT_MODELS: dict[str, tuple[GPTShape, str]] = {
    "gpt_tiny": (GPTShape(4, 128, 4, 128, 256),
                 "GPT decoder, 4 layers x 128 x 4 heads, context 128, tied head (CPU-sized)"),
    "gpt2_small": (GPTShape(12, 768, 12, 1024, 50257),
                   "GPT-2 small shape: 12 layers x 768 x 12 heads, context 1024, tied head"),
}
# tokens-synthetic: random tokens made once on the device; tokens: nanoGPT-style train.bin /
# val.bin under --data-dir; text: the standard library's Python sources, byte-level
TOKEN_DATASETS = ("tokens-synthetic", "tokens", "text")
LM_TASK = "lm"


def is_gpt(name: str) -> bool:
    return name in GPT_MODELS


def is_user_model(name: str) -> bool:
    """``FILE.py:FUNC`` or ``package.module:FUNC``: the user's own builder."""
    return ":" in name


USER_LM = ("a FILE.py:FUNC model for --task lm is a function (its parameters may include "
           "vocab_size and seq_len) returning a module that maps token ids [B, T] to logits "
           "[B, T, V], V at least the data's vocabulary")


def gpt_shape(name: str, layers: int | None = None, width: int | None = None,
              heads: int | None = None, seq_len: int | None = None) -> GPTShape:
    """The named model's shape with the given sizes in place of its own; a width that the
    heads do not divide is a one-line ConfigError."""
    if name not in GPT_MODELS:
        raise ConfigError(f"unknown language model '{name}'; one of {', '.join(GPT_MODELS)}")
    base = GPT_MODELS[name][0]
    shape = replace(base, layers=layers or base.layers, width=width or base.width,
                    heads=heads or base.heads, context=seq_len or base.context)
    if shape.width % shape.heads:
        raise ConfigError(f"model width {shape.width} does not split into {shape.heads} heads "
                          "(set model.width to a multiple of model.heads)")
    return shape


def shape_of(cfg: Any) -> GPTShape:
    """The shape a run config builds (``cfg``: a RunConfig)."""
    m = cfg.model
    return gpt_shape(m.name, m.layers, m.width, m.heads, cfg.data.seq_len)


def resolved_data(cfg: Any) -> Any:
    """``cfg.data`` with ``seq_len`` (and for tokens-synthetic ``vocab_size``) resolved from the
    model's shape when unset; any other task's data unchanged."""
    if cfg.task.task != LM_TASK:
        return cfg.data
    if is_user_model(cfg.model.name):  # the user's module: its sizes are the flags'
        if cfg.data.seq_len is None:
            raise ConfigError(f"--model {cfg.model.name} needs --seq-len (the tokens of one "
                              "sample; a built-in GPT takes its context)")
        if cfg.data.vocab_size is None and cfg.data.dataset == "tokens-synthetic":
            raise ConfigError(f"--model {cfg.model.name} on tokens-synthetic needs a "
                              "vocabulary: --set data.vocab_size=N")
        return cfg.data
    if not is_gpt(cfg.model.name):
        return cfg.data
    shape = shape_of(cfg)
    vocab = cfg.data.vocab_size
    if vocab is None and cfg.data.dataset == "tokens-synthetic":
        vocab = shape.vocab
    return replace(cfg.data, seq_len=shape.context, vocab_size=vocab)


def check_run(cfg: Any) -> None:
    """The lm rules of a RunConfig: :func:`check_combination`, then the GPT shape it builds
    (a width the heads do not divide is an error before any process starts)."""
    check_combination(cfg.task.task, cfg.model.name, cfg.data.dataset, cfg.data.transform)
    if cfg.task.task == LM_TASK and is_user_model(cfg.model.name):
        if any(v is not None for v in (cfg.model.layers, cfg.model.width, cfg.model.heads)):
            raise ConfigError(f"--layers, --width and --heads size a built-in GPT; --model "
                              f"{cfg.model.name} builds its own (give it --seq-len)")
        resolved_data(cfg)
    elif cfg.task.task == LM_TASK:
        shape_of(cfg)
    elif any(v is not None for v in (cfg.model.layers, cfg.model.width, cfg.model.heads,
                                     cfg.data.seq_len)):
        raise ConfigError("--layers, --width, --heads and --seq-len size a GPT model: use them "
                          "with --task lm")


def check_combination(task: str, model: str, dataset: str, transform: str) -> None:
    """Language models with token data, image models with image data: one line otherwise."""
    tokens = dataset in TOKEN_DATASETS
    if task == LM_TASK:
        if not is_gpt(model) and not is_user_model(model):
            raise ConfigError(f"--task lm trains a GPT decoder: --model {' or '.join(GPT_MODELS)}"
                              f", or your own as FILE.py:FUNC (got '{model}')")
        if not tokens:
            raise ConfigError(f"--task lm reads tokens: --dataset {', '.join(TOKEN_DATASETS)} "
                              f"(got '{dataset}', an image dataset)")
        if transform != "light":
            raise ConfigError(f"--transform {transform} augments images; --task lm reads "
                              "tokens (leave --transform at light)")
        return
    if is_gpt(model):
        raise ConfigError(f"--model {model} is a language model: use it with --task lm "
                          f"(this run's task is {task})")
    if tokens:
        raise ConfigError(f"--dataset {dataset} holds tokens for --task lm; --task {task} "
                          "reads images")


BASELINE_RULE = ("beats the baseline only when the paired 95% interval of (baseline - model) "
                 "over the held-out windows lies above 0")


def baseline_claim(loss: float, baseline: float, lo: float | None, hi: float | None,
                   windows: int) -> str:
    """The held-out loss against the context-free baseline on the same tokens, in words
    (BASELINE_RULE): "beats" only with an interval above 0; below 0 "worse than"; an
    interval holding 0 "not resolved"; one window decides nothing."""
    margin = baseline - loss
    what = f"the context-free baseline {baseline:.3f} on the same tokens"
    if lo is None or hi is None:
        return f"{what}: {CL.INCONCLUSIVE} ({windows} window{'s' if windows != 1 else ''})"
    span = f"{margin:+.3f} [{lo:+.3f}, {hi:+.3f}] nats/token over {windows} windows"
    if lo > 0:
        return f"beats {what} by {span}"
    if hi < 0:
        return f"worse than {what}: {span}"
    return f"{CL.NOT_RESOLVED} against {what}: {span}, the interval includes 0"


# tensors of batch x tokens x width that every block of the built-in GPT keeps for its backward
# pass, at least: its two layer norms' inputs and outputs (4), q, k, v and the attention's
# output (4), and the MLP's hidden layer before and after GELU (4 + 4). The attention's own
# buffers, the residual sums and the allocator's slack come on top.
SAVED_PER_BLOCK = 16


@dataclass(frozen=True)
class MemoryFloor:
    """What one process of a built-in GPT run holds at least at its peak, when backward
    begins: the model's state (parameters and the optimizer's state) and the activations
    saved for backward."""

    state_bytes: int
    per_sample_bytes: int  # activations of one sample (its tokens), saved for backward
    batch: int

    @property
    def total(self) -> int:
        return self.state_bytes + self.per_sample_bytes * self.batch

    def largest_batch(self, budget: int) -> int:
        """The largest batch whose floor fits ``budget`` bytes (0: none does)."""
        room = budget - self.state_bytes
        return max(0, room // self.per_sample_bytes) if self.per_sample_bytes else 0


def memory_floor(cfg: Any) -> MemoryFloor | None:
    """The lower bound of one process's peak memory for a built-in GPT run of ``cfg`` (a
    RunConfig), from its shape alone; None for any other model. A run above the memory it
    has cannot fit; one below it may still not (the floor leaves out what is not counted)."""
    if cfg.task.task != LM_TASK or not is_gpt(cfg.model.name) or cfg.model.compile:
        return None  # compiled, backward may recompute what eager keeps: not counted here
    shape = shape_of(cfg)
    h, n = shape.width, shape.layers
    vocab = resolved_data(cfg).vocab_size or 0  # the data's, where known before it is read
    params = vocab * h + shape.context * h + n * (12 * h * h + 13 * h) + 2 * h  # tied head
    opt = 2 if cfg.train.optimizer == "adamw" else 1 if cfg.train.momentum else 0
    # fp32 parameters and optimizer state; not the gradients: freed by zero_grad, they grow
    # during backward as the saved activations are freed, so the two never add up in full
    state = params * 4 * (1 + opt)
    act = 2 if cfg.train.amp != "off" else 4  # bytes of an activation: autocast's or fp32
    per_sample = shape.context * (n * SAVED_PER_BLOCK * h + 2 * vocab) * act  # + logits, grad
    return MemoryFloor(state, per_sample, cfg.per_device_batch())
