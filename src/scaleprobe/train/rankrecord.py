"""What one rank of the built-in loop returns after training: its ``RankRecord`` (steps,
phases, losses, the indices it read, its memory), and the memory facts a prediction reads,
probed after the timed window."""

from __future__ import annotations

import math
import socket
from typing import TYPE_CHECKING, Any

import torch

from scaleprobe.core.rank_record import EvalFigures, RankComm, RankMem, RankRecord
from scaleprobe.core.run_metrics import MemoryFacts
from scaleprobe.measure.gns_probe import samples_of
from scaleprobe.measure.memstate import model_facts, probe_steps
from scaleprobe.measure.monitor import host_mem_record
from scaleprobe.measure.timer import StepTimer
from scaleprobe.protocols import Strategy
from scaleprobe.strategies.fsdp import shard_units
from scaleprobe.train.parts import Parts

if TYPE_CHECKING:
    from scaleprobe.train.engine import LoopState


def _memory(device: torch.device) -> dict[str, Any]:
    if device.type != "cuda":
        return {"device_allocated": None, "device_reserved": None}
    return {"device_allocated": int(torch.cuda.max_memory_allocated(device)),
            "device_reserved": int(torch.cuda.max_memory_reserved(device))}


def memory_facts(p: Parts, st: LoopState, strategy: Strategy) -> MemoryFacts | None:
    """What a memory prediction reads (measure/memstate.py), as ``MemoryFacts``: one untimed
    step per batch size on the last batch, after the window (every rank of the strategy runs
    it, so collectives match). None on a parameter server's rank; the probe's fields null
    with the reason where the strategy's step has phases of its own (ps, local SGD)."""
    if strategy.is_server:
        return None
    model = strategy.unwrap(p.model)
    facts: dict[str, Any] = {**model_facts(model, p.optimizer, shard_units),
                             "strategy": p.cfg.dist.strategy, "world": strategy.world,
                             "reasons": {}}
    if facts.pop("largest_unit_reason", None):
        facts["reasons"]["largest_unit_bytes"] = "FSDP's unit rule could not split the model"
    if strategy.explicit_comm:
        facts["reasons"]["fwd_bwd_peak_bytes"] = ("not probed: the strategy's step has "
                                                  "communication phases of its own")
    elif st.last_batch is None:
        facts["reasons"]["fwd_bwd_peak_bytes"] = "no step ran"
    else:
        probed = probe_steps(p, st.last_batch)
        facts["reasons"].update(probed.pop("reasons", {}))
        facts.update(probed)
    return MemoryFacts.from_dict(facts)


def _held(held: dict[str, int] | None) -> dict[str, int | None]:
    """The state bytes read on the warm-up step (measure/held.py), as ``RankMem`` fields."""
    h = held or {}
    return {"params_bytes": h.get("params"), "grads_bytes": h.get("grads"),
            "optimizer_bytes": h.get("optimizer")}


def rank_record(p: Parts, st: LoopState, timer: StepTimer, comm: RankComm | None,
                eval_metrics: EvalFigures) -> RankRecord:
    """This rank's record, as it travels (the launcher's pickled return values) to
    ``assemble.build_result``."""
    losses = [float(v) for v in (st.losses[0], st.losses[-1])] if st.losses else [None, None]
    return RankRecord(
        rank=p.strategy.rank,
        is_server=p.strategy.is_server,  # serves parameters, takes no batch (ps rank 0)
        host=socket.gethostname(),
        device=str(p.device),
        threads=torch.get_num_threads(),  # this rank's compute threads (cores / local world)
        steps_done=st.step,
        steps_timed=st.timed,
        step_times_s=timer.step_times(),
        phase_times_s=timer.phase_times(),
        phases_unseen=p.strategy.phases_unseen(),
        window_s=(st.window_t1 - st.window_t0 - st.paused_s)
        if st.window_t0 and st.window_t1 is not None else None,
        clock_window=(st.clock_t0, st.clock_t1),
        page_faults=(st.faults_t1 - st.faults_t0)
        if st.faults_t0 is not None and st.faults_t1 is not None else None,
        gloo_io_cpu_s=(st.io_t1 - st.io_t0)
        if st.io_t0 is not None and st.io_t1 is not None else None,
        epochs_complete=st.epochs_complete,
        epoch_wall_s=st.epoch_wall_s,
        epoch_start_steps=st.epoch_starts,
        samples_per_step=p.per_process_batch,
        towers=p.strategy.towers,  # devices this process feeds (dp: all)
        indices=[torch.cat(e).tolist() if e else [] for e in st.epoch_idx],
        loss_first=losses[0],
        loss_last=losses[-1],
        loss_finite=all(math.isfinite(v) for v in losses if v is not None),
        bad_samples=st.bad,
        comm=comm,
        eval=eval_metrics,
        mem=RankMem.from_dict({**host_mem_record(p.host_baseline), **_memory(p.device),
                               **_held(p.held)}),
        info=p.info,
        strategy_metrics=p.strategy.extra_metrics(),
        target=p.watch.record() if p.watch is not None and p.watch.points else None,
        gns=samples_of(p),
        stop_reason=st.stop_reason,
    )
