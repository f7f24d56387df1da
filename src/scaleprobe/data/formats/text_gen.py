"""A real text corpus every Python install has: the standard library's own source files,
byte-level, written as token files (``data/formats/tokens.py``).

Which files (every ``*.py`` of the standard library but third-party packages and the test
suite, in sorted order), the tokens (a byte each, a 0 byte ending each file) and the split
(every tenth file held out) are docs/DATA.md's ("datagen text"). The same Python install
always gives the same bytes; ``meta.json`` records the version and the folder it was read from.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

import numpy as np

from scaleprobe.core.errors import ConfigError
from scaleprobe.data.formats.common import Written, prepare_out
from scaleprobe.data.formats.tokens import write_tokens

SKIP_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test",
                       "__pycache__"})
VAL_EVERY = 10  # every tenth file is held out
SEPARATOR = 0  # the end-of-document byte after every file
VOCAB = 256


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_sources(root: Path | None = None) -> list[Path]:
    """The corpus' files, in its order (see the module docstring)."""
    root = root or stdlib_root()
    found: list[str] = []
    for here, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        rel = Path(here).relative_to(root)
        found += [(rel / f).as_posix() for f in files if f.endswith(".py")]
    return [root / p for p in sorted(found)]


def corpus(files: list[Path]) -> tuple[np.ndarray, np.ndarray, int]:
    """(train tokens, val tokens, files held out) of ``files`` in order."""
    parts: dict[str, list[bytes]] = {"train": [], "val": []}
    for i, f in enumerate(files):
        data = f.read_bytes()
        parts["val" if i % VAL_EVERY == VAL_EVERY - 1 else "train"].append(data + bytes([SEPARATOR]))
    train, val = (np.frombuffer(b"".join(parts[k]), dtype=np.uint8) for k in ("train", "val"))
    return train, val, len(parts["val"])


def write_text(out_dir: str | Path, count: int | None = None, size: object = None,
               seed: int = 0, overwrite: bool = False) -> Written:
    """Write the corpus (its first ``count`` files; None: all) to ``out_dir``. ``size`` and
    ``seed`` are the image formats' and change nothing here."""
    if size is not None and tuple(size) != (0, 0):  # type: ignore[arg-type]
        raise ConfigError("--size is an image size; text has none")
    root = stdlib_root()
    files = stdlib_sources(root)
    if not files:
        raise ConfigError(f"no Python source files under {root} (sysconfig's stdlib path)")
    if count is not None:
        files = files[:count]
    if len(files) < VAL_EVERY:
        raise ConfigError(f"text needs --count of at least {VAL_EVERY} files (every tenth "
                          f"is held out), got {len(files)}")
    out = prepare_out(out_dir, overwrite)
    train, val, n_val = corpus(files)
    version = ".".join(map(str, sys.version_info[:3]))
    write_tokens(out, {"train": train, "val": val}, VOCAB, {
        "tokenizer": "bytes", "separator": SEPARATOR,
        "source": f"Python {version} standard library, {root}",
        "files": {"train": len(files) - n_val, "val": n_val}})
    return Written("text", out, len(train) + len(val), (0, 0),
                   {"train": len(train), "val": len(val)}, unit="tokens",
                   notes=[f"{len(files)} .py files of the Python {version} standard library "
                          f"({root}); every tenth held out ({n_val} files)",
                          f"byte-level: vocabulary {VOCAB}, uint16 tokens, a 0 byte ends "
                          "each file"])
