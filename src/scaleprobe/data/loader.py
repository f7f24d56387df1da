"""The two input pipelines the reference studies compare.

``naive``: the training process loads, decodes and transforms each batch itself, synchronously
(``num_workers=0``). ``pipelined``: ``workers`` processes prepare batches ahead, ``prefetch``
batches queued per worker, pinned memory on CUDA, workers kept alive across epochs.
"""

from __future__ import annotations

import functools
import os
import signal
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, Sampler
from torch.utils.data._utils.collate import default_collate

from scaleprobe.config.sections import DataConfig
from scaleprobe.core.errors import DataError
from scaleprobe.measure.env import die_with_parent


class Indexed(Dataset):
    """Wraps a dataset: items become ``(x, y, index)``; unreadable samples fail with the file
    name, or, with ``skip_bad``, become ``None`` and are counted by the collate function."""

    def __init__(self, base: Dataset, transform: Callable[[Any], Any] | None,
                 skip_bad: bool = False, target_transform: Callable[..., Any] | None = None):
        self.base, self.transform, self.skip_bad = base, transform, skip_bad
        self.target_transform = target_transform

    def __len__(self) -> int:
        return len(self.base)

    def _describe(self, i: int) -> str:
        base, idx = self.base, i
        while hasattr(base, "indices") and hasattr(base, "base"):
            idx, base = base.indices[idx], base.base
        samples = getattr(base, "samples", None) or getattr(base, "imgs", None)
        if samples:
            return str(samples[idx][0])
        return f"sample {i}"

    def __getitem__(self, i: int) -> Any:
        try:
            x, y = self.base[i]
            if self.target_transform is not None:
                x, y = self.target_transform(x, y)
            if self.transform is not None:
                x = self.transform(x)
        except DataError:
            if self.skip_bad:
                return None
            raise
        except (OSError, ValueError, SyntaxError) as e:
            if self.skip_bad:
                return None
            raise DataError(f"cannot read {self._describe(i)}: {e} "
                            "(use --skip-bad-samples to skip and count such files)") from None
        return x, y, i


def _collate(batch: list[Any], combine: Any) -> tuple[Any, Any, torch.Tensor, int]:
    """``(combine(xs), combine(ys), indices, skipped)`` of the readable ``(x, y, i)`` items;
    the skipped ones (None) are dropped and counted."""
    good = [b for b in batch if b is not None]
    bad = len(batch) - len(good)
    if not good:
        return None, None, torch.empty(0, dtype=torch.long), bad
    xs, ys, idx = zip(*good, strict=True)
    return combine(list(xs)), combine(list(ys)), torch.tensor(idx), bad


def collate_indexed(batch: list[Any]) -> tuple[Any, Any, torch.Tensor, int]:
    """Stack ``(x, y, i)`` items; drop the skipped ones and count them."""
    return _collate(batch, default_collate)


def collate_indexed_list(batch: list[Any]) -> tuple[Any, Any, torch.Tensor, int]:
    """As ``collate_indexed`` but keeps images and targets as lists (detection)."""
    return _collate(batch, list)


def _worker_init(parent: int, _: int) -> None:
    """A loader worker computes on one thread and ends with the training process that made
    its loader (``parent``): a training process that is killed takes its workers along at
    once, instead of leaving them running until their own watchdog notices seconds later.
    Only a worker that process started itself (fork, spawn) can be tied to it; one started
    by a forkserver is the server's child (its parent alive, and not ``parent``), and its
    watchdog remains. A worker whose training process died before the worker began (it was
    reparented) ends at once."""
    torch.set_num_threads(1)
    if os.getppid() == parent:
        die_with_parent(signal.SIGKILL, parent)
    elif not _alive(parent):  # reparented: the training process died before this worker began
        os.kill(os.getpid(), signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # alive, someone else's
        return True
    return True


def quiet_worker_count_warning() -> None:
    """torch warns, in four lines twice per loader, when the workers outnumber the cores; the
    command says it once, in one line (commands/options.py ``warn_unused``)."""
    warnings.filterwarnings("ignore", message="This DataLoader will create",
                            category=UserWarning)


def build_loader(ds: Dataset, cfg: DataConfig, batch_size: int, *, sampler: Sampler | None,
                 shuffle: bool, device: torch.device, seed: int, drop_last: bool = True,
                 collate: Callable[..., Any] = collate_indexed,
                 batch_sampler: Sampler | None = None) -> DataLoader:
    pipelined = cfg.loader == "pipelined"
    quiet_worker_count_warning()
    _init = functools.partial(_worker_init, os.getpid())
    if batch_sampler is not None:
        return DataLoader(ds, batch_sampler=batch_sampler, collate_fn=collate,
                          num_workers=cfg.workers if pipelined else 0,
                          prefetch_factor=cfg.prefetch if pipelined else None,
                          persistent_workers=pipelined,
                          pin_memory=pipelined and device.type == "cuda",
                          worker_init_fn=_init if pipelined else None)
    return DataLoader(
        ds,
        batch_size=batch_size,
        sampler=sampler,
        shuffle=shuffle if sampler is None else False,
        num_workers=cfg.workers if pipelined else 0,
        prefetch_factor=cfg.prefetch if pipelined else None,
        persistent_workers=pipelined,
        pin_memory=pipelined and device.type == "cuda",
        drop_last=drop_last,
        collate_fn=collate,
        worker_init_fn=_init if pipelined else None,
        generator=torch.Generator().manual_seed(seed),
    )
