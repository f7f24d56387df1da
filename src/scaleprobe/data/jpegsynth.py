"""Real JPEG files, written once into a cache folder, so decode and resize costs are real."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np


def _image(rng: np.random.Generator, size: int, label: int, ncls: int) -> np.ndarray:
    """A smooth background with a class-coloured shape and noise: compresses like a photo."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    hue = label / max(1, ncls)
    base = np.stack([np.sin(6.28 * (xx * rng.uniform(0.5, 2) + hue)),
                     np.cos(6.28 * (yy * rng.uniform(0.5, 2) + hue)),
                     np.sin(6.28 * (xx + yy) * rng.uniform(0.5, 2))], axis=-1)
    img = (base * 0.5 + 0.5) * 160 + rng.normal(0, 18, (size, size, 3))
    cx, cy, r = rng.uniform(0.3, 0.7), rng.uniform(0.3, 0.7), rng.uniform(0.12, 0.3)
    mask = (xx - cx) ** 2 + (yy - cy) ** 2 < r * r
    img[mask] = np.array([255 * hue, 255 * (1 - hue), 128.0]) + rng.normal(0, 10, (mask.sum(), 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def publish_once(folder: Path, write: Callable[[Path], object], marker: str = "ok\n") -> Path:
    """Make ``folder`` once, whole or not at all: ``write`` fills a temporary folder beside it,
    a ``.complete`` marker is written last and the folder renamed into place (a process that
    finished first wins; a crash leaves nothing half-written under the name)."""
    if (folder / ".complete").exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    try:
        write(tmp)
        (tmp / ".complete").write_text(marker)
        try:
            os.rename(tmp, folder)
        except OSError:  # another process finished first
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        if tmp.exists() and not (folder / ".complete").exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


def ensure_jpegs(folder: Path, n: int, size: int, ncls: int, seed: int = 0) -> Path:
    """Write ``n`` JPEGs into ``folder/<class>/`` unless a complete set is already there."""
    from PIL import Image  # heavy: PIL: only where an image is decoded

    def write(tmp: Path) -> None:
        rng = np.random.default_rng(seed)
        for i in range(n):
            label = i % ncls
            d = tmp / f"class_{label:03d}"
            d.mkdir(exist_ok=True)
            Image.fromarray(_image(rng, size, label, ncls)).save(d / f"{i:06d}.jpg", quality=90)

    publish_once(folder, write, f"{n} {size} {ncls}\n")
    return folder
