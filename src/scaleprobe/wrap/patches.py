"""The two places ``scaleprobe wrap`` patches PyTorch where it has no public hook, each
reporting to a ``Recorder`` (hooks.py): the DataLoader's iterator (its ``__next__``, the
sampler's ``_next_index`` and the loader's ``__iter__``: each batch's wait, the indices a rank
read, an epoch's start) and ``Tensor.backward`` (the scalar a backward starts from)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scaleprobe.wrap.hooks import Recorder


def patch_backward(rec: Recorder) -> None:
    """Keep the scalar each ``loss.backward()`` starts from (detached: no graph is held), for
    the TensorBoard loss; nothing else changes."""
    import torch  # heavy: torch: loaded when the hooks go in, in the script's own process

    original = torch.Tensor.backward
    if getattr(original, "_scaleprobe", False):
        return

    def backward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.numel() == 1:
            rec.last_loss = self.detach()
        return original(self, *args, **kwargs)

    backward._scaleprobe = True  # type: ignore[attr-defined]
    torch.Tensor.backward = backward  # type: ignore[method-assign]


def patch_loader(dl: Any, rec: Recorder) -> None:
    base, loader_cls = dl._BaseDataLoaderIter, dl.DataLoader
    orig_next, orig_index, orig_iter = base.__next__, base._next_index, loader_cls.__iter__

    def __next__(it: Any) -> Any:
        t0 = time.perf_counter()
        rec._in_data += 1
        try:
            batch = orig_next(it)
        except StopIteration:
            rec.exhausted(it)
            raise
        finally:
            rec._in_data -= 1
            t1 = time.perf_counter()
            rec._data(t0, t1)
        rec.consumed(it, batch, t1 - t0)
        return batch

    def _next_index(it: Any) -> Any:
        idx = orig_index(it)  # StopIteration at the end of the epoch
        rec.next_index(it, idx)
        return idx

    def __iter__(loader: Any) -> Any:
        t0 = time.perf_counter()
        rec._in_data += 1
        rec._pending_loader = loader  # its workers take their first indices in the iterator
        try:
            it = orig_iter(loader)
        finally:
            rec._in_data -= 1
            rec._pending_loader = None
            rec._data(t0, time.perf_counter())
        try:
            it._sp_loader = loader
            it._sp_iter_s = time.perf_counter() - t0  # the epoch's start: part of its wait
        except AttributeError:  # a loader subclass with its own iterator type
            pass
        return it

    base.__next__, base._next_index, loader_cls.__iter__ = __next__, _next_index, __iter__
