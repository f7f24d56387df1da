"""Read LFW-style face data: people files for training, pairs files for verification.

The people and pairs files are parsed here, line by line, so that a line naming a person or
image that is not on disk is reported with the file and line number. Splits follow torchvision:
``train`` = peopleDevTrain.txt / pairsDevTrain.txt, ``test`` = the DevTest files, ``10fold`` =
people.txt / pairs.txt (all folds).

torchvision's ``LFWPeople`` and ``LFWPairs`` insist on the MD5 of the published archive
(``lfw-py/lfw-funneled.tgz``) and of each text file, so they cannot read a generated or
re-packed copy; ``LocalLFWPeople`` and ``LocalLFWPairs`` are those classes with the check
reduced to "the files are there".
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from torch.utils.data import Dataset
from torchvision.datasets import LFWPairs, LFWPeople

from scaleprobe.core.errors import ConfigError, DataError
from scaleprobe.core.registry import suggest
from scaleprobe.data.formats.common import hint, load_rgb

BASE_FOLDER = "lfw-py"
IMAGE_DIRS = {"funneled": "lfw_funneled", "original": "lfw", "deepfunneled": "lfw-deepfunneled"}
SPLIT_SUFFIX = {"train": "DevTrain", "test": "DevTest", "10fold": ""}

Pair = tuple[Path, Path, bool]


class LFWFiles:
    """Where an LFW copy keeps its images and text files; checks each image a line names."""

    def __init__(self, root: str | Path, image_set: str | None = None) -> None:
        p = Path(root).expanduser()
        if not (p / BASE_FOLDER).is_dir() and p.name == BASE_FOLDER:
            p = p.parent
        self.root, self.folder = p, p / BASE_FOLDER
        if not p.is_dir():
            raise DataError(f"LFW folder {p} not found ({hint('lfw')})")
        if not self.folder.is_dir():
            raise DataError(f"no LFW data under {p} (expected {BASE_FOLDER}/lfw_funneled/<Name>/"
                            f"<Name>_0001.jpg and pairs/people files; {hint('lfw')})")
        sets = [image_set] if image_set else list(IMAGE_DIRS)
        for s in sets:
            if s not in IMAGE_DIRS:
                near = suggest(s, IMAGE_DIRS)
                raise ConfigError(f"unknown LFW image set '{s}'"
                                  + (f"; did you mean {near[0]}?" if near else ""))
        found = [s for s in sets if (self.folder / IMAGE_DIRS[s]).is_dir()]
        if not found:
            raise DataError(f"{self.folder} has no image folder "
                            f"({', '.join(IMAGE_DIRS[s] for s in sets)})")
        self.image_set = found[0]
        self.images = self.folder / IMAGE_DIRS[found[0]]

    def path(self, name: str, number: int) -> Path:
        return self.images / name / f"{name}_{number:04d}.jpg"

    def text(self, stem: str, split: str) -> tuple[Path, list[str]]:
        if split not in SPLIT_SUFFIX:
            near = suggest(split, SPLIT_SUFFIX)
            raise ConfigError(f"unknown LFW split '{split}'"
                              + (f"; did you mean {near[0]}?" if near else
                                 " (choices: train, test, 10fold)"))
        path = self.folder / f"{stem}{SPLIT_SUFFIX[split]}.txt"
        try:
            return path, path.read_text().splitlines()
        except FileNotFoundError:
            raise DataError(f"LFW file not found: {path}") from None
        except (OSError, UnicodeDecodeError) as e:
            raise DataError(f"cannot read {path}: {e}") from None

    def image(self, src: Path, line_no: int, name: str, number: str) -> Path:
        try:
            n = int(number)
        except ValueError:
            raise DataError(f"{src} line {line_no}: image number '{number}' is not a whole "
                            "number") from None
        if not (self.images / name).is_dir():
            raise DataError(f"{src} line {line_no}: person '{name}' has no folder in "
                            f"{self.images}")
        p = self.path(name, n)
        if not p.is_file():
            raise DataError(f"{src} line {line_no}: image {n} of '{name}' not found ({p})")
        return p


def _count(src: Path, lines: list[str], i: int, what: str, fields: int = 1) -> list[int]:
    if i >= len(lines):
        raise DataError(f"{src} line {i + 1}: expected {what}, found the end of the file")
    parts = lines[i].split()
    try:
        if len(parts) != fields:
            raise ValueError
        return [int(v) for v in parts]
    except ValueError:
        raise DataError(f"{src} line {i + 1}: expected {what}, found '{lines[i].strip()}'"
                        ) from None


def read_people(files: LFWFiles, split: str) -> list[tuple[Path, str]]:
    """Every (image path, person name) the split's people file lists, checked on disk."""
    src, lines = files.text("people", split)
    folds, i = (_count(src, lines, 0, "the number of folds")[0], 1) if split == "10fold" \
        else (1, 0)
    out: list[tuple[Path, str]] = []
    for _ in range(folds):
        (n,) = _count(src, lines, i, "the number of people that follow")
        for j in range(i + 1, i + 1 + n):
            found = lines[j].strip() if j < len(lines) else "the end of the file"
            parts = found.split() if j < len(lines) else []
            if len(parts) != 2 or not parts[1].isdigit() or int(parts[1]) < 1:
                raise DataError(f"{src} line {j + 1}: expected 'Name<TAB>images', "
                                f"found '{found}'")
            name, count = parts[0], int(parts[1])
            out += [(files.image(src, j + 1, name, str(k)), name) for k in range(1, count + 1)]
        i += n + 1
    return out


def read_pairs(files: LFWFiles, split: str) -> list[Pair]:
    """Every (image a, image b, same person) the split's pairs file lists, checked on disk."""
    src, lines = files.text("pairs", split)
    if split == "10fold":
        folds, n = _count(src, lines, 0, "'folds<TAB>pairs per fold'", fields=2)
    else:
        folds, (n,) = 1, _count(src, lines, 0, "the number of pairs")
    if folds < 1 or n < 1:
        raise DataError(f"{src} line 1: expected counts above 0, found '{lines[0].strip()}'")
    out: list[Pair] = []
    for k in range(folds * 2 * n):
        line_no = 2 + k
        if line_no > len(lines):
            raise DataError(f"{src} line {line_no}: expected {folds * 2 * n} pairs after the "
                            "header, found the end of the file")
        parts = lines[line_no - 1].split()
        same = (k // n) % 2 == 0  # per fold: n matched, then n mismatched
        if same and len(parts) == 3:
            a = files.image(src, line_no, parts[0], parts[1])
            b = files.image(src, line_no, parts[0], parts[2])
        elif not same and len(parts) == 4:
            a = files.image(src, line_no, parts[0], parts[1])
            b = files.image(src, line_no, parts[2], parts[3])
        else:
            want = "'Name i j'" if same else "'Name i Other j'"
            raise DataError(f"{src} line {line_no}: expected a {'matched' if same else 'mismatched'}"
                            f" pair {want}, found '{lines[line_no - 1].strip()}'")
        out.append((a, b, same))
    extra = next((i for i in range(1 + folds * 2 * n, len(lines)) if lines[i].strip()), None)
    if extra is not None:
        raise DataError(f"{src} line {extra + 1}: more lines than the {folds * 2 * n} pairs the "
                        f"header announces, found '{lines[extra].strip()}'")
    return out


class LFWFaces(Dataset):
    """(PIL RGB image, identity index) for face training; ``identities`` lists the names."""

    def __init__(self, items: list[tuple[Path, str]], transform: Any = None) -> None:
        self.identities = sorted({name for _, name in items})
        index = {name: k for k, name in enumerate(self.identities)}
        self.samples = [(str(p), index[name]) for p, name in items]
        self.targets = [t for _, t in self.samples]
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> tuple[Any, int]:
        path, target = self.samples[i]
        img = load_rgb(path)
        return (self.transform(img) if self.transform else img), target


def open_lfw_people(root: str | Path, split: str = "train", transform: Any = None,
                    image_set: str | None = None) -> LFWFaces:
    """The people of one split as a training set of (image, identity 0..K-1). The split's
    pairs file, where the copy has one, is read and checked too: a broken
    ``pairsDevTrain.txt`` (a bad header, a short line, a person not on disk) stops the run
    here, naming the file and line, instead of going unnoticed."""
    files = LFWFiles(root, image_set)
    faces = LFWFaces(read_people(files, split), transform)
    if not faces.samples:
        raise DataError(f"the LFW {split} split under {root} lists no people")
    if (files.folder / f"pairs{SPLIT_SUFFIX[split]}.txt").is_file():
        read_pairs(files, split)
    return faces


def open_lfw_pairs(root: str | Path, split: str = "train", image_set: str | None = None
                   ) -> tuple[list[tuple[Path, int]], list[Pair]]:
    """(training images as (path, identity index), verification pairs) of one split."""
    files = LFWFiles(root, image_set)
    faces = LFWFaces(read_people(files, split))
    pairs = read_pairs(files, split)
    if not pairs:
        raise DataError(f"the LFW {split} pairs file under {root} lists no pairs")
    return [(Path(p), t) for p, t in faces.samples], pairs


def _files_present(self: Any) -> bool:
    images = os.path.join(self.root, self.file_dict[self.image_set][0])
    needed = [os.path.join(self.root, self.labels_file)]
    if self.view == "people":
        needed.append(os.path.join(self.root, self.names))
    return os.path.isdir(images) and all(os.path.isfile(p) for p in needed)


class LocalLFWPeople(LFWPeople):
    """torchvision's LFWPeople, checking that the files exist instead of their MD5."""

    _check_integrity = _files_present


class LocalLFWPairs(LFWPairs):
    """torchvision's LFWPairs, checking that the files exist instead of their MD5."""

    _check_integrity = _files_present
