"""Pieces shared by the format writers and readers: the write summary, output folders, errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scaleprobe.core.errors import ConfigError, DataError


@dataclass
class Written:
    """What a writer produced: pass ``root`` as ``--data-dir``."""

    format: str
    root: Path
    count: int  # images (or ``unit``) written, all splits together
    size: tuple[int, int]  # width, height in pixels
    splits: dict[str, int] = field(default_factory=dict)  # split name -> images
    classes: list[str] = field(default_factory=list)  # class (or identity) names
    notes: list[str] = field(default_factory=list)  # one-line remarks for the user
    unit: str = "images"  # what count counts (text: tokens)


def prepare_out(out_dir: str | Path, overwrite: bool) -> Path:
    """Create ``out_dir``; refuse a non-empty one unless ``overwrite`` (files are replaced)."""
    out = Path(out_dir).expanduser()
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file, not a folder")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise ConfigError(f"--out {out} is not empty; choose a new folder or pass --force "
                          "to write over the files there")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create {out}: {e.strerror}") from None
    return out


def need_count(fmt: str, count: int, minimum: int) -> None:
    if count < minimum:
        raise ConfigError(f"{fmt} needs --count of at least {minimum}, got {count}")


def need_size(fmt: str, size: tuple[int, int], minimum: int, fixed: tuple[int, int] | None = None
              ) -> None:
    if fixed is not None and tuple(size) != fixed:
        raise ConfigError(f"{fmt} images are {fixed[0]}x{fixed[1]} by definition of the format; "
                          f"got --size {size[0]}x{size[1]}")
    if min(size) < minimum:
        raise ConfigError(f"{fmt} needs --size of at least {minimum}x{minimum}, "
                          f"got {size[0]}x{size[1]}")


def start_writing(fmt: str, out_dir: str | Path, overwrite: bool, count: int,
                  size: tuple[int, int], least: tuple[int, int],
                  fixed: tuple[int, int] | None = None) -> Path:
    """What every generator checks before it writes (``least``: the fewest images and the
    smallest side the format holds; ``fixed``: the one size it has), then its output
    folder, created."""
    need_count(fmt, count, least[0])
    need_size(fmt, size, least[1], fixed)
    return prepare_out(out_dir, overwrite)


def hint(fmt: str) -> str:
    return f"generate a small one with `scaleprobe datagen {fmt} --out DIR`"


def need_root(root: str | Path, what: str, fmt: str) -> Path:
    """``root`` as a Path when it is an existing, non-empty folder, else a DataError."""
    p = Path(root).expanduser()
    if not p.is_dir():
        raise DataError(f"{what}: folder {p} not found ({hint(fmt)})")
    if not any(p.iterdir()):
        raise DataError(f"{what}: folder {p} is empty ({hint(fmt)})")
    return p


def load_rgb(path: str):
    """Open an image file as RGB, turning an unreadable file into a DataError naming it."""
    from PIL import Image, UnidentifiedImageError  # heavy: PIL: only where an image is decoded

    try:
        with Image.open(path) as img:
            return img.convert("RGB")
    except FileNotFoundError:
        raise DataError(f"image file not found: {path}") from None
    except UnidentifiedImageError:
        raise DataError(f"cannot read image {path}: not a recognised image format") from None
    except (OSError, SyntaxError, ValueError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DataError(f"cannot read image {path}: {reason}") from None


def open_torchvision(name: str, official: Any, local: Any, root: Path, train: bool,
                     download: bool, transform: Any, validate: Any) -> Any:
    """A torchvision dataset under ``root``: with ``download``, ``official`` fetches the
    published archive (checked against its published checksums; a failure is one line);
    else ``validate(root, train)`` checks the files there and ``local`` reads them."""
    if download:
        try:
            return official(str(root), train=train, download=True, transform=transform)
        except (OSError, RuntimeError) as e:
            raise DataError(f"cannot download {name} into {root}: {e}") from None
    validate(root, train)
    return local(str(root), train=train, download=False, transform=transform)
