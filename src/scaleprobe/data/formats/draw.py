"""Pixels for generated datasets: textured backgrounds and class-specific shapes.

Everything here is numpy + Pillow (no torch), so ``scaleprobe datagen`` starts quickly. The
class of an image decides its shape and colour; position, scale, background and noise vary,
so a model has something real to learn and cannot memorise single pixels.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

# (name, shape, RGB): the ten classification classes used by cifar10 and imagefolder.
STYLES: list[tuple[str, str, tuple[int, int, int]]] = [
    ("red_circle", "circle", (220, 40, 40)),
    ("green_square", "square", (40, 190, 60)),
    ("blue_triangle", "triangle", (40, 80, 230)),
    ("yellow_diamond", "diamond", (235, 215, 30)),
    ("magenta_ring", "ring", (210, 40, 200)),
    ("cyan_cross", "cross", (30, 205, 215)),
    ("orange_hexagon", "hexagon", (245, 140, 20)),
    ("purple_frame", "frame", (120, 40, 170)),
    ("white_star", "star", (245, 245, 245)),
    ("black_bar", "hbar", (15, 15, 15)),
]

Box = tuple[int, int, int, int]  # x0, y0, x1, y1, inclusive pixel indices


def background(rng: np.random.Generator, w: int, h: int, grain: float = 8.0) -> np.ndarray:
    """A smooth, desaturated random texture with fine grain: float32 H x W x 3 in 0..255."""
    low = rng.uniform(40, 200, (3, 4, 3)).astype(np.float32)
    grey = low.mean(axis=2, keepdims=True)
    low = 0.4 * low + 0.6 * grey  # desaturate so saturated objects stand out
    chans = [np.asarray(Image.fromarray(low[:, :, c]).resize((w, h), Image.Resampling.BICUBIC))
             for c in range(3)]
    img = np.stack(chans, axis=-1)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    freq, phase = rng.uniform(0.05, 0.25), rng.uniform(0, 6.28)
    img += 10.0 * np.sin(freq * (xx + yy) + phase)[..., None]  # faint stripes
    img += rng.normal(0.0, grain, (h, w, 3)).astype(np.float32)
    return img


def _regular(box: Box, n: int, rot: float, inner: float = 1.0) -> list[tuple[float, float]]:
    x0, y0, x1, y1 = box
    cx, cy, rx, ry = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / 2, (y1 - y0) / 2
    pts = []
    for k in range(n):
        a = rot + 2 * np.pi * k / n
        r = inner if k % 2 else 1.0
        pts.append((cx + r * rx * np.cos(a), cy + r * ry * np.sin(a)))
    return pts


def shape_mask(shape: str, w: int, h: int, box: Box) -> np.ndarray:
    """A boolean H x W mask of ``shape`` drawn inside ``box`` (inclusive corners)."""
    m = Image.new("L", (w, h), 0)
    d = ImageDraw.Draw(m)
    x0, y0, x1, y1 = box
    bw, bh = x1 - x0, y1 - y0
    cx, cy = (x0 + x1) // 2, (y0 + y1) // 2
    t = max(1, min(bw, bh) // 4)  # stroke width for hollow shapes
    if shape in ("circle", "ellipse"):
        d.ellipse(box, fill=255)
    elif shape in ("square", "rect"):
        d.rectangle(box, fill=255)
    elif shape == "triangle":
        d.polygon([(cx, y0), (x1, y1), (x0, y1)], fill=255)
    elif shape == "diamond":
        d.polygon([(cx, y0), (x1, cy), (cx, y1), (x0, cy)], fill=255)
    elif shape == "ring":
        d.ellipse(box, fill=255)
        if bw > 2 * t and bh > 2 * t:
            d.ellipse((x0 + t, y0 + t, x1 - t, y1 - t), fill=0)
    elif shape == "cross":
        d.rectangle((x0, cy - t // 2 - 1, x1, cy + t // 2 + 1), fill=255)
        d.rectangle((cx - t // 2 - 1, y0, cx + t // 2 + 1, y1), fill=255)
    elif shape == "hexagon":
        d.polygon(_regular(box, 6, 0.0), fill=255)
    elif shape == "frame":
        d.rectangle(box, fill=255)
        if bw > 2 * t and bh > 2 * t:
            d.rectangle((x0 + t, y0 + t, x1 - t, y1 - t), fill=0)
    elif shape == "star":
        d.polygon(_regular(box, 10, -np.pi / 2, inner=0.45), fill=255)
    elif shape == "hbar":
        d.rectangle((x0, cy - max(1, bh // 6), x1, cy + max(1, bh // 6)), fill=255)
    else:
        raise ValueError(f"unknown shape {shape!r}")
    return np.asarray(m) > 0


def paint(img: np.ndarray, mask: np.ndarray, rgb: tuple[int, int, int],
          rng: np.random.Generator, jitter: float = 18.0) -> None:
    """Fill ``mask`` in ``img`` (float H x W x 3) with a jittered, lightly shaded colour."""
    colour = np.asarray(rgb, np.float32) + rng.normal(0.0, jitter, 3).astype(np.float32)
    n = int(mask.sum())
    if n:
        img[mask] = colour + rng.normal(0.0, 6.0, (n, 3)).astype(np.float32)


def random_box(rng: np.random.Generator, w: int, h: int, lo: float, hi: float,
               aspect: tuple[float, float] = (0.8, 1.25), inside: bool = True) -> Box:
    """A box whose longer side is ``lo..hi`` of the image's shorter side, fully inside."""
    side = rng.uniform(lo, hi) * min(w, h)
    a = rng.uniform(*aspect)
    bw = max(3, min(w - 1, int(round(side * min(1.0, a)))))
    bh = max(3, min(h - 1, int(round(side * min(1.0, 1.0 / a)))))
    if inside:
        x0, y0 = int(rng.integers(0, w - bw)), int(rng.integers(0, h - bh))
    else:  # may stick out of any edge; the caller clips
        x0 = int(rng.integers(-bw // 2, w - bw // 2))
        y0 = int(rng.integers(-bh // 2, h - bh // 2))
    return x0, y0, x0 + bw, y0 + bh


def shape_image(rng: np.random.Generator, label: int, w: int, h: int) -> np.ndarray:
    """A classification image: the class's shape and colour on a random background."""
    _, shape, rgb = STYLES[label % len(STYLES)]
    img = background(rng, w, h, grain=6.0)
    box = random_box(rng, w, h, 0.45, 0.85)
    paint(img, shape_mask(shape, w, h, box), rgb, rng)
    return to_uint8(img)


def to_uint8(img: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def save_jpeg(img: np.ndarray, path: Path, quality: int = 90) -> None:
    """Write a uint8 H x W x 3 (or H x W) array as a baseline JPEG."""
    Image.fromarray(img).save(path, format="JPEG", quality=quality)


def mask_bounds(mask: np.ndarray) -> Box | None:
    """The tight inclusive bounding box of a mask's set pixels, or None when it is empty."""
    ys = np.flatnonzero(mask.any(axis=1))
    xs = np.flatnonzero(mask.any(axis=0))
    if not len(xs):
        return None
    return int(xs[0]), int(ys[0]), int(xs[-1]), int(ys[-1])
