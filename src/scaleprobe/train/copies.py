"""Copies of a model's state in host memory, for --target's look back (features/target.py):
every parameter and buffer, each rank's own shard under FSDP (a DTensor's local tensor), put
back in place. ``model_state_bytes`` sizes them from the whole model, so that every rank of a
sharded model keeps the same number."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch


def _tensors(model: torch.nn.Module) -> list[torch.Tensor]:
    return list(itertools.chain(model.parameters(), model.buffers()))


def _local(t: torch.Tensor) -> torch.Tensor:
    to_local = getattr(t, "to_local", None)  # a DTensor (FSDP2): this rank's shard
    return to_local() if callable(to_local) else t


def model_state_bytes(model: torch.nn.Module) -> int:
    """The whole model's parameters and buffers, in bytes (a DTensor counts its global
    size: the same figure on every rank)."""
    return sum(t.numel() * t.element_size() for t in _tensors(model))


def copier(model: torch.nn.Module) -> tuple[Callable[[], list[torch.Tensor]],
                                            Callable[[list[torch.Tensor] | None], None]]:
    """(take, load): ``take()`` copies this rank's parameters and buffers to host memory;
    ``load(state)`` copies them back in place (None: nothing, a rank that keeps no state)."""
    tensors = _tensors(model)

    def take() -> list[torch.Tensor]:
        return [_local(t).detach().to("cpu", copy=True) for t in tensors]

    def load(state: list[torch.Tensor] | None) -> None:
        if state is None:
            return
        with torch.no_grad():
            for t, s in zip(tensors, state, strict=True):
                _local(t).copy_(s)

    return take, load
