"""Write a small face-verification dataset in the layout of LFW as torchvision reads it.

The layout (``ROOT/lfw-py/``: images, the people, pairs and names files, tab-separated as the
published ones) and what the pictures show (scikit-image's 100 real face crops, everything but
the face drawn again for every picture, so an untrained network verifies pairs near chance)
are docs/DATA.md's ("The formats in detail", "What the images show"), with the figures.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from scaleprobe.config.extras import require
from scaleprobe.data.formats.common import Written, start_writing
from scaleprobe.data.formats.draw import random_box

BICUBIC, BILINEAR = Image.Resampling.BICUBIC, Image.Resampling.BILINEAR
BASE_FOLDER = "lfw-py"
IMAGES_DIR = "lfw_funneled"
People = list[tuple[str, int]]  # (name, number of images)

# What varies from one picture of a person to the next (ranges of uniform draws).
FACE_SCALE = (0.66, 0.74)  # face side / image side
FACE_SHIFT = 0.02  # centre offset, fraction of the image side, either way
FACE_ROTATION = 3.0  # degrees, either way
LIGHT_EXPOSURE = (0.55, 1.4)  # overall brightness factor
LIGHT_CONTRAST = (0.7, 1.25)  # contrast around the face's mean
LIGHT_GAMMA = 0.25  # gamma = exp(+-this)
LIGHT_SIDE = 0.4  # brightness slope across the face, from a random direction
COLOUR_CAST = (0.55, 1.4)  # per-channel factor on the face
OCCLUSION_P = 0.35  # chance of a block of colour over part of the face
NOISE_SIGMA = (2.0, 14.0)  # pixel noise, in 0..255 units


def _faces() -> np.ndarray:
    require("face", "datagen lfw (scikit-image's bundled faces)")
    from skimage.data import lfw_subset  # optional: skimage (the face extra)

    return lfw_subset()[:100]  # the first 100 are faces, the rest are not


def _identity(k: int) -> dict:
    """Person ``k``: a face crop, mirrored for the second hundred people, and from the third
    hundred on blended with a second face (a new face that resembles two others)."""
    second = None
    if k >= 200:
        second = (k * 37 + k // 200 * 11) % 100
        second = (second + 1) % 100 if second == k % 100 else second
    return {"face": k % 100, "flip": (k // 100) % 2 == 1, "blend": second}


def _face_pixels(faces: np.ndarray, who: dict) -> np.ndarray:
    face = faces[who["face"]].astype(np.float32)
    if who["blend"] is not None:
        face = 0.6 * face + 0.4 * faces[who["blend"]].astype(np.float32)
    return face[:, ::-1] if who["flip"] else face


def _lit(face: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The face under this picture's light: exposure, contrast, gamma and light from one side."""
    n = face.shape[0]
    angle = rng.uniform(0, 2 * np.pi)
    yy, xx = np.mgrid[0:n, 0:n].astype(np.float32) / (n - 1) - 0.5
    slope = 1.0 + rng.uniform(0.0, LIGHT_SIDE) * (np.cos(angle) * xx + np.sin(angle) * yy) * 2
    lit = face ** np.float32(np.exp(rng.uniform(-LIGHT_GAMMA, LIGHT_GAMMA)))
    lit = (lit - lit.mean()) * np.float32(rng.uniform(*LIGHT_CONTRAST)) + lit.mean()
    lit = lit * slope * np.float32(rng.uniform(*LIGHT_EXPOSURE))
    return np.clip(lit, 0.0, 1.5) * 255.0


def _backdrop(rng: np.random.Generator, w: int, h: int) -> np.ndarray:
    """A smooth backdrop of muted random colours (a 3 x 3 grid, enlarged): float H x W x 3."""
    low = rng.uniform(30, 220, (3, 3, 3)).astype(np.float32)
    low = 0.5 * low + 0.5 * low.mean(axis=2, keepdims=True)
    return np.stack([np.asarray(Image.fromarray(low[:, :, c]).resize((w, h), BICUBIC))
                     for c in range(3)], axis=-1)


def face_image(faces: np.ndarray, who: dict, rng: np.random.Generator, w: int, h: int
               ) -> np.ndarray:
    """One picture of one person: only the face itself is theirs. Light, colour cast, size,
    angle, position, background, occlusion and noise are drawn afresh for every picture."""
    grey = Image.fromarray(_lit(_face_pixels(faces, who), rng)).convert("F")
    side = max(8, int(min(w, h) * rng.uniform(*FACE_SCALE)))
    angle = rng.uniform(-FACE_ROTATION, FACE_ROTATION)
    face = np.asarray(grey.resize((side, side), BICUBIC).rotate(angle, BILINEAR))
    inside = np.asarray(Image.new("L", (side, side), 255).rotate(angle, BILINEAR),
                        np.float32)[..., None] / 255.0
    canvas = _backdrop(rng, w, h)
    x0 = (w - side) // 2 + int(round(rng.uniform(-FACE_SHIFT, FACE_SHIFT) * w))
    y0 = (h - side) // 2 + int(round(rng.uniform(-FACE_SHIFT, FACE_SHIFT) * h))
    xs, ys = slice(max(0, x0), min(w, x0 + side)), slice(max(0, y0), min(h, y0 + side))
    crop = (slice(ys.start - y0, ys.stop - y0), slice(xs.start - x0, xs.stop - x0))
    tint = rng.uniform(*COLOUR_CAST, 3).astype(np.float32)
    a = inside[crop]
    canvas[ys, xs] = canvas[ys, xs] * (1 - a) + face[crop][..., None] * tint * a
    if rng.random() < OCCLUSION_P:
        bx0, by0, bx1, by1 = random_box(rng, side, side, 0.25, 0.5, aspect=(0.4, 2.5))
        canvas[max(0, y0 + by0): min(h, y0 + by1), max(0, x0 + bx0): min(w, x0 + bx1)] = \
            rng.uniform(0, 255, 3).astype(np.float32)
    canvas += rng.standard_normal(canvas.shape, dtype=np.float32) * np.float32(
        rng.uniform(*NOISE_SIGMA))
    return np.clip(canvas, 0, 255, out=canvas).astype(np.uint8)


def _image_counts(rng: np.random.Generator, count: int) -> list[int]:
    counts: list[int] = []
    while sum(counts) < count:
        n = 1 if len(counts) >= 2 and rng.random() < 0.15 else int(rng.integers(2, 7))
        counts.append(min(n, count - sum(counts)))
    return counts


def make_pairs(rng: np.random.Generator, people: People, n: int) -> tuple[list, list]:
    """``n`` distinct matched (name, i, j) and ``n`` mismatched (name, i, other, j) pairs."""
    matched = [(name, i, j) for name, c in people for i in range(1, c + 1)
               for j in range(i + 1, c + 1)]
    order = rng.permutation(len(matched))[:n]
    matched = [matched[k] for k in sorted(order)]
    mismatched: set[tuple[str, int, str, int]] = set()
    while len(mismatched) < n:
        a, b = sorted(rng.choice(len(people), size=2, replace=False).tolist())
        (na, ca), (nb, cb) = people[a], people[b]
        mismatched.add((na, int(rng.integers(1, ca + 1)), nb, int(rng.integers(1, cb + 1))))
    return matched, sorted(mismatched)


def _pair_lines(matched: list, mismatched: list) -> list[str]:
    return ["\t".join(map(str, p)) for p in matched + mismatched]


def _n_pairs(groups: list[People]) -> int:
    possible = [sum(c * (c - 1) // 2 for _, c in g) for g in groups]
    return max(1, min(min(possible), min(sum(c for _, c in g) for g in groups) // 2))


def _write_texts(folder: Path, rng: np.random.Generator, people: People) -> dict[str, int]:
    order = rng.permutation(len(people))
    multi = [people[k] for k in order if people[k][1] >= 2]
    single = [people[k] for k in order if people[k][1] < 2]
    cut = max(2, round(len(multi) * 0.7))
    dev = {"DevTrain": multi[:cut] + single[: len(single) * 7 // 10],
           "DevTest": multi[cut:] + single[len(single) * 7 // 10:]}
    for tag, group in dev.items():
        group = sorted(group)
        lines = [str(len(group))] + [f"{name}\t{c}" for name, c in group]
        (folder / f"people{tag}.txt").write_text("\n".join(lines) + "\n")
        n = _n_pairs([group])
        (folder / f"pairs{tag}.txt").write_text(
            "\n".join([str(n)] + _pair_lines(*make_pairs(rng, group, n))) + "\n")
    n_folds = min(10, max(2, len(multi) // 3))
    folds = [sorted((multi + single)[f::n_folds]) for f in range(n_folds)]
    n = _n_pairs(folds)
    people_lines, pair_lines = [str(n_folds)], [f"{n_folds}\t{n}"]
    for fold in folds:
        people_lines += [str(len(fold))] + [f"{name}\t{c}" for name, c in fold]
        pair_lines += _pair_lines(*make_pairs(rng, fold, n))
    (folder / "people.txt").write_text("\n".join(people_lines) + "\n")
    (folder / "pairs.txt").write_text("\n".join(pair_lines) + "\n")
    (folder / "lfw-names.txt").write_text("".join(f"{p}\t{c}\n" for p, c in sorted(people)))
    return {"train people": len(dev["DevTrain"]), "test people": len(dev["DevTest"]), "folds": n_folds}


def write_lfw(out_dir: str | Path, count: int = 200, size: tuple[int, int] = (250, 250),
              seed: int = 0, overwrite: bool = False) -> Written:
    """Write ``count`` face images of about count/4 people, with people and pairs files."""
    faces = _faces()  # the face extra first: nothing is created without it
    root = start_writing("lfw", out_dir, overwrite, count, size, least=(24, 32))
    w, h = size
    folder = root / BASE_FOLDER
    rng = np.random.default_rng(seed)
    counts = _image_counts(rng, count)
    people = [(f"Person_{k + 1:03d}", c) for k, c in enumerate(counts)]
    for k, (name, c) in enumerate(people):
        who = _identity(k)
        d = folder / IMAGES_DIR / name
        d.mkdir(parents=True, exist_ok=True)
        for i in range(1, c + 1):
            img = face_image(faces, who, rng, w, h)
            Image.fromarray(img).save(d / f"{name}_{i:04d}.jpg", format="JPEG", quality=90)
    split = _write_texts(folder, rng, people)
    return Written("lfw", root, count, (w, h),
                   {"train people": split["train people"], "test people": split["test people"]},
                   [name for name, _ in people],
                   [f"{len(people)} people, {split['folds']} folds in people.txt/pairs.txt",
                    "each person: one real face crop (scikit-image); light, colour, backdrop, "
                    "size, position, occlusion and noise change from picture to picture"])
