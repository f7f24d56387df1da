"""Shard audit: did every rank see different samples, was each epoch covered, and did the
order change between epochs? Works on the indices each rank really consumed."""

from __future__ import annotations

from collections import Counter
from typing import Any


def expected_dropped(n: int, world: int, batch: int) -> int:
    """Samples a correct sharding leaves out of a full epoch: DistributedSampler(drop_last)
    trims to a multiple of the world size, then the loader drops each rank's last partial
    batch."""
    per_rank = n // world
    return n - world * (per_rank // batch) * batch


def audit(per_rank: list[list[list[int]]], dataset_len: int, batch: int,
          epochs_complete: int) -> dict[str, Any]:
    """``per_rank[r][e]`` is the list of indices rank ``r`` consumed in epoch ``e``.

    ``duplicate_samples`` counts every consumption of a sample after its first in an epoch,
    whether another rank or the same one consumed it again; ``unique_fraction`` is the share
    of all consumptions that were a sample's first in its epoch (1.0 when the shards are
    disjoint; 0.5 when two ranks read the same batches)."""
    world = len(per_rank)
    n_epochs = max(len(r) for r in per_rank)
    dup_total, missing_total, problems = 0, 0, []
    consumed_total, unique_total = 0, 0
    for e in range(n_epochs):
        seen: Counter[int] = Counter()  # consumptions of each sample in this epoch
        across: Counter[int] = Counter()  # ranks that consumed each sample
        for r in per_rank:
            if e < len(r):
                seen.update(r[e])
                across.update(set(r[e]))
        consumed_total += sum(seen.values())
        unique_total += len(seen)
        dups = sum(c - 1 for c in seen.values() if c > 1)  # every consumption after the first
        dup_total += dups
        shared = sum(c - 1 for c in across.values() if c > 1)
        if shared:
            problems.append(f"epoch {e + 1}: {shared} samples were consumed by more than one "
                            "rank")
        if dups > shared:
            problems.append(f"epoch {e + 1}: {dups - shared} repeated consumptions within one "
                            "rank")
        if e < epochs_complete:
            missing = dataset_len - len(seen)
            allowed = expected_dropped(dataset_len, world, batch)
            if missing > allowed:
                missing_total += missing - allowed
                problems.append(f"epoch {e + 1}: {missing} samples never seen "
                                f"(drop_last accounts for {allowed})")
    same_order = _same_order(per_rank)
    if same_order:
        problems.append("every epoch repeats the same sample order (set_epoch not called?)")
    ok = dup_total == 0 and missing_total == 0 and not same_order
    if same_order is None and ok:
        detail = "ranks disjoint; order across epochs not checked (fewer than 2 epochs seen)"
    else:
        detail = "; ".join(problems) if problems else "ranks disjoint, epochs covered, order reshuffled"
    unique = unique_total / consumed_total if consumed_total else None
    return {"ok": ok, "duplicate_samples": dup_total, "missing_samples": missing_total,
            "unique_fraction": unique,
            "same_order_across_epochs": same_order, "epochs_checked": n_epochs,
            "world_size": world, "detail": detail}


def _same_order(per_rank: list[list[list[int]]]) -> bool | None:
    """Compare each rank's first epoch with its second over their common prefix."""
    verdicts = []
    for r in per_rank:
        if len(r) < 2:
            continue
        k = min(len(r[0]), len(r[1]))
        if k < 2:
            continue
        verdicts.append(r[0][:k] == r[1][:k])
    if not verdicts:
        return None
    return all(verdicts)
