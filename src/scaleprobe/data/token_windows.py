"""Token datasets of ``--task lm``: windows of a token file, random tokens, and the splits the
dataset registry builds from them (``tokens``, ``text``, ``tokens-synthetic``).

A sample is one window of ``T + 1`` tokens (``T`` = ``data.seq_len``), input the first ``T``
and targets the last ``T``; windows do not overlap and are addressed by index, so the
strategy's sampler shards them and the shard audit checks them. The held-out split is
evaluated on ``data.eval_windows`` windows spread evenly over it; the context-free baseline
(add-one smoothed unigram counts of the training split) is scored on the same held-out
tokens. docs/DATA.md ("samples", "evaluation", "the context-free baseline") gives the
formulas and why the recorded unigram entropy is not the held-out baseline.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from scaleprobe.core.errors import DataError
from scaleprobe.data.formats.text_gen import stdlib_root, write_text
from scaleprobe.data.formats.tokens import open_tokens
from scaleprobe.data.jpegsynth import publish_once


class TokenWindows(Dataset):
    """Windows of a token file (memory-mapped in each process on first use: a loader worker
    maps the file itself, nothing large is pickled). ``picks``: the window numbers this
    dataset holds (None: all of them, in order)."""

    def __init__(self, path: Path, dtype: np.dtype, tokens: int, seq_len: int,
                 picks: list[int] | None = None) -> None:
        self.path, self.dtype, self.seq_len = Path(path), np.dtype(dtype), seq_len
        self.count = (tokens - 1) // seq_len
        self.picks = picks
        self._arr: np.memmap | None = None

    def __len__(self) -> int:
        return len(self.picks) if self.picks is not None else self.count

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_arr": None}

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._arr is None:
            self._arr = np.memmap(self.path, dtype=self.dtype, mode="r")
        w = self.picks[i] if self.picks is not None else i
        if not 0 <= w < self.count:
            raise IndexError(f"window {w} of {self.count}")
        t = torch.from_numpy(self._arr[w * self.seq_len: (w + 1) * self.seq_len + 1]
                             .astype(np.int64))
        return t[:-1], t[1:]


class RandomWindows(Dataset):
    """``n`` windows of uniformly random tokens, each drawn from its own seed on request."""

    def __init__(self, n: int, seq_len: int, vocab: int, seed: int) -> None:
        self.n, self.seq_len, self.vocab, self.seed = n, seq_len, vocab, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        t = torch.randint(0, self.vocab, (self.seq_len + 1,), generator=g)
        return t[:-1], t[1:]


def spread(count: int, k: int | None) -> list[int] | None:
    """``k`` window numbers spread evenly over ``count`` (None: all of them)."""
    if k is None or k >= count:
        return None
    if k == 1:
        return [0]
    return [round(j * (count - 1) / (k - 1)) for j in range(k)]


def unigram_entropy(counts: np.ndarray) -> float:
    """Entropy in nats of the distribution the ``counts`` of each token give."""
    c = np.asarray(counts, dtype=np.float64)
    total = c.sum()
    if total <= 0:
        raise ValueError("no tokens counted")
    p = c[c > 0] / total
    return float(-(p * np.log(p)).sum())


def context_free_nats(counts: np.ndarray, vocab: int) -> np.ndarray:
    """Each token id's cost in nats under the training split's add-one smoothed unigram
    distribution: ``-ln((c + 1) / (N + V))``, an array of ``vocab`` float64."""
    c = np.zeros(vocab, dtype=np.float64)
    got = np.asarray(counts, dtype=np.float64)[:vocab]
    c[:len(got)] = got
    return -np.log((c + 1.0) / (c.sum() + vocab))


def file_split(root: Path, seq_len: int, vocab_size: int | None, eval_windows: int | None
               ) -> dict[str, Any]:
    """The pieces of a token folder's Split: ``train``, ``val`` (windows), ``vocab``,
    ``entropy`` (the training split's unigram entropy), ``context_free`` (each token's cost
    under the training split's smoothed counts) and ``tokens`` per split."""
    splits, vocab, counts = open_tokens(root, vocab_size)
    for s in splits.values():
        if s.tokens < seq_len + 1:
            raise DataError(f"{s.path} holds {s.tokens:,} tokens, fewer than one sample of "
                            f"seq_len + 1 = {seq_len + 1:,} (lower --seq-len)")
    tr, va = splits["train"], splits["val"]
    train = TokenWindows(tr.path, tr.dtype, tr.tokens, seq_len)
    count = (va.tokens - 1) // seq_len
    val = TokenWindows(va.path, va.dtype, va.tokens, seq_len, spread(count, eval_windows))
    return {"train": train, "val": val, "vocab": vocab, "entropy": unigram_entropy(counts),
            "context_free": context_free_nats(counts, vocab),
            "tokens": {k: s.tokens for k, s in splits.items()}}


def text_cache(cache_root: Path) -> Path:
    """The text corpus (``datagen text``, every file) in the cache folder, written once for
    this Python install, behind a marker file written last (as jpeg-synth's)."""
    version = ".".join(map(str, sys.version_info[:3]))
    tag = hashlib.sha1(f"{stdlib_root()}|{sys.version}".encode()).hexdigest()[:8]
    folder = cache_root / f"text-stdlib-py{version}-{tag}"
    return publish_once(folder, lambda tmp: write_text(tmp, overwrite=True))
