"""Exposed communication: split into what it is, and the prediction it may be compared
with. No torch.

    exposed_s        = transfer_s + sync_overhead_s
    transfer_s       the network's part: the standalone collective that moves one
                     synchronisation's bytes (measured in the run, on its process group,
                     after training), per step; at most exposed_s
    sync_overhead_s  the rest: gradient hooks and bucket copies, the reduction's arithmetic,
                     waiting for the slowest rank, a server's work between push and pull
    transfer_hidden_s  the part of the standalone transfer that did not show in the step
                     (overlapped with the backward pass); 0 when the transfer is all exposed

Which part dominates decides the advice: a faster link or other bucket sizes shrink only
the transfer; when the overhead dominates the cost is not the network.
"""

from __future__ import annotations

from typing import Any

from scaleprobe.core.errors import ConfigError
from scaleprobe.core.run_parts import Comm
from scaleprobe.features.links import parse_spec

TRANSFER_METHOD = ("min(standalone collective of the gradient bytes, exposed): the network's "
                   "part of the exposed communication")
OVERHEAD_METHOD = ("exposed - transfer: hooks, bucket copies, reduction, waiting for the "
                   "slowest rank (not the network)")
ALONE_METHOD = "world size 1: no communication"


def split_exposed(exposed_s: float | None, standalone_s: float | None) -> dict[str, Any]:
    """``exposed_s`` as transfer + sync overhead; every value None when either input is."""
    if exposed_s is None or standalone_s is None:
        return {"transfer_s": None, "sync_overhead_s": None, "transfer_hidden_s": None}
    exposed, standalone = max(0.0, float(exposed_s)), max(0.0, float(standalone_s))
    transfer = min(standalone, exposed)
    return {"transfer_s": transfer, "sync_overhead_s": exposed - transfer,
            "transfer_hidden_s": standalone - transfer}


def _per_rank(spec: str) -> bool:
    try:
        return bool(parse_spec(spec).per_rank)
    except ConfigError:
        return False


def measured_link(dist_cfg: dict[str, Any]) -> dict[str, Any]:
    """The link a run's communication crossed: loopback when every process ran on one host,
    unless ``--link`` put each rank behind a cable of its own (``rank2=100mbit``:
    netlab/ranknet.py); else the link ``--link`` named (None when it named none)."""
    named = dist_cfg.get("link")
    if named and _per_rank(str(named)):
        return {"name": str(named), "why": "each rank in a network namespace of its own, "
                                           "cables shaped as --link names"}
    if int(dist_cfg.get("nnodes") or 1) <= 1:
        return {"name": "loopback", "why": "every process on one host"}
    if named:
        return {"name": str(named), "why": "several hosts; the link --link named"}
    return {"name": None, "why": "several hosts and no --link: the link between them is unknown"}


def same_link_prediction(comm: Comm | None,
                         dist_cfg: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The network model's prediction for the link the run was measured on, or None when
    that link is not known (several hosts, no ``--link``). A run on one host with ``--link
    1gbit`` was measured on loopback: its 1gbit prediction is a what-if, not a comparison.
    ``dist_cfg`` (the run's ``config.dist``) places records written before ``measured_link``."""
    c = comm or Comm()
    ml = c.measured_link or (measured_link(dist_cfg) if dist_cfg else {})
    link = ml.get("name")
    if not link:
        return None
    if c.prediction_measured_link is not None:
        return c.prediction_measured_link
    pred = c.prediction
    if pred is None:
        return None
    if link == "loopback" and pred.get("link") != "loopback":
        return None
    return pred  # several hosts: the prediction is for the link --link named, the one crossed
