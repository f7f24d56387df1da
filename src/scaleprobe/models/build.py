"""Build a model by name.

Names: ``digits_cnn``, ``mlp``, ``mlp_large``, ``linear`` (scaleprobe's small models), the
GPT decoders of ``--task lm`` (``gpt_tiny``, ``gpt2_small``: models/gpt.py), any torchvision
classification model (``resnet34``, ``mobilenet_v2``, ``vgg19_bn``, ...), or the user's own
builder as ``path/to/file.py:build`` or ``package.module:build`` returning an ``nn.Module``.
Weights are never downloaded: models start from random initialisation.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.modules.lazy import LazyModuleMixin

from scaleprobe.config.catalog import SMALL_MODELS, imported_torchvision_models
from scaleprobe.core.errors import ConfigError
from scaleprobe.core.registry import suggest
from scaleprobe.features.lmspec import GPT_MODELS, GPTShape
from scaleprobe.models.gpt import GPT
from scaleprobe.models.small import MLP, DigitsCNN, Linear, MLPLarge

SMALL: dict[str, tuple[Callable[..., nn.Module], str]] = {
    "digits_cnn": (lambda n, s: DigitsCNN(n), SMALL_MODELS["digits_cnn"]),
    "mlp": (lambda n, s: MLP(n, s), SMALL_MODELS["mlp"]),
    "linear": (lambda n, s: Linear(n, s), SMALL_MODELS["linear"]),
    "mlp_large": (lambda n, s: MLPLarge(n, s), SMALL_MODELS["mlp_large"]),
}


def torchvision_models() -> list[str]:
    return list(imported_torchvision_models())


def list_models() -> list[tuple[str, str]]:
    rows = [(k, v[1]) for k, v in SMALL.items()]
    rows += [(k, f"{v[1]}; --task lm") for k, v in GPT_MODELS.items()]
    rows += [(m, "torchvision") for m in torchvision_models()]
    rows.append(("FILE.py:FUNC / pkg.module:FUNC", "your own builder returning an nn.Module"))
    return rows


def _adapt_small_input(model: nn.Module, name: str, num_classes: int,
                       image_size: int | None) -> None:
    """VGG's 7x7 pooling and 4096-wide head make no sense at 32x32 (CIFAR): use the common
    CIFAR variant, global pooling and a 512-wide head. No size given: torchvision's own."""
    if name.startswith("vgg") and image_size is not None and image_size < 64:
        model.avgpool = nn.AdaptiveAvgPool2d(1)
        model.classifier = nn.Sequential(nn.Linear(512, 512), nn.ReLU(inplace=True),
                                         nn.Dropout(0.5), nn.Linear(512, num_classes))


def _where(e: BaseException, path: Path | None) -> str:
    """``file:line`` of the failing line in the user's file (the innermost frame in it), else
    of the innermost frame; a SyntaxError names its own line."""
    if isinstance(e, SyntaxError) and e.filename:
        return f"{e.filename}:{e.lineno}"
    frames = traceback.extract_tb(e.__traceback__)
    mine = [f for f in frames if path is not None and _same_file(f.filename, path)]
    picked = mine or frames
    if not picked:
        return str(path or "?")
    return f"{picked[-1].filename}:{picked[-1].lineno}"


def _same_file(name: str, path: Path) -> bool:
    try:
        return Path(name).resolve() == path.resolve()
    except OSError:
        return False


def _user_builder(spec: str) -> tuple[Callable[..., Any], Path | None]:
    target, _, fn_name = spec.rpartition(":")
    path: Path | None = None
    if target.endswith(".py"):
        path = Path(target).expanduser()
        if not path.is_file():
            raise ConfigError(f"model file not found: {path}")
        mspec = importlib.util.spec_from_file_location(f"scaleprobe_user_{path.stem}", path)
        if mspec is None or mspec.loader is None:
            raise ConfigError(f"cannot import {path}: Python finds no loader for it")
        module = importlib.util.module_from_spec(mspec)
        try:
            mspec.loader.exec_module(module)
        except Exception as e:
            raise ConfigError(f"cannot import {path} ({_where(e, path)}): "
                              f"{type(e).__name__}: {e}") from None
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as e:
            raise ConfigError(f"cannot import module '{target}': {e}") from None
        path = Path(getattr(module, "__file__", None) or target)
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise ConfigError(f"'{fn_name}' is not a function in {target}")
    return fn, path


def _call_user(fn: Callable[..., Any], num_classes: int, image_size: int | None,
               spec: str = "", path: Path | None = None, seq_len: int | None = None
               ) -> nn.Module:
    """Call the user's builder with the arguments it names: ``num_classes`` and
    ``image_size`` (images), ``vocab_size`` and ``seq_len`` (tokens: ``seq_len`` given). An error
    inside it is the user's to fix: a ConfigError naming the file and line (exit 2); running
    out of memory while building stays out of memory."""
    params = inspect.signature(fn).parameters
    given = [("num_classes", num_classes), ("image_size", image_size)]
    if seq_len is not None:
        given += [("vocab_size", num_classes), ("seq_len", seq_len)]
    kwargs = {k: v for k, v in given if k in params}
    try:
        model = fn(**kwargs)
    except (MemoryError, torch.OutOfMemoryError, ConfigError):
        raise
    except Exception as e:
        raise ConfigError(f"model builder {spec or fn.__name__} raised {type(e).__name__}: {e} "
                          f"(at {_where(e, path)})") from None
    if not isinstance(model, nn.Module):
        raise ConfigError(f"model builder returned {type(model).__name__}, not an nn.Module")
    if not any(p.requires_grad for p in model.parameters()):
        what = "every parameter is frozen" if any(True for _ in model.parameters()) else \
            "it has no parameters"
        raise ConfigError(f"model builder {spec or fn.__name__} returned a model with nothing "
                          f"to train ({what}: requires_grad is False); a training step needs "
                          "at least one trainable parameter")
    return model


def check_name(name: str) -> None:
    """Raise a one-line ConfigError, with close matches, for a name that builds nothing."""
    if ":" in name or name in SMALL or name in GPT_MODELS:
        return
    names = torchvision_models()
    if name not in names:
        near = suggest(name, names + list(SMALL) + list(GPT_MODELS))
        hint = f"; did you mean {', '.join(near)}?" if near else " (see `scaleprobe models`)"
        raise ConfigError(f"unknown model '{name}'{hint}")


def build_model(name: str, num_classes: int = 10, image_size: int | None = 32,
                shape: GPTShape | None = None, seq_len: int | None = None) -> nn.Module:
    """The model ``name`` for ``num_classes`` classes and ``image_size`` pixels; a GPT
    decoder for a vocabulary of ``num_classes`` tokens in ``shape`` (None: the named model's
    own shape); the user's ``FILE.py:FUNC`` (with ``seq_len``: a language model for
    ``num_classes`` tokens, ``seq_len`` per sample)."""
    if name in GPT_MODELS:
        return GPT(shape or GPT_MODELS[name][0], num_classes)
    if ":" in name:
        fn, path = _user_builder(name)
        return _call_user(fn, num_classes, image_size, name, path, seq_len)
    if name in SMALL:
        return SMALL[name][0](num_classes, image_size)
    check_name(name)
    import torchvision  # heavy: torchvision: seconds; imported where it is used

    kwargs: dict[str, Any] = {"weights": None, "num_classes": num_classes}
    if name.startswith("inception"):
        kwargs["aux_logits"] = False
        kwargs["init_weights"] = False
    model = torchvision.models.get_model(name, **kwargs)
    _adapt_small_input(model, name, num_classes, image_size)
    return model


def count_params(name: str, num_classes: int | None = None) -> int:
    """Parameters of a model by name, built on the meta device: no memory, no download.

    torchvision names get their own default head (1000 classes) unless ``num_classes``."""
    check_name(name)
    with torch.device("meta"):
        if name in SMALL or ":" in name:
            model = build_model(name, num_classes=num_classes or 10)
        else:
            import torchvision  # heavy: torchvision: seconds; imported where it is used

            kwargs: dict[str, Any] = {"weights": None}
            if num_classes:
                kwargs["num_classes"] = num_classes
            if name.startswith("inception"):
                kwargs.update(aux_logits=False, init_weights=False)
            model = torchvision.models.get_model(name, **kwargs)
    return sum(p.numel() for p in model.parameters())


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def has_lazy(model: nn.Module) -> bool:
    """True while a lazy module (``nn.LazyLinear``, ``nn.LazyConv2d``, ...) has parameters
    whose shape is not known yet."""
    return any(isinstance(m, LazyModuleMixin) and m.has_uninitialized_params()
               for m in model.modules())


@torch.no_grad()
def init_lazy(model: nn.Module, example: torch.Tensor) -> None:
    """Give a model's lazy modules their shapes with one forward pass of ``example`` (a batch
    of the run's own inputs, on the model's device), in eval mode so batch-norm statistics are
    not touched; before its parameters are counted, handed to the optimizer or wrapped in DDP
    (which refuses uninitialised parameters)."""
    was = model.training
    model.eval()
    try:
        model(example)
    finally:
        model.train(was)


def logits_of(out: Any) -> torch.Tensor:
    """The logits in what a classification model returned: a tensor; the first tensor of a
    tuple or list (``(logits, aux)``); a dict's ``logits`` or ``out`` entry (torchvision's
    segmentation-style dicts, Hugging Face-style outputs), else its first tensor."""
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict) or hasattr(out, "keys"):
        for key in ("logits", "out"):
            if key in out and isinstance(out[key], torch.Tensor):
                return out[key]
        found = next((v for v in out.values() if isinstance(v, torch.Tensor)), None)
    elif isinstance(out, (tuple, list)):
        found = next((v for v in out if isinstance(v, torch.Tensor)), None)
    else:
        found = None
    if found is None:
        raise ConfigError(f"the model returned {type(out).__name__}: return a tensor of logits, "
                          "a tuple whose first tensor is the logits, or a dict with 'logits'")
    return found
