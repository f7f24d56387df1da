"""The one place that wires model + data + task + strategy + measurement, for one rank.

``train(cfg, run_dir)`` runs in every worker process (or in-process on one device) and
returns this rank's raw record; the run driver (``run/driver.py``) turns the records into a ``result.json``.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from scaleprobe.config.sections import GLOO_IO_THREAD, RunConfig
from scaleprobe.core.rank_record import EvalFigures, RankComm, RankObserved, RankRecord
from scaleprobe.core.run_metrics import Peak
from scaleprobe.features.interrupt import (
    STOP_KEY,
    StopRequest,
    stop_step_of,
    stop_value,
)
from scaleprobe.measure.env import (
    minor_faults,
    set_gloo_io,
    threads_cpu_s,
    threads_named,
)
from scaleprobe.measure.flops import resolve_peak
from scaleprobe.measure.heartbeat import Beating, Heartbeat
from scaleprobe.measure.held import held_bytes
from scaleprobe.measure.memprobe import machine_memory_passes
from scaleprobe.measure.monitor import note_file_rss
from scaleprobe.measure.observers import build_observers
from scaleprobe.measure.progress import StepProgress
from scaleprobe.measure.timer import StepTimer
from scaleprobe.protocols import Serves, Strategy
from scaleprobe.train.calibrate import calibrate_comm, measure_transfer
from scaleprobe.train.copies import copier
from scaleprobe.train.eager import eager_passes
from scaleprobe.train.parts import Parts, lr_warmup_steps, setup
from scaleprobe.train.rankrecord import memory_facts, rank_record
from scaleprobe.train.stopping import loop_end_reason, stop_reason
from scaleprobe.train.watchers import beat_with, watchers
from scaleprobe.train.window_gate import pass_window_gate, server_ready


class _NullTimer:
    def start(self) -> None: ...
    def mark(self, phase: str) -> None: ...
    def move(self, src: str, dst: str, seconds: float) -> None: ...


NULL_TIMER = _NullTimer()


def _set_lr(p: Parts, step: int) -> None:
    """The learning rate of ``step``: the linear scaling rule's gradual warm-up (Goyal et al.)
    from --lr up to the scaled target, or ``--set train.lr_warmup=linear`` (--task lm's
    default) from target / w up to the target, over the w warm-up steps; then the target."""
    lr = scheduled_lr(p.cfg.train.lr, p.lr_target, p.cfg.train.lr_warmup == "linear",
                      p.info.lr_warmup_steps or lr_warmup_steps(p.cfg, None), step)
    if lr is None:
        return
    for g in p.optimizer.param_groups:
        g["lr"] = lr


def scheduled_lr(base: float, target: float, ramp: bool, w: int, step: int) -> float | None:
    """The learning rate at ``step`` (0-based) of a linear warm-up over ``w`` steps to
    ``target``, starting from ``base`` (linear scaling) or, with ``ramp``, from 0 (step 0
    gets target / w); None: nothing to change (no scaling, no ramp)."""
    if target == base and not ramp:
        return None
    start = 0.0 if ramp else base
    return target if step >= w else start + (target - start) * (step + 1) / w


@dataclass
class LoopState:
    step: int = 0
    timed: int = 0
    epoch: int = 0
    bad: int = 0
    losses: list[torch.Tensor] = field(default_factory=list)
    epoch_idx: list[list[torch.Tensor]] = field(default_factory=list)
    epoch_wall_s: list[float] = field(default_factory=list)
    window_t0: float | None = None
    window_t1: float | None = None
    clock_t0: float | None = None  # the window's ends on the clock every rank shares (clock())
    clock_t1: float | None = None
    # the process's minor page faults at the window's ends (measure/env.py ``minor_faults``)
    faults_t0: int | None = None
    faults_t1: int | None = None
    # gloo's socket threads (measure/env.py ``GLOO_IO_THREAD``) and their CPU time at the
    # window's ends: none where the rank has no gloo process group
    io_tids: list[int] = field(default_factory=list)
    io_t0: float | None = None
    io_t1: float | None = None
    last_batch: Any = None
    epochs_complete: int = 0
    epoch_starts: list[int] = field(default_factory=list)  # timed steps that began an epoch
    interrupted: bool = False  # stopped early on a stop request (interrupt.py)
    paused_s: float = 0.0  # --target evaluations inside the timed window: not in window_s
    stop_reason: str | None = None  # why the window ended (train/stopping.py)


def _one_step(p: Parts, st: LoopState, batch: Any, tm: Any) -> None:
    x, y, idx, bad = batch
    st.bad += bad
    st.epoch_idx[-1].append(idx)
    x, y = p.task.to_device(x, y, p.device, p.cfg.model.channels_last)
    tm.mark("h2d")
    _set_lr(p, st.step)
    if p.gns is not None:  # --gns on one process: the batch's two halves (gns_probe.py)
        loss = p.gns.step(p, x, y, tm, timed=st.step >= p.cfg.train.warmup_steps)
    else:
        with p.autocast:
            loss = p.task.forward_loss(p.model, x, y)
        tm.mark("forward")
        p.scaler.scale(loss).backward()
        tm.mark("backward")
    # with one process nothing crosses a wire: a strategy's own sync phases (local SGD's
    # averaging over one rank) are bookkeeping, timed with the optimizer, not as communication
    comm_phase = "comm" if p.strategy.world > 1 else "optimizer"
    if p.strategy.explicit_comm:
        p.strategy.before_optimizer(p.model)
        tm.mark(comm_phase)
    p.strategy.optimizer_step(p.optimizer, p.scaler)
    tm.mark("optimizer")
    if st.step == max(0, p.cfg.train.warmup_steps - 1):  # once: gradients and moments exist
        p.held = held_bytes(p.strategy.unwrap(p.model), p.optimizer)
        note_file_rss()
    if p.strategy.explicit_comm:
        p.strategy.after_step(p.model, st.step)  # local SGD averages params that have grads
        tm.mark(comm_phase)
    p.optimizer.zero_grad(set_to_none=True)  # timed with the optimizer (the step's tail)
    st.losses.append(loss.detach())
    st.last_batch = (x, y)


def _stop_step(p: Parts, st: LoopState, stop: StopRequest) -> int:
    """The step count to stop at once a stop was requested. One process, or a parameter
    server's workers (each ends on its own), stop now. Ranks that synchronise must stop at
    the same step, or one would wait in a collective the others never join: the first rank
    to see the request proposes a step far enough ahead that no rank has passed it (ranks
    are at most ``sync_period`` steps apart) and every rank reads the same answer from the
    job's store."""
    if stop.stop_at is None:
        s = p.strategy
        if not s.distributed or s.traits.has_server:
            stop.stop_at = st.step
        else:
            stop.stop_at = _agree_stop_step(st.step + int(s.sync_period) + 1,
                                            stop.who(s.rank))
    return stop.stop_at


def _agree_stop_step(proposal: int, who: tuple[int, int] | None) -> int:
    try:
        store = dist.distributed_c10d._get_default_store()
        return stop_step_of(store.compare_set(STOP_KEY, "", stop_value(proposal, who)))
    except Exception:  # noqa: BLE001  (no store: the ranks that asked stop at the proposal)
        return proposal


def train_loop(p: Parts, timer: StepTimer, progress: StepProgress, clock: Any,
               observers: Sequence[Any] = (), stop: StopRequest | None = None,
               beat: Heartbeat | None = None) -> LoopState:
    """Warm-up, then the timed window, until the step count, the stable median, the epochs or
    a stop request (``stop``: at a step boundary, ``_stop_step``) ends it. ``beat`` follows
    every phase mark."""
    stop = stop if stop is not None else StopRequest()
    st = LoopState()
    # fsdp: the time blocked on its collectives moves from the phase it was in to comm
    timed, untimed = p.strategy.step_timer(timer), p.strategy.step_timer(NULL_TIMER)
    timers = ((Beating(timed, beat), Beating(untimed, beat)) if beat is not None
              else (timed, untimed))
    try:
        _epochs(p, st, timer, timers, progress, clock, observers, stop, beat)
    except KeyboardInterrupt:
        # a second Ctrl+C in one process: stop mid-step, keep the steps that ended
        if p.strategy.distributed:
            raise
        timer.discard_open()
        st.interrupted = True
        stop.signame = stop.signame or "SIGINT"
    except Exception as e:  # noqa: BLE001  (re-raised unless a stop was asked before it)
        # a terminal's Ctrl+C reaches the whole process group: the step's own subprocesses
        # too (inductor's C++ compiler, then CppCompileError). Asked to stop first, the run
        # was interrupted, not failed (before: `failed`, "InductorError: CppCompileError")
        if p.strategy.distributed or stop.signame is None:
            raise
        timer.discard_open()
        st.interrupted = True
        first = (str(e).strip().splitlines() or [""])[0][:200]
        with contextlib.suppress(OSError):
            os.write(2, f"scaleprobe: the step under way then failed, as the {stop.signame} "
                        f"reached its subprocesses too: {type(e).__name__}: {first}\n"
                        .encode())
    st.stop_reason = ("interrupted" if st.interrupted else
                      st.stop_reason or loop_end_reason(p, st))
    st.window_t1 = time.perf_counter()
    st.clock_t1 = clock()
    st.faults_t1 = minor_faults()
    st.io_t1 = threads_cpu_s(st.io_tids) if st.io_tids else None
    return st


def _epochs(p: Parts, st: LoopState, timer: StepTimer, timers: tuple[Any, Any],
            progress: StepProgress, clock: Any, observers: Sequence[Any], stop: StopRequest,
            beat: Heartbeat | None) -> None:
    t = p.cfg.train
    warm = t.warmup_steps
    cap = t.max_epochs if t.target is not None else t.epochs
    halt = False
    if p.watch is not None:
        p.watch.start()  # time to target counts from here: loader start-up included
    while cap is None or st.epoch < cap:
        p.strategy.set_epoch(p.sampler, st.epoch)
        st.epoch_idx.append([])
        t_epoch = time.perf_counter()
        it = iter(p.loader)
        halt = False
        first = True  # the epoch's first batch: the loader prefetches none across epochs
        while True:
            timing = st.step >= warm
            if timing and st.window_t0 is None:
                pass_window_gate(lambda: stop.requested)
                # every process group exists by now: gloo's socket threads' policy set and
                # their CPU read before the window opens, so that none of it is timed
                set_gloo_io(p.cfg.dist.gloo_io)
                st.io_tids = threads_named(GLOO_IO_THREAD)
                st.io_t0 = threads_cpu_s(st.io_tids) if st.io_tids else None
                st.window_t0 = time.perf_counter()
                st.clock_t0 = clock()
                st.faults_t0 = minor_faults()
            tm = timers[0] if timing else timers[1]
            tm.start()
            batch = next(it, None)
            if batch is None:
                break
            if first and timing:
                st.epoch_starts.append(st.timed)
            first = False
            tm.mark("data")
            with (p.flops.around(st.step, timing) if p.flops else contextlib.nullcontext()):
                _one_step(p, st, batch, tm)
            if _step_ends(p, st, timer, timing, progress, observers, stop, beat):
                halt = True
                break
        if timing:
            timer.close() if halt else timer.discard_open()
        if batch is None:
            st.epochs_complete += 1
            st.epoch_wall_s.append(time.perf_counter() - t_epoch)
            if p.watch is not None and p.watch.due(st.step, epoch_end=True) and _target_eval(p, st, stop):
                halt, st.stop_reason = True, "target"
        st.epoch += 1
        if halt:
            break
    if (p.watch is not None and not (halt or st.interrupted) and st.step
            and p.watch.last_step != st.step):
        _target_eval(p, st, stop)  # at the cap: the last model's value, if not evaluated yet


def _step_ends(p: Parts, st: LoopState, timer: StepTimer, timing: bool,
               progress: StepProgress, observers: Sequence[Any], stop: StopRequest,
               beat: Heartbeat | None) -> bool:
    """A step's end: count it, tell the heartbeat, the bar and the observers, evaluate for
    --target when due; True when the loop stops here (``st.stop_reason`` says why, or
    ``st.interrupted``)."""
    st.step += 1
    st.timed += timing
    if beat is not None:
        beat.step_done(st.step)
    progress.advance(st)
    for ob in observers:
        ob.step(st)
    if p.watch is not None and p.watch.due(st.step):
        if timing:
            timer.close()  # the step ends before the evaluation: not in its time
        if _target_eval(p, st, stop):
            st.stop_reason = "target"
            return True
    elif p.watch is not None and p.watch.keep_due(st.step):
        if timing:
            timer.close()  # the step ends before the copy: not in its time
        _keep_copy(p, st)
    if timing and (why := stop_reason(p, st, timer)):
        st.stop_reason = why
        return True
    if stop.requested and st.step >= _stop_step(p, st, stop):
        st.interrupted = True
        return True
    return False


def _target_eval(p: Parts, st: LoopState, stop: StopRequest) -> bool:
    """One --target evaluation (on the progress rank; every rank agrees on stopping), and
    after the one that reached it the look back (ended early when asked to stop)."""
    fn = None
    if p.strategy.evaluates:  # one rank, or every rank when the forward needs them all (fsdp)
        model = p.strategy.unwrap(p.model)
        dev = next(model.parameters()).device
        fn = lambda: p.task.evaluate(model, p.val_loader, dev, p.autocast,  # noqa: E731
                                     p.cfg.model.channels_last)
    t0 = time.perf_counter()
    reached = p.watch.evaluate(st.step, fn, p.strategy.any_true)
    if reached and p.watch.kept:  # narrow the hit's bracket: the copies kept since the last
        take, load = copier(p.strategy.unwrap(p.model))
        trained = take() if p.strategy.evaluates else None
        p.watch.look_back(fn, load, p.strategy.any_true, lambda: stop.requested)
        load(trained)
    if st.window_t0 is not None:
        st.paused_s += time.perf_counter() - t0
    return reached


def _keep_copy(p: Parts, st: LoopState) -> None:
    """A copy of the model for --target's look back (state only on a rank that evaluates;
    every rank keeps the schedule), off the training clock and out of the window."""
    take, _ = copier(p.strategy.unwrap(p.model))
    t0 = time.perf_counter()
    p.watch.keep(st.step, take if p.strategy.evaluates else lambda: None)
    if st.window_t0 is not None:
        st.paused_s += time.perf_counter() - t0


def _peak(device: torch.device, amp: str) -> tuple[Peak | None, str | None]:
    """(this device's peak FLOP/s for the run's dtype (measure/flops.py), None), or (None,
    why not): a peak that cannot be had never fails the run. Resolved before the model
    exists, so a calibration's memory is gone before memory is measured."""
    try:
        return Peak.from_dict(resolve_peak(device, amp)), None
    except Exception as e:  # noqa: BLE001
        return None, f"no peak: {type(e).__name__}: {e}"
    finally:
        if device.type == "cuda":
            torch.cuda.empty_cache()


def _agree_interrupted(strategy: Strategy, mine: bool) -> bool:
    """Whether any rank was interrupted: every rank then skips the collectives after training
    (calibration, transfer) together. One all-reduce after the timed window."""
    if not strategy.distributed:
        return mine

    t = torch.tensor([1.0 if mine else 0.0], device=strategy.coll_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)


def _after_window(cfg: RunConfig, p: Parts, st: LoopState, strategy: Strategy, stop: StopRequest,
                  interrupted: bool) -> tuple[RankComm | None, EvalFigures, bool]:
    """After the timed window (skipped when interrupted): the communication calibration and
    the standalone collective, then the evaluation. Returns (comm record, eval metrics,
    interrupted: a second Ctrl+C on one process keeps the training figures)."""
    comm = None
    metrics: EvalFigures = {}
    try:
        if not interrupted:
            comm = strategy.comm_record(calibrate_comm(p, st))
            transfer = measure_transfer(p)
            if transfer is not None:
                comm = comm or RankComm()
                comm.transfer = transfer
        # evaluated on a training rank: a parameter server never runs the forward pass, so its
        # batch-norm statistics were never updated; worker 1 holds the served parameters
        if not interrupted and p.val_loader is not None and strategy.evaluates:
            model = strategy.unwrap(p.model)
            eval_device = next(model.parameters()).device
            metrics = p.task.evaluate(model, p.val_loader, eval_device, p.autocast,
                                      cfg.model.channels_last)
            if strategy.rank != strategy.progress_rank:  # every rank ran it (fsdp); one records
                metrics = {}
    except KeyboardInterrupt:  # one process, a second Ctrl+C: keep the training figures
        if strategy.distributed:
            raise
        interrupted, stop.signame = True, stop.signame or "SIGINT"
    return comm, metrics, interrupted


def train(cfg: RunConfig, strategy: Strategy, device: torch.device, progress: StepProgress,
          clock: Any = time.perf_counter, run_dir: str | None = None,
          beat: Heartbeat | None = None, stop: StopRequest | None = None) -> RankRecord:
    """Set up, train, calibrate, evaluate; return this rank's raw record.

    From the end of setup, Ctrl+C and SIGTERM only ask to stop (``stop``, handled by the
    caller): the loop ends at a step boundary, the record holds the steps so far and
    ``interrupted`` names the signal, and calibration and evaluation are skipped."""
    stop = stop if stop is not None else StopRequest()
    peak = None if strategy.is_server else _peak(device, cfg.train.amp)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    p = setup(cfg, device, strategy, beat.setup_passed if beat is not None else lambda m: None)
    compiles = watchers(p)
    timer = StepTimer(device.type)
    observed: dict[str, Any] = {}
    stop.deferring = True
    if beat is not None:
        beat_with(beat, p, timer, stop, compiles)
    if strategy.is_server:
        assert isinstance(strategy, Serves)
        server_ready()
        strategy.serve(p.optimizer)  # until every worker is done, interrupted or not
        st = LoopState()
    else:
        observers = build_observers(cfg.measure, run_dir, strategy.rank, p.per_process_batch,
                                    device.type == "cuda",
                                    summaries=strategy.rank == strategy.progress_rank)
        progress.begin(p)
        try:  # the watch follows the loop as an observer: each step's end, for its events
            st = train_loop(p, timer, progress, clock, [*observers, compiles], stop, beat)
        finally:
            progress.end()
            observed = {k: v for ob in observers for k, v in ob.close().items()}
        strategy.finish_worker()
        p.flops.after_loop(p, st)  # a compiled model's count: now, outside the window
    if beat is not None:
        beat.set_state("after")
    interrupted = _agree_interrupted(strategy, st.interrupted or stop.requested)
    eager = None  # --compile: the same forward + backward uncompiled, after the window
    if cfg.model.compile and not interrupted and not strategy.is_server:
        eager = eager_passes(p, st.last_batch)
    comm, metrics, interrupted = _after_window(cfg, p, st, strategy, stop, interrupted)
    rec = rank_record(p, st, timer, comm, metrics)
    if strategy.world == 1 and not interrupted:  # what the step model prices copies with
        rec.memory_pass = machine_memory_passes()
    if not interrupted and cfg.measure.memory_probe:  # after rank_record: resets CUDA's peaks
        rec.memory_facts = memory_facts(p, st, strategy)
    rec.observed = RankObserved.from_dict(observed)
    rec.flops = p.flops.result() if p.flops else None
    if rec.flops is not None and peak is not None:
        rec.flops.peak, rec.flops.peak_reason = peak
    rec.compile = (None if strategy.is_server else
                   compiles.record((st.window_t0, st.window_t1), compiles.ends,
                                   cfg.train.warmup_steps))
    if rec.compile is not None and eager is not None:
        rec.compile.eager = eager
    compiles.remove()
    # the signal this rank saw, or "peer" when it stopped because another rank was asked to
    rec.interrupted = stop.recorded() if interrupted else None
    return rec
