"""Token files: the format nanoGPT's ``prepare.py`` scripts write, read with a memory map.

``ROOT/train.bin`` and ``ROOT/val.bin`` hold token ids, no header; an optional
``ROOT/meta.json`` gives ``vocab_size`` and ``dtype``. docs/DATA.md ("Token files") gives
the dtypes, where the vocabulary size comes from, and why ``meta.pkl`` is never loaded.
The files are never read into memory whole: ``np.memmap`` maps them and each sample reads its
own window. Opening a folder reads each split once in chunks of ``CHUNK`` tokens, to check
that no token is outside the vocabulary and to count the training split's tokens (for its
unigram entropy). Every problem a user can cause is one ``DataError`` line naming the file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from scaleprobe.core.errors import DataError

SPLITS = ("train", "val")
DTYPES: dict[str, np.dtype[Any]] = {"uint16": np.dtype("<u2"), "uint32": np.dtype("<u4")}
META = "meta.json"
CHUNK = 1 << 24  # tokens per read when scanning a split


@dataclass
class TokenSplit:
    """One split's file: where, its dtype, how many tokens, its largest token."""

    path: Path
    dtype: np.dtype
    tokens: int
    max_token: int

    def array(self) -> np.memmap:
        return np.memmap(self.path, dtype=self.dtype, mode="r")


def hint() -> str:
    return "write one with `scaleprobe datagen text --out DIR`, or nanoGPT's prepare.py"


def read_meta(root: Path) -> dict[str, Any]:
    """``meta.json`` as a dict ({} when absent), with ``dtype`` and ``vocab_size`` checked."""
    path = root / META
    if not path.is_file():
        return {}
    try:
        meta = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise DataError(f"cannot read {path}: {e}") from None
    if not isinstance(meta, dict):
        raise DataError(f"{path}: expected a JSON object such as "
                        '{"vocab_size": 50257, "dtype": "uint16"}')
    dtype = meta.get("dtype", "uint16")
    if dtype not in DTYPES:
        raise DataError(f"{path}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    vocab = meta.get("vocab_size")
    if vocab is not None and (not isinstance(vocab, int) or isinstance(vocab, bool) or vocab < 2):
        raise DataError(f"{path}: vocab_size must be an integer of at least 2, got {vocab!r}")
    limit = int(np.iinfo(DTYPES[dtype]).max) + 1
    if vocab is not None and vocab > limit:
        raise DataError(f"{path}: a vocabulary of {vocab:,} tokens does not fit {dtype} "
                        f"(at most {limit:,}); write the files as uint32")
    return meta


def scan(path: Path, dtype: np.dtype, count: bool = False
         ) -> tuple[int, int, np.ndarray | None]:
    """(tokens, largest token, each token's count or None) of one split's file, read in
    chunks; the counts (``count``) are an int64 array as long as the largest token + 1."""
    if not path.exists():
        raise DataError(f"token file not found: {path} ({hint()})")
    if path.is_dir():
        raise DataError(f"{path} is a folder, not a token file ({hint()})")
    if not path.is_file():  # a FIFO would block the read, a device has no size
        raise DataError(f"{path} is not a regular file (a FIFO, socket or device): a token "
                        "file is memory-mapped")
    size = path.stat().st_size
    if size == 0:
        raise DataError(f"{path} is empty")
    if size % dtype.itemsize:
        raise DataError(f"{path}: {size:,} bytes is not a whole number of {dtype.name} tokens "
                        f"({dtype.itemsize} bytes each): the wrong dtype in {META}?")
    try:
        arr = np.memmap(path, dtype=dtype, mode="r")
    except OSError as e:
        raise DataError(f"cannot read {path}: {e.strerror or e}") from None
    top, counts = 0, np.zeros(0, dtype=np.int64)
    for i in range(0, len(arr), CHUNK):
        part = np.asarray(arr[i:i + CHUNK])
        top = max(top, int(part.max()))
        if count:
            got = np.bincount(part)
            if len(got) > len(counts):
                counts = np.pad(counts, (0, len(got) - len(counts)))
            counts[:len(got)] += got
    return len(arr), top, counts if count else None


def open_tokens(root: str | Path, vocab_size: int | None = None
                ) -> tuple[dict[str, TokenSplit], int, np.ndarray]:
    """``({"train": ..., "val": ...}, vocabulary size, training token counts)`` of a token
    folder. ``vocab_size`` (the run's ``data.vocab_size``) replaces the folder's own; either
    must exceed every token in the files. The counts are as long as the vocabulary."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise DataError(f"token folder not found: {root} ({hint()})")
    meta = read_meta(root)
    dtype = DTYPES[meta.get("dtype", "uint16")]
    splits: dict[str, TokenSplit] = {}
    counts = None
    for name in SPLITS:
        path = root / f"{name}.bin"
        n, top, got = scan(path, dtype, count=name == "train")
        splits[name] = TokenSplit(path, dtype, n, top)
        counts = got if got is not None else counts
    top = max(s.max_token for s in splits.values())
    vocab = vocab_size or meta.get("vocab_size") or top + 1
    if top >= vocab:
        where = next(s.path for s in splits.values() if s.max_token == top)
        given = "data.vocab_size" if vocab_size else META
        raise DataError(f"{where} holds token {top}, outside the vocabulary of {vocab:,} "
                        f"({given}); the vocabulary must be at least {top + 1:,}")
    assert counts is not None
    return splits, int(vocab), np.pad(counts, (0, vocab - len(counts)))


def write_tokens(root: Path, splits: dict[str, np.ndarray], vocab_size: int,
                 extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write ``train.bin`` / ``val.bin`` in the narrowest dtype of this format that holds the
    vocabulary, and a ``meta.json`` saying so (with ``extra`` keys); returns the meta."""
    dtype = "uint16" if vocab_size <= 1 << 16 else "uint32"
    for name in SPLITS:
        np.asarray(splits[name]).astype(DTYPES[dtype]).tofile(root / f"{name}.bin")
    meta = {"vocab_size": int(vocab_size), "dtype": dtype,
            "tokens": {n: int(len(splits[n])) for n in SPLITS}, **(extra or {})}
    (root / META).write_text(json.dumps(meta, indent=1) + "\n")
    return meta
