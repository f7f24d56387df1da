"""Read CIFAR-10 "python version" batches through torchvision, with clear errors.

torchvision's ``CIFAR10`` refuses any file whose MD5 differs from the published archive's, so
it cannot read a generated (or re-packed) copy. ``LocalCIFAR10`` is the same class with the
checksum list emptied; loading and indexing are torchvision's own. Before torchvision unpickles
anything, every batch is checked with an unpickler that only admits the numpy names a CIFAR
batch needs, so a damaged or hostile file is reported instead of executed.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
from torchvision.datasets import CIFAR10

from scaleprobe.core.errors import DataError
from scaleprobe.data.formats.cifar_gen import BASE_FOLDER, META, TEST_BATCH, TRAIN_BATCHES
from scaleprobe.data.formats.common import hint, open_torchvision

_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
}


class _BatchUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"unexpected object {module}.{name}")
        return super().find_class(module, name)


def _load_checked(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            obj = _BatchUnpickler(fh, encoding="latin1").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
            ImportError, IndexError, KeyError) as e:
        raise DataError(f"{path} is not a CIFAR-10 python batch ({e or type(e).__name__})"
                        ) from None
    if not isinstance(obj, dict):
        raise DataError(f"{path} is not a CIFAR-10 python batch (holds {type(obj).__name__})")
    return obj


def check_batch(path: Path) -> int:
    """Validate one data batch; returns its number of images."""
    d = _load_checked(path)
    data, labels = d.get("data"), d.get("labels")
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 \
            or data.shape[1] != 3072:
        raise DataError(f"{path}: 'data' must be a uint8 array of N x 3072 (32x32 RGB)")
    if not isinstance(labels, list) or len(labels) != len(data):
        raise DataError(f"{path}: 'labels' must list one label per image "
                        f"({len(data)} images)")
    bad = [v for v in labels if not isinstance(v, int) or not 0 <= v < 10]
    if bad:
        raise DataError(f"{path}: label {bad[0]!r} is outside 0..9")
    return len(data)


def check_meta(path: Path) -> list[str]:
    names = _load_checked(path).get("label_names")
    if not isinstance(names, list) or len(names) != 10:
        raise DataError(f"{path}: 'label_names' must list the 10 class names")
    return [str(n) for n in names]


def _missing(root: Path, names: list[str]) -> list[str]:
    return [n for n in names if not (root / BASE_FOLDER / n).is_file()]


def validate_cifar10(root: str | Path, train: bool = True) -> int:
    """Check the batches of one split and the metadata up front; returns the image count."""
    root = Path(root).expanduser()
    if root.name == BASE_FOLDER and not (root / BASE_FOLDER).is_dir():
        root = root.parent
    if not root.is_dir():
        raise DataError(f"CIFAR-10 folder {root} not found ({hint('cifar10')})")
    names = TRAIN_BATCHES if train else [TEST_BATCH]
    folder = root / BASE_FOLDER
    if not folder.is_dir() or len(_missing(root, names + [META])) == len(names) + 1:
        raise DataError(f"no CIFAR-10 batches under {root} (expected {BASE_FOLDER}/data_batch_1"
                        f"..5, test_batch, batches.meta; generate a small one with "
                        f"`scaleprobe datagen cifar10 --out DIR`)")
    missing = _missing(root, names + [META])
    if missing:
        raise DataError(f"{folder} lacks {', '.join(missing)} (expected data_batch_1..5, "
                        "test_batch and batches.meta)")
    check_meta(folder / META)
    total = sum(check_batch(folder / n) for n in names)
    if total == 0:
        raise DataError(f"{folder}: the {'training' if train else 'test'} batches hold no images")
    return total


class LocalCIFAR10(CIFAR10):
    """torchvision's CIFAR10 without the MD5 comparison against the published archive."""

    train_list = [[name, None] for name, _ in CIFAR10.train_list]
    test_list = [[name, None] for name, _ in CIFAR10.test_list]
    meta = {**CIFAR10.meta, "md5": None}


def open_cifar10(root: str | Path, train: bool = True, download: bool = False,
                 transform: Any = None) -> CIFAR10:
    """CIFAR-10 under ``root`` (the folder holding cifar-10-batches-py): (PIL RGB, label)."""
    root = Path(root).expanduser()
    if root.name == BASE_FOLDER and not (root / BASE_FOLDER).is_dir():
        root = root.parent
    return open_torchvision("CIFAR-10", CIFAR10, LocalCIFAR10, root, train, download,
                            transform, validate_cifar10)
