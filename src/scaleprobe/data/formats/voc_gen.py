"""Write a small Pascal VOC 2012 detection dataset with exact boxes.

    ROOT/VOCdevkit/VOC2012/JPEGImages/2012_000001.jpg
    ROOT/VOCdevkit/VOC2012/Annotations/2012_000001.xml
    ROOT/VOCdevkit/VOC2012/ImageSets/Main/{train,val,trainval}.txt and <class>_<set>.txt

Each image has one to three objects on a textured background. An object's class decides its
shape, colour and aspect (a person is a tall red ellipse, a car a wide blue rectangle, ...).
Its box is measured from the pixels actually drawn, so it is exact: VOC coordinates are
1-based and inclusive, ``xmin`` = first column + 1, ``xmax`` = last column + 1. Objects cut
by the image border are marked ``truncated``; very small ones ``difficult``, as in VOC.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

from scaleprobe.data.formats.common import Written, start_writing
from scaleprobe.data.formats.draw import (
    background,
    mask_bounds,
    paint,
    random_box,
    save_jpeg,
    shape_mask,
    to_uint8,
)

VOC_CLASSES = [
    "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
    "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa",
    "train", "tvmonitor",
]

# class -> (shape, RGB, aspect range width/height) for the classes the writer draws
DRAWN: dict[str, tuple[str, tuple[int, int, int], tuple[float, float]]] = {
    "person": ("ellipse", (225, 50, 45), (0.35, 0.55)),
    "car": ("rect", (35, 80, 225), (1.6, 2.4)),
    "dog": ("ellipse", (140, 80, 25), (1.2, 1.7)),
    "bottle": ("rect", (30, 190, 70), (0.25, 0.4)),
    "tvmonitor": ("frame", (240, 225, 30), (1.2, 1.5)),
    "cat": ("triangle", (215, 50, 215), (0.9, 1.2)),
    "bird": ("diamond", (30, 205, 215), (0.8, 1.3)),
    "aeroplane": ("cross", (245, 245, 245), (1.1, 1.6)),
}
DRAWN_CLASSES = sorted(DRAWN)
VOC_DIR = Path("VOCdevkit") / "VOC2012"

Obj = tuple[str, tuple[int, int, int, int], bool, bool]  # name, 1-based box, truncated, difficult


def _overlaps(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> bool:
    return not (a[2] < b[0] or b[2] < a[0] or a[3] < b[1] or b[3] < a[1])


def draw_scene(rng: np.random.Generator, w: int, h: int) -> tuple[np.ndarray, list[Obj]]:
    """One image with 1-3 objects that do not overlap, and their exact boxes."""
    img = background(rng, w, h)
    objects: list[Obj] = []
    placed: list[tuple[int, int, int, int]] = []
    for _ in range(int(rng.integers(1, 4))):
        name = DRAWN_CLASSES[int(rng.integers(len(DRAWN_CLASSES)))]
        shape, rgb, aspect = DRAWN[name]
        for _try in range(12):
            cut = rng.random() < 0.15
            box = random_box(rng, w, h, 0.15, 0.5, aspect, inside=not cut)
            mask = shape_mask(shape, w, h, box)
            tight = mask_bounds(mask)
            if tight is None or mask.sum() < 16 or any(_overlaps(tight, p) for p in placed):
                continue
            paint(img, mask, rgb, rng)
            placed.append(tight)
            truncated = box[0] < 0 or box[1] < 0 or box[2] >= w or box[3] >= h
            bw, bh = tight[2] - tight[0] + 1, tight[3] - tight[1] + 1
            difficult = bw * bh < 0.01 * w * h
            one_based = (tight[0] + 1, tight[1] + 1, tight[2] + 1, tight[3] + 1)
            objects.append((name, one_based, truncated, difficult))
            break
    if not objects:  # every placement collided: draw one object in the middle
        shape, rgb, _ = DRAWN["car"]
        box = (w // 4, h // 3, 3 * w // 4, 2 * h // 3)
        mask = shape_mask(shape, w, h, box)
        paint(img, mask, rgb, rng)
        x0, y0, x1, y1 = mask_bounds(mask)  # type: ignore[misc]
        objects.append(("car", (x0 + 1, y0 + 1, x1 + 1, y1 + 1), False, False))
    return to_uint8(img), objects


def annotation_xml(image_id: str, w: int, h: int, objects: list[Obj]) -> str:
    root = ET.Element("annotation")
    ET.SubElement(root, "folder").text = "VOC2012"
    ET.SubElement(root, "filename").text = f"{image_id}.jpg"
    source = ET.SubElement(root, "source")
    ET.SubElement(source, "database").text = "scaleprobe generated"
    ET.SubElement(source, "annotation").text = "exact boxes from drawn pixels"
    ET.SubElement(source, "image").text = "generated"
    size = ET.SubElement(root, "size")
    for tag, v in (("width", w), ("height", h), ("depth", 3)):
        ET.SubElement(size, tag).text = str(v)
    ET.SubElement(root, "segmented").text = "0"
    for name, box, truncated, difficult in objects:
        obj = ET.SubElement(root, "object")
        ET.SubElement(obj, "name").text = name
        ET.SubElement(obj, "pose").text = "Unspecified"
        ET.SubElement(obj, "truncated").text = str(int(truncated))
        ET.SubElement(obj, "occluded").text = "0"
        ET.SubElement(obj, "difficult").text = str(int(difficult))
        bnd = ET.SubElement(obj, "bndbox")
        for tag, v in zip(("xmin", "ymin", "xmax", "ymax"), box, strict=True):
            ET.SubElement(bnd, tag).text = str(v)
    ET.indent(root, space="\t")
    return ET.tostring(root, encoding="unicode") + "\n"


def _write_sets(main: Path, splits: dict[str, list[str]], objs: dict[str, list[Obj]]) -> None:
    splits = {**splits, "trainval": sorted(splits["train"] + splits["val"])}
    for name, ids in splits.items():
        (main / f"{name}.txt").write_text("".join(f"{i}\n" for i in ids))
        for cls in VOC_CLASSES:
            lines = []
            for i in ids:
                mine = [o for o in objs[i] if o[0] == cls]
                flag = -1 if not mine else (0 if all(o[3] for o in mine) else 1)
                lines.append(f"{i} {flag:2d}\n")
            (main / f"{cls}_{name}.txt").write_text("".join(lines))


def write_voc(out_dir: str | Path, count: int = 200, size: tuple[int, int] = (320, 240),
              seed: int = 0, overwrite: bool = False) -> Written:
    """Write ``count`` annotated JPEGs: a fifth listed in val.txt, the rest in train.txt."""
    root = start_writing("voc", out_dir, overwrite, count, size, least=(2, 32))
    w, h = size
    voc = root / VOC_DIR
    dirs = [voc / "JPEGImages", voc / "Annotations", voc / "ImageSets" / "Main"]
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    ids = [f"2012_{i + 1:06d}" for i in range(count)]
    objs: dict[str, list[Obj]] = {}
    for image_id in ids:
        img, objs[image_id] = draw_scene(rng, w, h)
        save_jpeg(img, dirs[0] / f"{image_id}.jpg")
        (dirs[1] / f"{image_id}.xml").write_text(annotation_xml(image_id, w, h, objs[image_id]))
    n_val = max(1, round(count / 5))
    val = sorted(rng.choice(count, size=n_val, replace=False).tolist())
    val_ids = [ids[i] for i in val]
    train_ids = [i for k, i in enumerate(ids) if k not in set(val)]
    _write_sets(dirs[2], {"train": train_ids, "val": val_ids}, objs)
    n_obj = sum(len(v) for v in objs.values())
    return Written("voc", root, count, (w, h), {"train": len(train_ids), "val": n_val},
                   DRAWN_CLASSES,
                   [f"{n_obj} objects of {len(DRAWN_CLASSES)} VOC classes "
                    f"({', '.join(DRAWN_CLASSES)}), boxes exact to the pixel",
                    "read with year 2012 and image_set train, val or trainval"])
