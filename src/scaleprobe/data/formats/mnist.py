"""MNIST as uncompressed idx files: a writer, and torchvision's reader behind header checks.

    ROOT/MNIST/raw/train-images-idx3-ubyte   magic 2051, count, rows, cols, then pixels
    ROOT/MNIST/raw/train-labels-idx1-ubyte   magic 2049, count, then one byte per label
    ROOT/MNIST/raw/t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte   (the test split)

All integers are big-endian. The digits are real handwriting: scikit-learn's 1,797 8x8 digits,
enlarged into a 20x20 box on the 28x28 canvas as MNIST does, with random rotation, scale and
shift, so two images of one digit are never identical. Test images are drawn from a fixed
fifth of those digits that training images never use, so test accuracy measures
generalisation.

torchvision's ``MNIST`` reads ``ROOT/MNIST/raw/*-idx?-ubyte`` directly (no checksum on the
uncompressed files) but answers a truncated or mislabelled file with a bare assertion. The
headers are checked here first, so the error names the file and what is wrong with it.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from scaleprobe.core.errors import DataError
from scaleprobe.data.digits import digits_arrays
from scaleprobe.data.formats.common import (
    Written,
    hint,
    open_torchvision,
    start_writing,
)

IMAGE_MAGIC, LABEL_MAGIC = 2051, 2049
FILES = {
    True: ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    False: ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def write_idx_images(path: Path, images: np.ndarray) -> None:
    n, rows, cols = images.shape
    with path.open("wb") as fh:
        fh.write(struct.pack(">IIII", IMAGE_MAGIC, n, rows, cols))
        fh.write(np.ascontiguousarray(images, dtype=np.uint8).tobytes())


def write_idx_labels(path: Path, labels: np.ndarray) -> None:
    with path.open("wb") as fh:
        fh.write(struct.pack(">II", LABEL_MAGIC, len(labels)))
        fh.write(np.asarray(labels, dtype=np.uint8).tobytes())


def render_digit(base: np.ndarray, rng: np.random.Generator, w: int, h: int) -> np.ndarray:
    """One 8x8 digit (values 0..16) drawn MNIST-style into an h x w uint8 image."""
    img = Image.fromarray(np.clip(base * 16.0, 0, 255).astype(np.uint8))
    scale = rng.uniform(0.85, 1.1)
    bw, bh = max(4, round(w * 20 / 28 * scale)), max(4, round(h * 20 / 28 * scale))
    img = img.resize((bw, bh), Image.Resampling.BICUBIC)
    img = img.rotate(rng.uniform(-12, 12), resample=Image.Resampling.BILINEAR, expand=True)
    canvas = Image.new("L", (w, h), 0)
    dx = (w - img.width) // 2 + int(rng.integers(-2, 3))
    dy = (h - img.height) // 2 + int(rng.integers(-2, 3))
    canvas.paste(img, (dx, dy))
    arr = np.asarray(canvas, dtype=np.float32) * rng.uniform(0.85, 1.15)
    return np.clip(arr, 0, 255).astype(np.uint8)


def _digits() -> tuple[np.ndarray, np.ndarray]:
    return digits_arrays()


def write_mnist(out_dir: str | Path, count: int = 200, size: tuple[int, int] = (28, 28),
                seed: int = 0, overwrite: bool = False) -> Written:
    """Write ``count`` digits: one seventh to the t10k (test) files, the rest to train."""
    root = start_writing("mnist", out_dir, overwrite, count, size, least=(2, 12))
    w, h = size
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    bases, targets = _digits()
    order = np.random.default_rng(1234).permutation(len(targets))  # fixed writer split
    cut = int(len(order) * 0.8)
    pools = {True: order[:cut], False: order[cut:]}
    n_test = max(1, round(count / 7))
    rng = np.random.default_rng(seed)
    for train, n in ((True, count - n_test), (False, n_test)):
        picks = rng.choice(pools[train], size=n, replace=n > len(pools[train]))
        images = np.stack([render_digit(bases[i], rng, w, h) for i in picks]) if n else \
            np.zeros((0, h, w), np.uint8)
        img_name, lab_name = FILES[train]
        write_idx_images(raw / img_name, images)
        write_idx_labels(raw / lab_name, targets[picks])
    return Written("mnist", root, count, (w, h), {"train": count - n_test, "test": n_test},
                   [str(d) for d in range(10)],
                   ["MNIST/raw/: train and t10k idx files (uncompressed)",
                    "real handwritten digits from scikit-learn, enlarged and jittered"])


def _header(path: Path, magic: int, ndim: int) -> list[int]:
    try:
        with path.open("rb") as fh:
            head = fh.read(4 + 4 * ndim)
    except OSError as e:
        raise DataError(f"cannot read {path}: {e.strerror}") from None
    if len(head) < 4 + 4 * ndim:
        raise DataError(f"{path} is too short to be an idx file")
    found, *dims = struct.unpack(f">I{ndim}I", head)
    if found != magic:
        raise DataError(f"{path} is not an MNIST idx file (magic number {found}, "
                        f"expected {magic})")
    needed = 4 + 4 * ndim + math.prod(dims)
    size = path.stat().st_size
    if size != needed:
        raise DataError(f"{path} holds {size} bytes but its header "
                        f"({' x '.join(map(str, dims))}) needs {needed}")
    return dims


def resolve_root(root: str | Path) -> Path:
    """The folder holding ``MNIST/raw``; ``root`` may also be that MNIST or raw folder."""
    p = Path(root).expanduser()
    if (p / "MNIST" / "raw").is_dir():
        return p
    if p.name == "MNIST" and (p / "raw").is_dir():
        return p.parent
    if p.name == "raw" and p.parent.name == "MNIST":
        return p.parent.parent
    return p


def validate_mnist(root: str | Path, train: bool = True) -> int:
    """Check one split's image and label files; returns the number of images."""
    root = resolve_root(root)
    if not root.is_dir():
        raise DataError(f"MNIST folder {root} not found ({hint('mnist')})")
    raw = root / "MNIST" / "raw"
    img_name, lab_name = FILES[train]
    images, labels = raw / img_name, raw / lab_name
    if not images.is_file() and not labels.is_file():
        gz = raw / (img_name + ".gz")
        extra = f"; found {gz.name}: decompress it with gunzip" if gz.is_file() else ""
        raise DataError(f"no MNIST idx files under {root} (expected MNIST/raw/{img_name} and "
                        f"{lab_name}; generate a small one with `scaleprobe datagen mnist "
                        f"--out DIR`){extra}")
    for p in (images, labels):
        if not p.is_file():
            raise DataError(f"{p} not found (MNIST needs both {img_name} and {lab_name})")
    n, _, _ = _header(images, IMAGE_MAGIC, 3)
    (n_labels,) = _header(labels, LABEL_MAGIC, 1)
    if n != n_labels:
        raise DataError(f"{images} holds {n} images but {labels} holds {n_labels} labels")
    if n == 0:
        raise DataError(f"{images} holds no images")
    with labels.open("rb") as fh:
        fh.seek(8)
        top = max(fh.read())
    if top > 9:
        raise DataError(f"{labels}: label {top} is outside 0..9")
    return n


def open_mnist(root: str | Path, train: bool = True, download: bool = False,
               transform: Any = None) -> Any:
    """MNIST under ``root`` (the folder holding MNIST/raw): (PIL greyscale 'L', label).

    Returns a ``torchvision.datasets.MNIST``."""
    from torchvision.datasets import MNIST  # heavy: torchvision: seconds; imported where it is used

    return open_torchvision("MNIST", MNIST, MNIST, resolve_root(root), train, download,
                            transform, validate_mnist)
