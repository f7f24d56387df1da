"""A wrapped rank's side of the step log (``measure/steplog.py``): the steps the hooks saw
(``hooks.Recorder``), read by the heartbeat thread, so that a rank killed or stalled inside
the script leaves the steps it timed."""

from __future__ import annotations

import socket
from typing import Any

import torch

from scaleprobe.core.rank_record import RankInfo, RankMem
from scaleprobe.measure.monitor import host_mem_record
from scaleprobe.measure.stats import median
from scaleprobe.measure.steplog import StepHead
from scaleprobe.wrap.hooks import STEP_PHASES

COMM_UNSEEN = ("not measured: the run ended before the rank's record was written (the "
               "all-reduce wait stays in backward here)")


class RecorderSteps:
    """A ``StepSource`` over a ``Recorder``: its steps after the warm-up. The recorder's
    lists are appended to by the script's thread, step time first and the step's wall clock
    last, so a step whose wall clock is there is whole."""

    def __init__(self, rec: Any, rank: int, world: int, baseline: dict[str, Any]) -> None:
        self.rec, self.world, self.baseline = rec, world, baseline
        self.rank, self.host = rank, socket.gethostname()

    def head(self) -> StepHead:
        rec = self.rec
        unseen: dict[str, str] = {}
        if not rec.forward_seen:
            unseen["forward"] = "no call of an nn.Module was seen in a step"
        if not rec.data_seen:
            unseen["data"] = "no DataLoader batch was taken"
        if self.world > 1 and not any(e is not None for e in rec.comm_exposed[rec.warmup:]):
            unseen["comm"] = COMM_UNSEEN
        n = len(rec.walls)
        samples = rec.samples[max(rec.warmup, n - 256):n]  # the recent steps: cheap each beat
        log = rec.train_loader()
        per_step = int(round(median(samples))) if samples else 0
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        return StepHead(
            rank=self.rank, host=self.host, warmup_steps=rec.warmup,
            device="cuda" if cuda else "cpu", phases_unseen=unseen, samples_per_step=per_step,
            info=RankInfo(train_samples=(log.dataset_len or 0) if log else 0,
                          per_process_batch=per_step or None,
                          dataset_source=(f"the script's DataLoader ({log.sampler})" if log
                                          else "no DataLoader seen")),
            mem=RankMem.from_dict(host_mem_record(self.baseline)))

    def count(self, start: int) -> int:
        return max(0, len(self.rec.walls) - self.rec.warmup)

    def steps(self, start: int, end: int
              ) -> tuple[list[float], dict[str, list[float]], list[float | None]]:
        rec, w = self.rec, self.rec.warmup
        a, b = w + start, w + end
        phases = {p: list(rec.phases[p][a:b]) for p in STEP_PHASES}
        if self.world < 2:
            phases["comm"] = [0.0] * (b - a)
        else:
            phases["comm"] = [e or 0.0 for e in rec.comm_exposed[a:b]]
        return list(rec.step_times[a:b]), phases, list(rec.walls[a:b])
