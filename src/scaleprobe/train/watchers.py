"""What follows a training rank while it trains: the --target watch, the FLOP count and the
noise scale's half steps on a training rank, torch.compile's compilations on every rank
(``watchers``), and what the heartbeat is told from training on (``beat_with``): the rank's
timed steps, compiling as progress, and a stop signal passed to its peers."""

from __future__ import annotations

import os
from typing import Any

import torch.distributed as dist

from scaleprobe.features.interrupt import StopRequest, peers_across_hosts
from scaleprobe.features.target import TargetWatch, copies_for, parse_target
from scaleprobe.measure.compiled import CompileWatch
from scaleprobe.measure.fakeflops import step_flops
from scaleprobe.measure.flops import sync_device
from scaleprobe.measure.gns_probe import half_steps
from scaleprobe.measure.heartbeat import Heartbeat
from scaleprobe.measure.timer import StepTimer
from scaleprobe.train.copies import model_state_bytes
from scaleprobe.train.parts import Parts
from scaleprobe.train.timed_steps import TimerSteps


def _watch(p: Parts) -> Any:
    """The --target watch, or None."""
    if p.cfg.train.target is None:
        return None

    try:
        per_epoch = len(p.loader)
    except TypeError:
        per_epoch = None
    copies, why = copies_for(model_state_bytes(p.strategy.unwrap(p.model)),
                             p.cfg.train.target_copies)
    return TargetWatch(parse_target(p.cfg.train.target), p.cfg.train.eval_every,
                       sync=lambda: sync_device(p.device), steps_per_epoch=per_epoch,
                       copies=copies, copies_reason=why)


def beat_with(beat: Heartbeat, p: Parts, timer: StepTimer, stop: StopRequest,
              compiles: Any) -> None:
    """The heartbeat from training on: the rank's timed steps (kept if it dies), compiling
    counted as progress, and a signal sent to this rank alone told to its peers, which stop
    with it at the step they agree on (a parameter server's workers each end on their own)."""
    s = p.strategy
    if not s.is_server:
        beat.keep_steps(TimerSteps(timer, p))
    beat.busy = lambda: compiles.compiling
    if s.distributed and not s.traits.has_server:
        stop.tell_peers, stop.peers = beat.asked_to_stop, beat.peer_stop
        beat.watch_peers()
        local = int(os.environ.get("LOCAL_WORLD_SIZE", s.world))
        if local < s.world:  # ranks on other hosts see no heartbeat of this one: the store
            stop.peers = peers_across_hosts(beat.peer_stop,
                                            dist.distributed_c10d._get_default_store())
            first = s.rank - int(os.environ.get("LOCAL_RANK", 0))
            stop.local_ranks = set(range(first, first + local))
    beat.set_state("serving" if s.is_server else "training")


def watchers(p: Parts) -> Any:
    """What watches a training rank's steps (FLOPs, --target, the noise scale's half
    steps), and torch.compile's compilations on every rank (a no-op without compile)."""
    if not p.strategy.is_server:
        p.flops = step_flops(p.cfg.model.compile, p.cfg.train.warmup_steps, p.strategy.towers)
        p.watch = _watch(p)
        p.gns = half_steps(p)

    return CompileWatch().install()
