"""Read Pascal VOC detection data, with errors that name the file, line and object.

torchvision's ``VOCDetection`` finds the files (``ImageSets/Main/<set>.txt``) and is reused
for that. Its annotation reader returns the XML as nested strings and stops with a bare parse
error, so annotations are read here instead, with line numbers, and turned into the target
torchvision's detection models take:

    image:  uint8 tensor 3 x H x W
    target: {"boxes": float32 N x 4 (x1, y1, x2, y2, 0-based pixel edges),
             "labels": int64 N (1 + index in VOC_CLASSES; 0 is left for the background),
             "difficult": bool N}

A VOC box ``xmin..xmax`` (1-based, inclusive) becomes ``x1 = xmin - 1, x2 = xmax``.
``validate_voc`` reads every annotation of a split up front (plain XML, no image decode), so a
run stops on bad data before training starts; each item is checked again when it is read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.parsers import expat

import torch
from torchvision.datasets import VOCDetection
from torchvision.transforms.functional import pil_to_tensor

from scaleprobe.core.errors import ConfigError, DataError
from scaleprobe.core.registry import suggest
from scaleprobe.data.formats.common import hint, load_rgb
from scaleprobe.data.formats.voc_gen import VOC_CLASSES

__all__ = ["VOC_CLASSES", "Annotation", "VOCBoxes", "open_voc", "parse_annotation",
           "validate_voc"]
IMAGE_SETS = ("train", "val", "trainval", "test")


class _Node:
    __slots__ = ("tag", "line", "children", "text")

    def __init__(self, tag: str, line: int) -> None:
        self.tag, self.line, self.text = tag, line, ""
        self.children: list[_Node] = []

    def find(self, tag: str) -> _Node | None:
        return next((c for c in self.children if c.tag == tag), None)

    def findall(self, tag: str) -> list[_Node]:
        return [c for c in self.children if c.tag == tag]


def _read_xml(path: Path) -> _Node:
    top = _Node("", 0)
    stack = [top]
    parser = expat.ParserCreate()
    parser.buffer_text = True

    def start(tag: str, _attrs: dict) -> None:
        node = _Node(tag, parser.CurrentLineNumber)
        stack[-1].children.append(node)
        stack.append(node)

    def text(data: str) -> None:
        stack[-1].text += data

    parser.StartElementHandler = start
    parser.EndElementHandler = lambda _tag: stack.pop()
    parser.CharacterDataHandler = text
    try:
        parser.Parse(path.read_bytes(), True)
    except FileNotFoundError:
        raise DataError(f"annotation file not found: {path}") from None
    except OSError as e:
        raise DataError(f"cannot read {path}: {e.strerror}") from None
    except expat.ExpatError as e:
        raise DataError(f"{path} line {e.lineno}: not valid XML "
                        f"({expat.ErrorString(e.code)}, column {e.offset + 1})") from None
    return top.children[0]


@dataclass
class Annotation:
    path: Path
    width: int
    height: int
    names: list[str]
    boxes: list[tuple[float, float, float, float]]  # 0-based x1, y1, x2, y2
    difficult: list[bool]


def _number(path: Path, node: _Node, tag: str, where: str) -> float:
    """The number in ``node``'s child ``tag``; NaN when the child is missing."""
    child = node.find(tag)
    if child is None:
        return float("nan")
    try:
        return float(child.text.strip())
    except ValueError:
        raise DataError(f"{path} line {child.line}: {where} <{tag}> is "
                        f"'{child.text.strip()}', not a number") from None


def _size(path: Path, root: _Node) -> tuple[int, int]:
    size = root.find("size")
    if size is None:
        raise DataError(f"{path} line {root.line}: <annotation> has no <size>")
    w, h = (_number(path, size, t, "<size>") for t in ("width", "height"))
    if not (w > 0 and h > 0):
        raise DataError(f"{path} line {size.line}: <size> needs positive <width> and <height>")
    return int(w), int(h)


def _object(path: Path, k: int, obj: _Node, w: int, h: int) -> tuple[str, tuple, bool]:
    name_node = obj.find("name")
    name = name_node.text.strip() if name_node is not None else ""
    where = f"object {k} ({name or 'no name'})"
    if name not in VOC_CLASSES:
        near = suggest(name, VOC_CLASSES)
        tip = f"; did you mean {near[0]}?" if near else " (not one of the 20 VOC classes)"
        raise DataError(f"{path} line {obj.line}: {where}: unknown class '{name}'{tip}")
    bnd = obj.find("bndbox")
    if bnd is None:
        raise DataError(f"{path} line {obj.line}: {where} has no <bndbox>")
    x0, y0, x1, y1 = (_number(path, bnd, t, where) for t in ("xmin", "ymin", "xmax", "ymax"))
    if any(v != v for v in (x0, y0, x1, y1)):
        raise DataError(f"{path} line {bnd.line}: {where}: <bndbox> needs xmin, ymin, xmax, ymax")
    if x1 < x0 or y1 < y0:
        raise DataError(f"{path} line {bnd.line}: {where}: degenerate box "
                        f"({x0:g},{y0:g})-({x1:g},{y1:g}) has xmax < xmin or ymax < ymin")
    if x0 < 0 or y0 < 0 or x1 > w or y1 > h:
        raise DataError(f"{path} line {bnd.line}: {where}: box ({x0:g},{y0:g})-({x1:g},{y1:g}) "
                        f"is outside the {w}x{h} image")
    diff = obj.find("difficult")
    hard = diff is not None and diff.text.strip() not in ("", "0")
    return name, (max(0.0, x0 - 1), max(0.0, y0 - 1), x1, y1), hard


def parse_annotation(path: str | Path) -> Annotation:
    """Read and check one VOC annotation file; raises DataError naming the file and line."""
    path = Path(path)
    root = _read_xml(path)
    if root.tag != "annotation":
        raise DataError(f"{path} line {root.line}: expected <annotation>, found <{root.tag}>")
    w, h = _size(path, root)
    ann = Annotation(path, w, h, [], [], [])
    for k, obj in enumerate(root.findall("object"), start=1):
        name, box, hard = _object(path, k, obj, w, h)
        ann.names.append(name)
        ann.boxes.append(box)
        ann.difficult.append(hard)
    return ann


def _locate(root: str | Path, year: str | None = None) -> tuple[Path, str]:
    """(folder holding VOCdevkit, year) from the dataset root, VOCdevkit or VOC<year> folder.

    Without ``year`` the newest VOC<year> folder present is used."""
    p = Path(root).expanduser()
    if p.name.startswith("VOC") and p.name[3:].isdigit() and p.parent.name == "VOCdevkit":
        p = p.parent.parent
    elif p.name == "VOCdevkit":
        p = p.parent
    if not p.is_dir():
        raise DataError(f"Pascal VOC folder {p} not found ({hint('voc')})")
    years = sorted(d.name[3:] for d in (p / "VOCdevkit").glob("VOC20[01][0-9]") if d.is_dir())
    if not years:
        raise DataError(f"no Pascal VOC data under {p} (expected VOCdevkit/VOC2012/"
                        f"{{JPEGImages,Annotations,ImageSets/Main}}; {hint('voc')})")
    if year is not None and str(year) not in years:
        raise DataError(f"no VOCdevkit/VOC{year} under {p} (found VOC{', VOC'.join(years)})")
    return p, str(year) if year is not None else years[-1]


def _set_file(root: Path, year: str, image_set: str) -> Path:
    allowed = IMAGE_SETS if year == "2007" else IMAGE_SETS[:3]
    if image_set not in allowed:
        near = suggest(image_set, allowed)
        tip = f"; did you mean {near[0]}?" if near else f" (choices: {', '.join(allowed)})"
        raise ConfigError(f"unknown VOC{year} image set '{image_set}'{tip}")
    path = root / "VOCdevkit" / f"VOC{year}" / "ImageSets" / "Main" / f"{image_set}.txt"
    if not path.is_file():
        raise DataError(f"VOC image set file not found: {path}")
    return path


def validate_voc(root: str | Path, image_set: str = "train", year: str | None = None
                 ) -> tuple[int, int]:
    """Check every image and annotation a split lists; returns (images, objects)."""
    base, year = _locate(root, year)
    set_file = _set_file(base, year, image_set)
    voc = set_file.parents[2]
    images = objects = 0
    for line_no, line in enumerate(set_file.read_text().splitlines(), start=1):
        image_id = line.strip().split(" ")[0] if line.strip() else ""
        if not image_id:
            continue
        jpg = voc / "JPEGImages" / f"{image_id}.jpg"
        if not jpg.is_file():
            raise DataError(f"{set_file} line {line_no}: image {jpg} not found")
        xml = voc / "Annotations" / f"{image_id}.xml"
        if not xml.is_file():
            raise DataError(f"{set_file} line {line_no}: annotation {xml} not found")
        objects += len(parse_annotation(xml).names)
        images += 1
    if images == 0:
        raise DataError(f"{set_file} lists no images")
    return images, objects


class VOCBoxes(VOCDetection):
    """torchvision's VOCDetection file list, with checked annotations as detection targets."""

    def __init__(self, root: str, year: str, image_set: str, transforms: Any = None) -> None:
        super().__init__(root, year=year, image_set=image_set, transforms=transforms)
        keep = [i for i, p in enumerate(self.images) if Path(p).name != ".jpg"]  # blank lines
        self.images: list[str] = [self.images[i] for i in keep]
        self.targets: list[str] = [self.targets[i] for i in keep]

    def __getitem__(self, index: int) -> tuple[Any, dict[str, torch.Tensor]]:
        ann = parse_annotation(self.targets[index])
        img = load_rgb(self.images[index])
        if img.size != (ann.width, ann.height):
            raise DataError(f"{ann.path}: <size> says {ann.width}x{ann.height} but "
                            f"{self.images[index]} is {img.size[0]}x{img.size[1]}")
        target = {
            "boxes": torch.tensor(ann.boxes, dtype=torch.float32).reshape(-1, 4),
            "labels": torch.tensor([VOC_CLASSES.index(n) + 1 for n in ann.names],
                                   dtype=torch.int64),
            "difficult": torch.tensor(ann.difficult, dtype=torch.bool),
        }
        image = pil_to_tensor(img)
        if self.transforms is not None:
            image, target = self.transforms(image, target)
        return image, target


def open_voc(root: str | Path, image_set: str = "train", transforms: Any = None,
             year: str | None = None, validate: bool = True) -> VOCBoxes:
    """Pascal VOC under ``root`` (holding VOCdevkit/VOC<year>): (uint8 image, target dict).

    ``transforms(image, target)``, when given, is applied to each item. ``validate`` reads
    all annotations first (see ``validate_voc``); items are checked again as they are read."""
    base, year = _locate(root, year)
    _set_file(base, year, image_set)
    if validate:
        validate_voc(base, image_set, year)
    return VOCBoxes(str(base), year=year, image_set=image_set, transforms=transforms)
