"""Write a small CIFAR-10 in the "python version" layout.

    ROOT/cifar-10-batches-py/data_batch_1 .. data_batch_5, test_batch, batches.meta

Each batch is a pickled dict with ``data`` (uint8, N x 3072: 1024 red, then green, then blue
values, rows of 32) and ``labels`` (list of 0..9), plus ``batch_label`` and ``filenames``.
The original files were pickled by Python 2, whose strings load as ``bytes`` with
``pickle.load(f, encoding="bytes")`` (the keys are then ``b"data"``, ``b"labels"``) and as
``str`` with ``encoding="latin1"`` (what torchvision uses). The pickler below writes strings
the same way, so both recipes read these files exactly as they read the real ones.
"""

from __future__ import annotations

import pickle
import struct
from pathlib import Path
from typing import Any

import numpy as np

from scaleprobe.data.formats.common import Written, start_writing
from scaleprobe.data.formats.draw import shape_image

BASE_FOLDER = "cifar-10-batches-py"
LABEL_NAMES = ["airplane", "automobile", "bird", "cat", "deer",
               "dog", "frog", "horse", "ship", "truck"]
TRAIN_BATCHES = [f"data_batch_{k}" for k in range(1, 6)]
TEST_BATCH = "test_batch"
META = "batches.meta"


# the pure-Python pickler: its internals used below (dispatch, write, memoize) are not in its
# type stubs, so it is read as Any
_PurePickler: Any = pickle._Pickler


class _Py2StylePickler(_PurePickler):
    """Protocol 2, with ``str`` and ``bytes`` written as Python 2 byte strings."""

    dispatch = dict(_PurePickler.dispatch)

    def save_py2_string(self, obj: str | bytes) -> None:
        raw = obj.encode("latin-1") if isinstance(obj, str) else bytes(obj)
        if len(raw) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(raw)]) + raw)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(raw)) + raw)
        self.memoize(obj)

    dispatch[str] = save_py2_string
    dispatch[bytes] = save_py2_string

    def save_global(self, obj: Any, name: str | None = None) -> None:
        # numpy 2 names its internals numpy._core; numpy.core still loads everywhere.
        module = getattr(obj, "__module__", "") or ""
        if module.startswith("numpy._core"):
            qual = name or obj.__qualname__
            text = f"numpy.core{module[len('numpy._core'):]}\n{qual}\n"
            self.write(pickle.GLOBAL + text.encode("ascii"))
            self.memoize(obj)
            return
        super().save_global(obj, name)


def dump_py2(obj: Any, path: Path) -> None:
    with path.open("wb") as fh:
        _Py2StylePickler(fh, protocol=2).dump(obj)


def _batch(images: np.ndarray, labels: list[int], name: str, first: int) -> dict[str, Any]:
    flat = images.transpose(0, 3, 1, 2).reshape(len(images), 3 * 32 * 32)  # NHWC -> N x 3072
    return {
        "batch_label": name,
        "labels": [int(v) for v in labels],
        "data": np.ascontiguousarray(flat, dtype=np.uint8),
        "filenames": [f"{LABEL_NAMES[v]}_s_{first + i:06d}.png" for i, v in enumerate(labels)],
    }


def write_cifar10(out_dir: str | Path, count: int = 200, size: tuple[int, int] = (32, 32),
                  seed: int = 0, overwrite: bool = False) -> Written:
    """Write ``count`` images: one sixth to ``test_batch``, the rest over five train batches."""
    root = start_writing("cifar10", out_dir, overwrite, count, size, least=(6, 32),
                         fixed=(32, 32))
    folder = root / BASE_FOLDER
    folder.mkdir(exist_ok=True)
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(count) % 10)
    images = np.stack([shape_image(rng, int(v), 32, 32) for v in labels])
    n_test = max(1, round(count / 6))
    n_train = count - n_test
    start = 0
    for k, (name, idx) in enumerate(
            zip(TRAIN_BATCHES, np.array_split(np.arange(n_train), 5), strict=True)):
        label = f"training batch {k + 1} of 5"
        dump_py2(_batch(images[idx], labels[idx].tolist(), label, start), folder / name)
        start += len(idx)
    test = np.arange(n_train, count)
    dump_py2(_batch(images[test], labels[test].tolist(), "testing batch 1 of 1", start),
             folder / TEST_BATCH)
    per_batch = max(1, -(-n_train // 5))
    dump_py2({"num_cases_per_batch": per_batch, "label_names": list(LABEL_NAMES),
              "num_vis": 3072}, folder / META)
    return Written("cifar10", root, count, (32, 32), {"train": n_train, "test": n_test},
                   list(LABEL_NAMES),
                   [f"{BASE_FOLDER}/: 5 train batches, test_batch, batches.meta",
                    "each class is a shape and colour (class 0 red circle, 1 green square, ...)"])
