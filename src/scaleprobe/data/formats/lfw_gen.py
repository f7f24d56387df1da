"""Write a small face-verification dataset in the layout of LFW as torchvision reads it.

    ROOT/lfw-py/lfw_funneled/<Name>/<Name>_0001.jpg        images, numbered from 1
    ROOT/lfw-py/peopleDevTrain.txt, peopleDevTest.txt      count, then "Name<TAB>images"
    ROOT/lfw-py/people.txt                                 folds, then per fold: count, lines
    ROOT/lfw-py/pairsDevTrain.txt, pairsDevTest.txt        N, then N matched "Name i j" and
                                                           N mismatched "Name i Other j"
    ROOT/lfw-py/pairs.txt                                  "folds<TAB>N", then per fold as above
    ROOT/lfw-py/lfw-names.txt                              "Name<TAB>images" for everyone

Fields are tab-separated, as in the published files. DevTrain and DevTest hold different
people. Each person is built from one of the 100 real 25x25 face crops bundled with
scikit-image (``skimage.data.lfw_subset``), with a colour tint, face scale and background of
their own; each image of that person varies position, angle, brightness and noise. So the
images of one person resemble each other and differ from everybody else's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from scaleprobe.data.formats.common import Written, need_count, need_size, prepare_out
from scaleprobe.errors import ConfigError

BASE_FOLDER = "lfw-py"
IMAGES_DIR = "lfw_funneled"
People = list[tuple[str, int]]  # (name, number of images)


def _faces() -> np.ndarray:
    try:
        from skimage.data import lfw_subset
    except ImportError:
        raise ConfigError("datagen lfw draws on scikit-image's bundled faces; "
                          "install it with `pip install scikit-image`") from None
    return lfw_subset()[:100]  # the first 100 are faces, the rest are not


def _identity(rng: np.random.Generator, k: int) -> dict:
    return {"face": k % 100, "flip": (k // 100) % 2 == 1, "tint": rng.uniform(0.55, 1.25, 3),
            "bg": rng.uniform(30, 220, 3), "scale": rng.uniform(0.55, 0.8)}


def face_image(faces: np.ndarray, who: dict, rng: np.random.Generator, w: int, h: int
               ) -> np.ndarray:
    """One image of one identity: their face, tint and background, with per-image jitter."""
    face = Image.fromarray((faces[who["face"]] * 255).astype(np.uint8))
    if who["flip"]:
        face = face.transpose(Image.FLIP_LEFT_RIGHT)
    side = max(8, int(min(w, h) * who["scale"] * rng.uniform(0.93, 1.07)))
    fill = int(np.median(np.asarray(face)))
    face = face.resize((side, side), Image.BICUBIC).rotate(rng.uniform(-8, 8), Image.BILINEAR,
                                                           fillcolor=fill)
    grey = np.asarray(face, np.float32) * np.float32(rng.uniform(0.85, 1.15))
    gx = (np.arange(w, dtype=np.float32) / w - 0.5) * np.float32(rng.uniform(-40, 40))
    gy = (np.arange(h, dtype=np.float32) / h - 0.5) * np.float32(rng.uniform(-40, 40))
    canvas = (gy[:, None, None] + gx[None, :, None]) + who["bg"].astype(np.float32)
    x0 = (w - side) // 2 + int(rng.integers(-w // 25 - 1, w // 25 + 2))
    y0 = (h - side) // 2 + int(rng.integers(-h // 25 - 1, h // 25 + 2))
    xs, ys = slice(max(0, x0), min(w, x0 + side)), slice(max(0, y0), min(h, y0 + side))
    part = grey[ys.start - y0: ys.stop - y0, xs.start - x0: xs.stop - x0]
    canvas[ys, xs] = part[..., None] * who["tint"].astype(np.float32)
    canvas += rng.standard_normal(canvas.shape, dtype=np.float32) * np.float32(4.0)
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
    need_count("lfw", count, 24)
    need_size("lfw", size, 32)
    w, h = size
    faces = _faces()
    root = prepare_out(out_dir, overwrite)
    folder = root / BASE_FOLDER
    rng = np.random.default_rng(seed)
    counts = _image_counts(rng, count)
    people = [(f"Person_{k + 1:03d}", c) for k, c in enumerate(counts)]
    for k, (name, c) in enumerate(people):
        who = _identity(rng, k)
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
                    "each person: one real face crop (scikit-image) with their own tint and "
                    "background"])
