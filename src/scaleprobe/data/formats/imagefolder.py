"""Image folders: ``ROOT/<class>/<n>.jpg``, one folder per class, as torchvision reads them.

The writer draws each class as a shape in a colour (``red_circle``, ``green_square``, ...) at a
random place and scale on a random textured background, and saves real JPEGs. The reader is
torchvision's ``ImageFolder`` (class index = position of the folder name in sorted order) with
two additions: a missing or empty root, or one without class folders, is a DataError with the
fix; an unreadable image file is a DataError naming that file, raised when it is read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from scaleprobe.core.errors import DataError
from scaleprobe.data.formats.common import (
    Written,
    load_rgb,
    need_root,
    start_writing,
)
from scaleprobe.data.formats.draw import STYLES, save_jpeg, shape_image

NUM_CLASSES = len(STYLES)


def write_imagefolder(out_dir: str | Path, count: int = 200, size: tuple[int, int] = (64, 64),
                      seed: int = 0, overwrite: bool = False) -> Written:
    """Write ``count`` JPEGs spread evenly over the ten classes."""
    root = start_writing("imagefolder", out_dir, overwrite, count, size, least=(NUM_CLASSES, 16))
    w, h = size
    names = [name for name, _, _ in STYLES]
    for name in names:
        (root / name).mkdir(exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(count):
        label = i % NUM_CLASSES
        save_jpeg(shape_image(rng, label, w, h), root / names[label] / f"{i:05d}.jpg")
    return Written("imagefolder", root, count, (w, h), {"all": count}, sorted(names),
                   [f"{NUM_CLASSES} class folders of JPEGs; the class is the shape and colour"])


def open_imagefolder(root: str | Path, transform: Any = None) -> Any:
    """One folder per class under ``root``: (PIL RGB image, class index); ``.classes``.

    Returns a ``torchvision.datasets.ImageFolder``."""
    from torchvision.datasets import ImageFolder  # heavy: torchvision

    p = need_root(root, "image folder", "imagefolder")
    try:
        return ImageFolder(str(p), transform=transform, loader=load_rgb)
    except FileNotFoundError as e:
        reason = str(e).splitlines()[0]
        if "class folder" in reason:
            reason = "no class folders in it (expected ROOT/<class>/<image>.jpg)"
        elif "valid file" in reason:
            reason = "its class folders hold no image files (.jpg, .png, ...)"
        raise DataError(f"image folder {p}: {reason}; generate a small one with "
                        "`scaleprobe datagen imagefolder --out DIR`") from None
