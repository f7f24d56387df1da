"""The bytes of training state one rank holds: its parameters, their gradients and the
optimizer's state, counted from the tensors themselves.

A sharded tensor (FSDP2's ``DTensor``) counts its local shard only (``to_local()``: numel x
element size), so under ``--strategy fsdp`` each rank reports about 1/N of the model; under
ddp, single and the other strategies every rank holds full copies. What is not counted:
DDP's gradient buckets (a second copy of the gradients while they are reduced), FSDP's
unsharded parameters while a block runs (freed after it), activations, the allocator's cache.
Those are in the measured peak (``peak_mem_bytes``), reported beside these figures.

Read once, on the last warm-up step (the first step when there is none), after the optimizer
step and before ``zero_grad``: gradients and the optimizer's state exist then (AdamW makes
its moments at the first step).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

READ_AT = ("after the optimizer step of the last warm-up step (the first step without "
           "warm-up), before zero_grad: local shards of sharded tensors (DTensor.to_local)")


def local_bytes(t: Any) -> int:
    """Bytes of the part of ``t`` this process holds: a DTensor's local shard, else all."""
    local = t.to_local() if hasattr(t, "to_local") else t
    return int(local.numel()) * int(local.element_size())


def _tensors(obj: Any) -> Iterable[Any]:
    """The tensors in an optimizer's per-parameter state (nested dicts and lists)."""
    import torch  # heavy: torch: the optimizer state is sized in a rank, which has torch loaded

    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors(v)


def held_bytes(model: Any, optimizer: Any) -> dict[str, int]:
    """``{"params", "grads", "optimizer"}``: the bytes of this rank's parameters (each once,
    tied ones too), of the gradients they hold now, and of the optimizer's state tensors."""
    params = list(model.parameters())
    return {"params": sum(local_bytes(p) for p in params),
            "grads": sum(local_bytes(p.grad) for p in params if p.grad is not None),
            "optimizer": sum(local_bytes(t) for t in _tensors(list(optimizer.state.values())))}


def summarize_held(ranks: list[Any]) -> dict[str, Any] | None:
    """``results.StateBytes`` (as a dict) from the ranks' ``RankRecord``s: every rank that read
    its state, with its own peak memory beside it, and the largest rank's figures on top;
    None when no rank read any (a run without a step, a parameter server's rank alone)."""
    rows = []
    for r in ranks:
        m = r.mem
        if m.params_bytes is None:
            continue
        parts = (m.params_bytes, m.grads_bytes or 0, m.optimizer_bytes or 0)
        rows.append({"rank": r.rank, "params_bytes": m.params_bytes,
                     "grads_bytes": m.grads_bytes, "optimizer_bytes": m.optimizer_bytes,
                     "total_bytes": sum(parts), "host_peak_rss": m.host_peak_rss,
                     "device_allocated": m.device_allocated,
                     "device_reserved": m.device_reserved})
    if not rows:
        return None
    top = max(rows, key=lambda row: row["total_bytes"])
    return {**{k: top[k] for k in ("params_bytes", "grads_bytes", "optimizer_bytes",
                                   "total_bytes", "rank")},
            "by_rank": rows, "read_at": READ_AT}
