"""``scaleprobe datagen``: write a small, valid dataset in one of the reference on-disk formats.

    scaleprobe datagen cifar10 --out data/cifar10              # 200 images, 32x32
    scaleprobe datagen mnist --out data/mnist --count 2000     # real handwriting, idx files
    scaleprobe datagen imagefolder --out data/shapes --size 96x96
    scaleprobe datagen voc --out data/voc --count 500 --seed 1 # detection, exact boxes
    scaleprobe datagen lfw --out data/lfw                      # faces, people and pairs files
    scaleprobe datagen text --out data/text                    # stdlib sources as tokens

The files follow the published layouts closely enough that torchvision's own dataset classes
read them (CIFAR-10 and LFW skip the checksum of the published archive; see docs/DATA.md).
The same format, count, size and seed always give the same files.
"""

from __future__ import annotations

import argparse
import shlex
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from scaleprobe.core.errors import ConfigError
from scaleprobe.core.fmt import bytes_
from scaleprobe.data.formats import FORMATS, generate

NAME = "datagen"
HELP = ("write a small dataset in a standard on-disk format (cifar10, mnist, imagefolder, voc, "
        "lfw, text)")
MAX_LINES = 12


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("format", metavar="FORMAT",
                   help="cifar10 | mnist | imagefolder | voc | lfw | text")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="folder to write into (created; must be empty unless --force)")
    p.add_argument("--count", type=int, default=None, metavar="N",
                   help="images to write, all splits together (default 200); text: the "
                        "first N source files (default all)")
    p.add_argument("--size", default=None, metavar="WxH",
                   help="image size in pixels, e.g. 64x64 or 64 (default: the format's own)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--force", action="store_true",
                   help="write into a folder that is not empty, replacing files of the same name")


def parse_size(text: str | None) -> tuple[int, int] | None:
    """'64x48' -> (64, 48); '64' -> (64, 64); None stays None."""
    if text is None:
        return None
    parts = text.lower().replace("×", "x").split("x")
    try:
        if len(parts) == 1:
            w = h = int(parts[0])
        elif len(parts) == 2:
            w, h = int(parts[0]), int(parts[1])
        else:
            raise ValueError
    except ValueError:
        raise ConfigError(f"--size '{text}' is not WIDTHxHEIGHT (e.g. 64x64) or one number"
                          ) from None
    if w <= 0 or h <= 0:
        raise ConfigError(f"--size must be positive, got '{text}'")
    return w, h


def layout_lines(root: Path) -> list[str]:
    """Folders under ``root`` with their file counts and sizes, collapsed when there are many."""
    per_dir: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for p in root.rglob("*"):
        if p.is_file():
            entry = per_dir[p.parent.relative_to(root).as_posix()]
            entry[0] += 1
            entry[1] += p.stat().st_size
    if len(per_dir) > MAX_LINES:  # e.g. one folder per person: show their parent once
        grouped: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        for d, (n, b) in per_dir.items():
            key = (d.rsplit("/", 1)[0] + "/*") if "/" in d else d
            grouped[key][0] += n
            grouped[key][1] += b
            grouped[key][2] += 1
        return [f"  {d + '/':40s} {n:6d} files {bytes_(b):>10s}"
                + (f"  in {k} folders" if k > 1 else "")
                for d, (n, b, k) in sorted(grouped.items())]
    return [f"  {(d + '/') if d != '.' else './':40s} {n:6d} files {bytes_(b):>10s}"
            for d, (n, b) in sorted(per_dir.items())]


def run(args: argparse.Namespace) -> int:
    fmt = args.format.strip().lower()
    if args.count is not None and args.count <= 0:
        raise ConfigError(f"--count must be positive, got {args.count}")
    size = parse_size(args.size)
    t0 = time.perf_counter()
    w = generate(fmt, args.out, count=args.count, size=size, seed=args.seed,
                 overwrite=args.force)
    took = time.perf_counter() - t0
    what = (f"{w.count} images of {w.size[0]}x{w.size[1]}" if w.unit == "images"
            else f"{w.count:,} {w.unit}")
    seed = f"seed {args.seed}, " if w.unit == "images" else ""
    print(f"wrote {fmt}: {what} to {w.root} ({seed}{took:.1f} s)")
    print(f"  {FORMATS[fmt][3]}")
    print("  " + ", ".join(f"{k} {v:,}" for k, v in w.splits.items()))
    for note in w.notes:
        print(f"  {note}")
    print("files:")
    for line in layout_lines(w.root):
        print(line)
    try:
        from scaleprobe.data.datasets import DATASETS  # heavy: torch

        known = fmt in DATASETS
    except ImportError:  # the dataset registry is optional for writing files
        known = False
    if known:
        print(f"use it: {use_command(fmt, w.root)}")
    return 0


# the task each written format trains under (the rest: the default, classification)
FORMAT_TASKS = {"voc": "detection", "lfw": "face", "text": "lm"}


def use_command(fmt: str, root: Any) -> str:
    """The ``scaleprobe run`` a written dataset trains under, as it runs: the task its
    targets need (bug caught: ``--dataset voc`` without ``--task detection`` failed in the
    loader)."""
    task = FORMAT_TASKS.get(fmt)
    argv = ["scaleprobe", "run", *(["--task", task] if task else []), "--dataset", fmt,
            "--data-dir", str(root)]
    return shlex.join(argv)
