"""Accuracy parity: the same training on 1 process and on N, with the same global batch, seed
and number of samples seen. Data-parallel training should not change what the model learns;
when it does (batch-norm statistics over smaller per-device batches, a sharding bug, a learning
rate not matched to the batch), this shows it with both accuracies side by side."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any

from scaleprobe import results as res
from scaleprobe.config import RunConfig, validate
from scaleprobe.report.thresholds import DEFAULT

TOLERANCE = DEFAULT.parity_tolerance  # |accuracy(N) - accuracy(1)| that still counts as parity


def parity_configs(cfg: RunConfig) -> tuple[RunConfig, RunConfig]:
    """(one process, N processes) with the same global batch and everything else equal."""
    world = cfg.world_size
    gb = cfg.train.global_batch or cfg.train.batch_size * world
    train = dataclasses.replace(cfg.train, global_batch=gb, eval=True)
    multi = dataclasses.replace(cfg, train=train,
                                dist=dataclasses.replace(cfg.dist, parity=False))
    one_dist = dataclasses.replace(cfg.dist, strategy="single", nproc=1, nnodes=1, node_rank=0,
                                   rdzv_endpoint=None, parity=False)
    one = dataclasses.replace(multi, dist=one_dist)
    validate(one)
    validate(multi)
    return one, multi


def parity_record(rec_1: dict[str, Any], rec_n: dict[str, Any], exp_id: str,
                  tolerance: float = TOLERANCE) -> dict[str, Any]:
    a1 = res.get(rec_1, "metrics.accuracy")
    an = res.get(rec_n, "metrics.accuracy")
    diff = None if a1 is None or an is None else an - a1
    return {"kind": "parity", "schema": res.SCHEMA,
            "experiment": {"id": exp_id, "kind": "parity"},
            "nproc": rec_n["batch"].get("world_size") if rec_n.get("batch") else None,
            "global_batch": rec_n["config"]["train"]["global_batch"],
            "samples_seen": [res.get(r, "metrics.steps_done", 0) * r["config"]["train"][
                "global_batch"] for r in (rec_1, rec_n)],
            "accuracy_1": a1, "accuracy_n": an, "difference": diff, "tolerance": tolerance,
            "within_tolerance": None if diff is None else abs(diff) <= tolerance,
            "runs": [rec_1["run_id"], rec_n["run_id"]],
            "status": "ok" if diff is not None else "failed"}


def run_parity(cfg: RunConfig) -> dict[str, Any]:
    from scaleprobe.runner import execute

    one, multi = parity_configs(cfg)
    exp_id = f"parity-{uuid.uuid4().hex[:8]}"
    rec_n = execute(multi, {"id": exp_id, "kind": "parity", "point": {"nproc": cfg.world_size}})
    rec_1 = execute(one, {"id": exp_id, "kind": "parity", "point": {"nproc": 1}})
    rec = parity_record(rec_1, rec_n, exp_id)
    res.append_jsonl(Path(cfg.out) / res.RESULTS_FILE, rec)
    return {"parity": rec, "runs": [rec_1, rec_n]}
