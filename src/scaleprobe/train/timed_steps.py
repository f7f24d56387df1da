"""The built-in loop's side of the step log (``measure/steplog.py``): a launched rank's timed
steps, read from its ``StepTimer`` by the heartbeat thread, so a rank that dies keeps them."""

from __future__ import annotations

import socket
from dataclasses import replace
from typing import Any

import torch

from scaleprobe.core.rank_record import RankMem
from scaleprobe.measure.monitor import host_mem_record
from scaleprobe.measure.steplog import StepHead

# DDP's all-reduce runs inside backward; its exposed part is measured after training
# (calibrate.py), which a rank that died never reached
COMM_IN_BACKWARD = ("not measured: the run ended before the calibration that splits the "
                    "exposed all-reduce out of backward (it is inside backward here)")


class TimerSteps:
    """A ``StepSource`` over one rank's ``StepTimer`` and its parts."""

    def __init__(self, timer: Any, parts: Any) -> None:
        self.timer = timer
        s = parts.strategy
        unseen = dict(s.phases_unseen())
        if s.world > 1 and not s.explicit_comm and not s.traits.comm_in_step:
            unseen.setdefault("comm", COMM_IN_BACKWARD)
        self.parts = parts
        self.fixed = StepHead(rank=s.rank, host=socket.gethostname(), device=str(parts.device),
                              threads=torch.get_num_threads(),
                              samples_per_step=parts.per_process_batch, towers=s.towers,
                              warmup_steps=parts.cfg.train.warmup_steps, phases_unseen=unseen,
                              info=parts.info)

    def head(self) -> StepHead:
        mem = RankMem.from_dict(host_mem_record(self.parts.host_baseline))
        return replace(self.fixed, mem=mem)

    def count(self, start: int) -> int:
        return self.timer.readable(start)

    def steps(self, start: int, end: int
              ) -> tuple[list[float], dict[str, list[float]], list[float | None]]:
        return self.timer.read(start, end)
