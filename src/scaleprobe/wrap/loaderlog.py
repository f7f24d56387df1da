"""What a script's DataLoaders handed out, as ``scaleprobe wrap`` records it: per loader its
sampler, dataset size and workers, and per epoch the indices of each batch handed out and
how many the loop took (``LoaderLog``, ``Epoch``); and how a batch is read: its samples, and
its tokens per sample when it holds token ids."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Epoch:
    dispatched: list[list[int] | None] = field(default_factory=list)  # per batch handed out
    consumed: int = 0  # batches the loop took
    complete: bool = False  # the iterator ran out

    def indices(self) -> list[int] | None:
        got = self.dispatched[:self.consumed]
        if any(b is None for b in got):
            return None
        out = [i for b in got for i in b or []]
        return out if all(isinstance(i, int) for i in out) else None  # numpy ints: not seen


@dataclass
class LoaderLog:
    """One DataLoader: its sampler's class, dataset size, and what each epoch handed out."""

    sampler: str
    dataset_len: int | None
    batch_size: int | None
    workers: int
    owner: Any = None  # the loader's index sampler (keeps its id from being reused)
    epochs: list[Epoch] = field(default_factory=list)
    batches: int = 0

    def facts(self) -> dict[str, Any]:
        return {"sampler": self.sampler, "dataset_len": self.dataset_len,
                "batch_size": self.batch_size, "workers": self.workers,
                "epochs_started": len(self.epochs), "batches": self.batches}


def ints(idx: Any) -> list[int] | None:
    """A batch's indices as handed out (a list or tuple kept as a list: checked to be whole
    numbers once, in ``Epoch.indices``, not on every batch), an int as a list of one."""
    if isinstance(idx, (list, tuple)):
        return list(idx)
    if isinstance(idx, int):
        return [idx]
    return None


def _first_tensor(batch: Any) -> Any:
    """A batch's first tensor (breadth first through dicts, lists and tuples), or None."""
    stack = [batch]
    while stack:
        b = stack.pop(0)
        shape = getattr(b, "shape", None)
        if shape is not None and len(shape) > 0:
            return b
        if isinstance(b, dict):
            stack.extend(b.values())
        elif isinstance(b, (list, tuple)):
            stack.extend(b)
    return None


def batch_len(batch: Any) -> int:
    """Samples in a batch: the first dimension of its first tensor."""
    b = _first_tensor(batch)
    return 0 if b is None else int(b.shape[0])


def token_len(batch: Any) -> int | None:
    """Tokens per sample when a batch is token ids: its first tensor holds integers in two
    dimensions ``[B, T]`` (an LM script's inputs); None for anything else (images, features,
    class labels first)."""
    b = _first_tensor(batch)
    if b is None:
        return None
    dtype = getattr(b, "dtype", None)
    floating = getattr(dtype, "is_floating_point", True)
    integer = not floating and not getattr(dtype, "is_complex", False) and \
        str(dtype) != "torch.bool"
    return int(b.shape[1]) if integer and len(b.shape) == 2 else None


def sampler_name(loader: Any) -> str:
    bs = getattr(loader, "batch_sampler", None)
    s = getattr(bs, "sampler", None) if bs is not None else getattr(loader, "sampler", None)
    return type(s if s is not None else bs).__name__
