"""Measurements a rank makes of its own communication, in place, after training: the cost
of gradient sync (``calibrate_comm``: with against without ``no_sync``) and the network part
of one synchronisation (``measure_transfer``: the strategy's own collective, standalone).
Both take the engine's ``Parts``; ``engine.train`` calls them."""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

from scaleprobe.core.rank_record import StandaloneTransfer
from scaleprobe.measure.comm.bench import plan_iters, time_collective
from scaleprobe.measure.flops import sync_device
from scaleprobe.measure.stats import median

if TYPE_CHECKING:
    from scaleprobe.train.engine import LoopState
    from scaleprobe.train.parts import Parts


CALIBRATION_METHOD = ("median(fwd+bwd with sync) - median(fwd+bwd under no_sync), same batch, "
                      "alternating, first of each dropped, clipped at 0")


def calibrate_comm(p: Parts, st: LoopState, clock: Any = time.perf_counter) -> dict[str, Any] | None:
    """What gradient sync costs a step, measured in place: forward + backward with sync
    against the same under ``no_sync()``, on the same batch, alternating one of each
    (B A B A ...) so drift and other load hit both alike. A synchronised step comes last:
    under ``no_sync`` FSDP keeps the unsharded gradients it accumulates until a backward
    that synchronises, and the memory probe after the window must start from a clean rank
    (with them left over, resnet18's first probe read 4.3 MB low). The first sample of each kind is
    dropped (the switch between modes, first-touch allocations), the medians of the rest are
    compared, and a difference below zero (noise) is clipped to 0.

    With two or more processes that cost is the exposed communication. With one there is no
    communication: the cost is the wrapper's own bookkeeping (DDP's hooks and bucket copies),
    recorded as ``wrapper_overhead_s`` while ``exposed_s`` stays 0."""
    if not (p.strategy.has_overlapped_comm and p.cfg.dist.calibrate_comm and st.last_batch):
        return None

    x, y = st.last_batch
    times: dict[bool, list[float]] = {True: [], False: []}
    for i in range(2 * p.cfg.dist.calibration_steps):
        sync = i % 2 == 1
        ctx = contextlib.nullcontext() if sync else p.strategy.no_sync(p.model)
        sync_device(p.device)
        p.strategy.barrier()
        t0 = clock()
        with ctx:
            with p.autocast:
                loss = p.task.forward_loss(p.model, x, y)
            p.scaler.scale(loss).backward()
        sync_device(p.device)
        times[sync].append(clock() - t0)
        p.optimizer.zero_grad(set_to_none=True)
    s, n = median(times[True][1:]), median(times[False][1:])
    cost = max(0.0, s - n)
    alone = p.strategy.world < 2
    return {"sync_step_s": s, "no_sync_step_s": n, "sync_cost_s": cost,
            "exposed_s": 0.0 if alone else cost, "wrapper_overhead_s": cost if alone else None,
            "samples": {"sync": times[True], "no_sync": times[False]},
            "method": CALIBRATION_METHOD}


TRANSFER_REPEATS = 5  # timed standalone collectives after training (fewer for huge messages)


def measure_transfer(p: Parts, repeats: int = TRANSFER_REPEATS,
                     warmup: int = 1) -> StandaloneTransfer | None:
    """The network part of one synchronisation, measured in place after training: the
    strategy's own collective (``traits.sync_collective``) for the bytes one synchronisation
    moves, on this run's backend and process group, ``repeats`` times after ``warmup``; each
    time the slowest rank's. Every rank must call it (it is a collective). None with one
    process, for strategies without communication, or with calibration switched off."""
    s = p.strategy
    op = s.traits.sync_collective
    if op is None or s.world < 2 or not p.cfg.dist.calibrate_comm:
        return None

    nbytes = int(s.sync_bytes(p.model))
    iters, warm = plan_iters(nbytes, repeats, warmup)
    s.barrier()
    times = time_collective(op, nbytes, iters, warm, s.coll_device())
    med = median(times)
    every = max(1, int(s.sync_period))
    per = f", divided by the {every} steps between synchronisations" if every > 1 else ""
    return StandaloneTransfer(
        op=op, bytes=nbytes, times_s=times, median_s=med, every=every, per_step_s=med / every,
        method=f"standalone {op} of {nbytes} bytes on this run's process group after "
               f"training: median of {iters} after {warm} warm-up, slowest rank each{per}")
