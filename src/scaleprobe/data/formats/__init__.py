"""The reference on-disk dataset formats: small generated copies, and checked readers.

Writers use numpy + Pillow only, so ``scaleprobe datagen`` starts fast
(``write_dataset("voc", "data/voc", count=200, size=(320, 240), seed=0) -> Path``); readers
use torchvision's classes wherever they can give clear errors. docs/DATA.md ("Reading:
scaleprobe.data.formats") lists every reader and what it returns. Bad data raises
``scaleprobe.core.errors.DataError`` naming the file (and line, where there is one). Reader
names are imported on first use, so importing this package does not import torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scaleprobe.core.errors import ConfigError
from scaleprobe.core.registry import suggest
from scaleprobe.data.formats.common import Written

# format -> (writer module, writer function, default size, what it is)
FORMATS: dict[str, tuple[str, str, tuple[int, int], str]] = {
    "cifar10": ("cifar_gen", "write_cifar10", (32, 32),
                "CIFAR-10 python batches (cifar-10-batches-py/data_batch_1..5, test_batch)"),
    "mnist": ("mnist", "write_mnist", (28, 28),
              "MNIST idx files (MNIST/raw/train-images-idx3-ubyte, ...), real handwriting"),
    "imagefolder": ("imagefolder", "write_imagefolder", (64, 64),
                    "one folder of JPEGs per class (ROOT/<class>/<n>.jpg)"),
    "voc": ("voc_gen", "write_voc", (320, 240),
            "Pascal VOC 2012 detection (VOCdevkit/VOC2012/...), exact boxes"),
    "lfw": ("lfw_gen", "write_lfw", (250, 250),
            "LFW faces with people and pairs files (lfw-py/...), as torchvision reads them"),
    "text": ("text_gen", "write_text", (0, 0),
             "token files (train.bin, val.bin, meta.json as nanoGPT's) of the Python standard "
             "library's sources, byte-level"),
}
# formats whose --count is not images (text: files of the corpus; None: all of them)
COUNT_DEFAULTS: dict[str, int | None] = {"text": None}
DEFAULT_COUNT = 200

_READERS = {
    "open_cifar10": "cifar", "validate_cifar10": "cifar", "LocalCIFAR10": "cifar",
    "open_mnist": "mnist", "validate_mnist": "mnist",
    "open_imagefolder": "imagefolder",
    "open_voc": "voc", "validate_voc": "voc", "parse_annotation": "voc", "VOCBoxes": "voc",
    "open_lfw_people": "lfw", "open_lfw_pairs": "lfw", "LFWFaces": "lfw",
    "LocalLFWPeople": "lfw", "LocalLFWPairs": "lfw",
    "open_tokens": "tokens", "write_tokens": "tokens",
}

__all__ = ["FORMATS", "VOC_CLASSES", "Written", "generate", "write_dataset", *_READERS]


def _writer(fmt: str) -> Callable[..., Written]:
    if fmt not in FORMATS:
        near = suggest(fmt, FORMATS)
        tip = f"; did you mean {', '.join(near)}?" if near else f" (choices: {', '.join(FORMATS)})"
        raise ConfigError(f"unknown dataset format '{fmt}'{tip}")
    module, func, _, _ = FORMATS[fmt]
    return getattr(importlib.import_module(f"{__name__}.{module}"), func)


def generate(fmt: str, out_dir: str | Path, count: int | None = None,
             size: tuple[int, int] | None = None, seed: int = 0,
             overwrite: bool = False) -> Written:
    """Write a small valid dataset in ``fmt`` under ``out_dir``; returns what was written."""
    writer = _writer(fmt)
    if count is None:
        count = COUNT_DEFAULTS.get(fmt, DEFAULT_COUNT)
    return writer(out_dir, count=count,
                  size=FORMATS[fmt][2] if size is None else tuple(size), seed=seed,
                  overwrite=overwrite)


def write_dataset(fmt: str, out_dir: str | Path, count: int | None = None,
                  size: tuple[int, int] | None = None, seed: int = 0,
                  overwrite: bool = False) -> Path:
    """Like ``generate``; returns the root to read it from (``--data-dir``)."""
    return generate(fmt, out_dir, count, size, seed, overwrite).root


def __getattr__(name: str) -> Any:
    if name == "VOC_CLASSES":
        from scaleprobe.data.formats.voc_gen import VOC_CLASSES  # heavy: numpy

        return VOC_CLASSES
    if name in _READERS:
        return getattr(importlib.import_module(f"{__name__}.{_READERS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
