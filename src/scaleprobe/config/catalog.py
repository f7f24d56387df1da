"""The names ``--model`` and ``--dataset`` accept, and the optional extras a run needs, known
without importing torch or torchvision.

A mistyped name is found while the configuration is checked (``check_names``), before the
imports that take seconds on a quiet machine and minutes on a loaded one. Three sources:

- scaleprobe's own models and datasets: the tables below (``models/build.py`` and
  ``data/datasets.py`` build them, and a test holds the tables equal);
- the GPT decoders of ``--task lm``: ``lmspec.GPT_MODELS``;
- torchvision's models: read from the installed torchvision's source files, where each model
  is a function under ``@register_model()``, by package (``models/*.py`` the classifiers,
  ``models/detection/*.py`` the detectors), so the list is the installed version's own. Where
  that source cannot be read (no torchvision, a layout this reader does not know) the check
  is left to the build, as before.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path
from typing import Any

from scaleprobe.config.extras import require_installed
from scaleprobe.core.errors import ConfigError
from scaleprobe.core.registry import suggest
from scaleprobe.core.result_model import DEVICE_RESIDENT as DEVICE_RESIDENT  # config.rules reads it
from scaleprobe.features.lmspec import GPT_MODELS, LM_TASK

# scaleprobe's small models (models/small.py), name -> what it is
SMALL_MODELS: dict[str, str] = {
    "digits_cnn": "3-layer CNN (~67k parameters), any input size",
    "mlp": "flatten + 256 hidden units (MNIST-style)",
    "linear": "flatten + linear: exposes fixed per-step costs",
    "mlp_large": "flatten + 5 x 2048 hidden units (23 M parameters at 32x32): large "
                 "gradients, little compute",
}
# every --dataset name (data/datasets.py registers a builder for each), name -> what it is
DATASETS: dict[str, str] = {
    "digits": "real handwritten digits shipped with scikit-learn (1,797 images)",
    "synthetic": "one random batch per rank made once on the training device, reused every "
                 "step: no input pipeline (measures the model)",
    "synthetic-loader": "random uint8 images in memory through the loader (per-sample "
                        "__getitem__, transform, collate, workers): no I/O, no decode",
    "jpeg-synth": "N real JPEG files written once to a cache folder (real decode)",
    "imagefolder": "one folder per class of image files under --data-dir",
    "cifar10": "CIFAR-10 python batches under --data-dir",
    "mnist": "MNIST idx files under --data-dir",
    "voc": "Pascal VOC detection (VOCdevkit/VOC<year>) under --data-dir",
    "lfw": "LFW faces under --data-dir: train people, test pairs (face task)",
    "tokens": "--task lm: token files under --data-dir (train.bin, val.bin, optional "
              "meta.json; nanoGPT's format, uint16 or uint32)",
    "text": "--task lm: the Python standard library's sources, byte-level (scaleprobe datagen "
            "text; --data-dir, else written once to the cache)",
    "tokens-synthetic": "--task lm: one batch of random tokens per rank made once on the "
                        "training device, reused every step: no input pipeline",
}
# datasets made in memory or in the cache: no --data-dir is read (data/datasets.py)
BUILT_IN_DATA = ("digits", "synthetic", "synthetic-loader", "jpeg-synth", "tokens-synthetic")
BOX_DATASETS = ("voc",)  # datasets whose targets are boxes (--task detection)
DETECTION_UNSUPPORTED = ("maskrcnn", "keypointrcnn")  # need mask / keypoint targets

# a registered model: the decorator (with its name, or the function's), any other
# decorators over several lines, then the function at the start of a line
_REGISTERED = re.compile(r"^@register_model\((?:name\s*=\s*['\"](\w+)['\"])?\)[\s\S]*?"
                         r"^def\s+(\w+)", re.MULTILINE)


@functools.cache
def torchvision_models(group: str = "") -> tuple[str, ...] | None:
    """The installed torchvision's model names of one package (``""``: the classifiers of
    ``torchvision.models``, ``"detection"``: its detectors), read from its source files
    without importing it; None when they cannot be read."""
    try:
        spec = importlib.util.find_spec("torchvision")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations)), "models", group)
    names: list[str] = []
    try:
        for path in sorted(folder.glob("*.py")):
            names += [given or fn for given, fn in _REGISTERED.findall(path.read_text())]
    except (OSError, UnicodeDecodeError):
        return None
    return tuple(sorted(names)) or None


def imported_torchvision_models() -> tuple[str, ...]:
    """torchvision's classifiers as torchvision itself lists them: what ``torchvision_models``
    falls back on where the source cannot be read, and what a build checks names against."""
    # heavy: torchvision (and torch): seconds, only where they are needed
    import torchvision

    return tuple(sorted(torchvision.models.list_models(module=torchvision.models)))


def detectors() -> tuple[str, ...] | None:
    """torchvision's detectors that train on boxes and labels alone (None: not known here)."""
    names = torchvision_models("detection")
    if names is None:
        return None
    return tuple(n for n in names if not n.startswith(DETECTION_UNSUPPORTED))


def list_models() -> list[tuple[str, str]]:
    """Every ``--model`` name with what it is, for ``scaleprobe models``: scaleprobe's own,
    the GPT decoders, torchvision's classifiers and detectors (when its source can be read
    here; else the classifiers from torchvision itself)."""
    rows = list(SMALL_MODELS.items())
    rows += [(k, f"{v[1]}; --task lm") for k, v in GPT_MODELS.items()]
    classifiers = torchvision_models()
    if classifiers is None:
        classifiers = imported_torchvision_models()
    rows += [(m, "torchvision classifier") for m in classifiers]
    rows += [(m, "torchvision detector; --task detection") for m in detectors() or ()]
    rows.append(("FILE.py:FUNC / pkg.module:FUNC", "your own builder returning an nn.Module"))
    return rows


def check_dataset(name: str) -> None:
    if name not in DATASETS:
        near = suggest(name, DATASETS)
        hint = f"; did you mean {', '.join(near)}?" if near else " (see `scaleprobe datasets`)"
        raise ConfigError(f"unknown dataset '{name}'{hint}")


def check_model(task: str, name: str) -> None:
    """A one-line ConfigError for a ``--model`` that builds nothing for ``task``; a user's
    builder (``FILE.py:FUNC``) is checked when it is imported."""
    if task == LM_TASK:  # lmspec.check_run names the GPT decoders
        return
    if ":" in name:
        target = name.rpartition(":")[0]
        if target.endswith(".py") and not Path(target).expanduser().is_file():
            raise ConfigError(f"model file not found: {Path(target).expanduser()}")
        return
    if task == "detection":
        known = detectors()
        if known is None or name in known:
            return
        near = suggest(name, known)
        hint = f"did you mean {', '.join(near)}? " if near else ""
        raise ConfigError(f"--task detection needs a detection model, not '{name}'; {hint}"
                          f"choices: {', '.join(known)}")
    if name in SMALL_MODELS or name in GPT_MODELS:
        return
    names = torchvision_models()
    if names is None or name in names:
        return
    near = suggest(name, [*names, *SMALL_MODELS, *GPT_MODELS])
    hint = f"; did you mean {', '.join(near)}?" if near else " (see `scaleprobe models`)"
    raise ConfigError(f"unknown model '{name}'{hint}")


def check_names(cfg: Any) -> None:
    """The run's model and dataset names, and the extra its options need, against what is
    known here; each mistake one line (``cfg``: a RunConfig)."""
    check_dataset(cfg.data.dataset)
    check_model(cfg.task.task, cfg.model.name)
    if cfg.task.task == "detection" and cfg.data.dataset not in BOX_DATASETS:
        raise ConfigError(f"--task detection needs a dataset with boxes (--dataset "
                          f"{' or '.join(BOX_DATASETS)}); {cfg.data.dataset} gives class labels")
    if cfg.data.dataset in BOX_DATASETS and cfg.task.task != "detection":
        # bug caught: a box dataset under the classification task failed in the loader
        # with a raw collate error ("Trying to resize storage that is not resizable")
        raise ConfigError(f"--dataset {cfg.data.dataset} holds boxes: train it with --task "
                          f"detection (this run's task is {cfg.task.task})")
    if cfg.task.task == "detection" and cfg.train.eval:
        require_installed("detection", "--task detection with --eval (mAP through "
                          "torchmetrics)")
