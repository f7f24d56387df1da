"""Device-resident synthetic batches: the data path that costs nothing.

``--dataset synthetic`` measures the model, not an input pipeline (as tf_cnn_benchmarks and
timm's benchmark do): each rank makes ONE batch of random inputs and labels, once, on its
training device, from its own seed, and every step reuses it; the sample indices still come
from the strategy's sampler, so the shard audit checks the sampling as on real data.
``--dataset tokens-synthetic`` (``--task lm``) is the same with ``seq_len + 1`` random tokens
per sample. docs/FLOPS.md ("Synthetic data") sets it beside ``synthetic-loader``, which keeps
the per-sample path (``data/loader.py``) for studying the loader itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from scaleprobe.core.errors import DataError

RANK_SEED_STRIDE = 1_000_003  # a prime: seeds of neighbouring ranks and runs never coincide


def make_batch(batch: int, image_size: int, num_classes: int, seed: int,
               device: torch.device, channels_last: bool = False
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """One batch of float32 images (standard normal, the scale of normalised pixels) and int64
    labels, drawn on the CPU from ``seed`` (the same numbers on every device) and moved once."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((batch, 3, image_size, image_size), generator=g)
    y = torch.randint(0, num_classes, (batch,), generator=g)
    x, y = x.to(device), y.to(device)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    return x, y


def make_token_batch(batch: int, seq_len: int, vocab: int, seed: int, device: torch.device
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """One batch of int64 input and target tokens (``batch x seq_len`` each, the targets the
    inputs shifted by one), drawn on the CPU from ``seed`` and moved once."""
    g = torch.Generator().manual_seed(seed)
    t = torch.randint(0, vocab, (batch, seq_len + 1), generator=g).to(device)
    return t[:, :-1], t[:, 1:]


class DeviceBatches:
    """An iterable in the loader's place: each epoch yields ``(x, y, indices, 0)`` like
    ``collate_indexed``, where ``x, y`` are the one pre-made batch on the device and
    ``indices`` the next ``batch`` indices of the sampler's order (drop_last). With
    ``seq_len`` the batch is tokens (``num_classes``: the vocabulary), else images."""

    def __init__(self, n: int, batch: int, sampler: Any, image_size: int | None,
                 num_classes: int, seed: int, rank: int, device: torch.device,
                 channels_last: bool = False, seq_len: int | None = None):
        self.n, self.batch, self.sampler = n, batch, sampler
        if len(self) < 1:
            raise DataError(f"the dataset has {n} samples, fewer than one batch of {batch} "
                            "per rank (raise --num-samples)")
        self.seed = seed + RANK_SEED_STRIDE * (rank + 1)
        if seq_len is not None:
            self.x, self.y = make_token_batch(batch, seq_len, num_classes, self.seed, device)
        else:
            assert image_size is not None  # a split of images says its size
            self.x, self.y = make_batch(batch, image_size, num_classes, self.seed, device,
                                        channels_last)
        self._order = torch.Generator().manual_seed(seed)  # shuffles without a sampler

    def _indices(self) -> torch.Tensor:
        if self.sampler is not None:
            return torch.tensor(list(iter(self.sampler)), dtype=torch.long)
        return torch.randperm(self.n, generator=self._order)

    def __len__(self) -> int:
        n = len(self.sampler) if self.sampler is not None else self.n
        return n // self.batch

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]]:
        idx = self._indices()
        steps = len(idx) // self.batch
        # the whole epoch's order is drawn here, before the first step: a step only slices it
        chunks = idx[: steps * self.batch].view(steps, self.batch) if steps else idx[:0]
        x, y = self.x, self.y
        for i in range(steps):
            yield x, y, chunks[i], 0

    @property
    def nbytes(self) -> int:
        return self.x.element_size() * self.x.nelement() + self.y.element_size() * self.y.nelement()
