"""A run's communication block, from its ranks' records (``assemble.build_result`` calls it):
the exposed time split into transfer and sync overhead, each with its method, and the network
model's figures for the link the run named and the one it was measured on."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from scaleprobe.config.sections import RunConfig
from scaleprobe.core.rank_record import RankRecord, StandaloneTransfer
from scaleprobe.core.result_model import RunResult
from scaleprobe.core.run_parts import Comm
from scaleprobe.core.traits import traits_of
from scaleprobe.measure.comm.exposed import (
    ALONE_METHOD,
    OVERHEAD_METHOD,
    TRANSFER_METHOD,
    measured_link,
    split_exposed,
)
from scaleprobe.measure.comm.instep import cross_check, fill_in_step
from scaleprobe.predict.costmodel import predict_for_run


def comm_block(result: RunResult, cfg: RunConfig, raw0: RankRecord,
               ranks: list[RankRecord]) -> None:
    """The communication record: exposed time split into transfer + sync overhead, with
    the method of each; with one process, none (DDP's own cost is its wrapper overhead);
    the network model for the link the run was measured on next to the one it named."""
    d, why = cfg.dist, result.null_reasons
    tr = traits_of(d.strategy)
    cal = raw0.comm
    if cal is None and tr.in_process:
        return
    if cal is None and all(r.communicates is False for r in ranks):
        why["comm"] = ("none: the script built no process group and no DistributedDataParallel "
                       "model, so its ranks never communicated (and no network model applies)")
        return
    transfer = cal.transfer if cal is not None else None
    c = cal.run_part() if cal is not None else Comm()
    c.exposed_s = result.metrics.breakdown_s.comm
    c.exposed_fraction = result.metrics.comm_fraction
    # every strategy's communication is measured in the step (DDP's comm hook, FSDP's timed
    # collectives, the timed comm phases of ps and local SGD): the per-step figure and its
    # interval; a calibration, where the strategy has one, is a cross-check beside it
    fill_in_step(c, raw0, result.batch.world_size or 0, why,
                 None if tr.overlapped_comm else
                 "no sync-minus-no_sync calibration for this strategy: its communication is a "
                 "phase of its own")
    _split_exposed(c, result, raw0, transfer, d.calibrate_comm)
    c.strategy_metrics = raw0.strategy_metrics or {}
    if tr.has_server:
        c.extra["server"] = ranks[0].strategy_metrics or {}
    c.measured_link = measured_link(asdict(d))
    c.prediction = _prediction(result, cfg, d.link)
    p = c.prediction
    if p and c.measured_link["name"] == "loopback" and p["link"] != "loopback":
        # --link named another network than the one measured: compare on loopback
        c.prediction_measured_link = _prediction(result, cfg, "loopback")
    result.comm = c


def _split_exposed(c: Comm, result: RunResult, raw0: RankRecord,
                   transfer: StandaloneTransfer | None, calibrated: bool) -> None:
    """The exposed time split into transfer (the standalone collective, at most the exposed
    time) + sync overhead, with the method of each; one process: none of either."""
    why = result.null_reasons
    if (result.batch.world_size or 0) < 2:
        c.transfer_s = c.sync_overhead_s = c.transfer_hidden_s = 0.0
        c.transfer_method = c.sync_overhead_method = ALONE_METHOD
        if c.wrapper_overhead_s is not None:
            # the paired differences' median with its interval: shown only where it excludes
            # 0 (bug caught: "wrapper overhead 107.6 ms per step", 34% of the step, from
            # sync-minus-no_sync noise beside a hook that measured about 10 ms)
            fig = cross_check({"samples": c.samples}) or {}
            c.extra["wrapper_overhead"] = {k: fig.get(k) for k in
                                           ("difference_s", "interval_s", "pairs")}
            c.extra["wrapper_overhead_method"] = ("sync minus no_sync with one process: the "
                                                  "wrapper's hooks and bucket copies, not "
                                                  "communication (kept inside backward)")
    else:
        c.transfer_standalone = transfer.to_dict() if transfer is not None else None
        split = split_exposed(c.exposed_s, transfer.per_step_s if transfer else None)
        c.transfer_s, c.sync_overhead_s = split["transfer_s"], split["sync_overhead_s"]
        c.transfer_hidden_s = split["transfer_hidden_s"]
        if c.exposed_s is None:
            why["comm.transfer_s"] = why["comm.sync_overhead_s"] = (
                raw0.phases_unseen.get("comm") or "no step was timed")
        elif transfer is not None:
            c.transfer_method = f"{TRANSFER_METHOD}; standalone: {transfer.method}"
            c.sync_overhead_method = OVERHEAD_METHOD
        else:
            reason = (c.extra.pop("transfer_reason", None) or
                      ("not measured: calibration switched off (dist.calibrate_comm = false)"
                       if not calibrated else
                       "not measured: no standalone collective for this strategy"))
            why["comm.transfer_s"] = why["comm.sync_overhead_s"] = reason


def _prediction(result: RunResult, cfg: RunConfig, link: Any) -> dict[str, Any] | None:
    """The network model's figures for this run's setting on ``link``."""
    d, m = cfg.dist, result.metrics
    compute_s = m.breakdown_s.compute_s()
    if not m.param_count or compute_s is None:
        return None
    try:
        return predict_for_run(d.strategy, d.nproc, d.nnodes, 4.0 * m.param_count,
                               compute_s, link, d.average_every)
    except Exception as e:  # a bad link spec must not lose the run's own figures
        result.null_reasons["comm.prediction"] = f"{type(e).__name__}: {e}"
        return None
