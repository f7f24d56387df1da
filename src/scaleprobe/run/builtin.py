"""The built-in training loop as a run's workload: in the driver's own process (one device,
DataParallel towers), in N ranks started through PyTorch's elastic launcher (ddp, ps, local
SGD, fsdp), or as rank 0 of a job someone else launched (``scaleprobe worker`` under
torchrun). Each rank runs ``train/worker.py``; the records come back to the driver."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from scaleprobe.config.sections import RunConfig
from scaleprobe.core.errors import ConfigError
from scaleprobe.core.rank_record import RankRecord
from scaleprobe.core.result_model import RunResult
from scaleprobe.core.traits import traits_of
from scaleprobe.data.datasets import DATASETS, check_data_dir
from scaleprobe.features.interrupt import Interrupted, StopRequest
from scaleprobe.launch import Job, handoff, run_workers
from scaleprobe.launch.rankwatch import STOP_STEPS
from scaleprobe.measure import env as envmod
from scaleprobe.measure.heartbeat import read_beats, stop_named
from scaleprobe.netlab.ranknet import context
from scaleprobe.protocols import Ending, Launched
from scaleprobe.run.driver import execute, save_traceback
from scaleprobe.run.resources import check_config
from scaleprobe.strategies.dp import check_devices
from scaleprobe.tasks import check_model_name
from scaleprobe.train.worker import launched_worker, worker_main


class BuiltinTraining:
    """The built-in loop, in this process or in launched ranks (``traits.launched``)."""

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.label = cfg.default_name()
        self.traits = traits_of(cfg.dist.strategy)
        self.training_in_children = self.traits.launched

    def preflight(self) -> None:
        cfg = self.cfg
        DATASETS.get(cfg.data.dataset)
        check_data_dir(cfg.data)
        check_model_name(cfg.task.task, cfg.model.name)
        if cfg.task.task == "detection" and cfg.train.eval:
            # heavy: torchvision: seconds; imported where it is used
            from scaleprobe.tasks.detection import require_metric  # torchmetrics: optional

            require_metric()  # the optional libraries of the mAP: before training, not after
        if self.traits.towers:
            check_devices()
        elif self.traits.launched and envmod.cuda_available():
            n = envmod.cuda_device_count()
            if cfg.dist.nproc > n:
                raise ConfigError(f"--nproc {cfg.dist.nproc} is more than the {n} CUDA "
                                  "devices on this host (one process per device)")
        # ranks this process starts (under torchrun, the launcher started them already)
        check_config(cfg, self.traits.launched and not running_under_launcher())

    def monitor_args(self) -> dict[str, Any]:
        return {"cuda_indices": envmod.cuda_indices(self.cfg.dist.nproc, self.traits.towers),
                "training_in_children": self.traits.launched}

    def environment(self) -> contextlib.AbstractContextManager[Any]:
        d = self.cfg.dist
        return context(d.link, d.nproc, d.nnodes) if self.traits.launched else \
            contextlib.nullcontext()

    def launch(self, run_dir: Path) -> Launched | None:
        cfg = self.cfg
        if self.traits.in_process:
            return _arrived(worker_main(cfg, str(run_dir)))
        d = cfg.dist
        try:
            # the steps the ranks may take to stop together: the one under way, the agreed
            # one's distance (train/engine.py ``_stop_step``) and the hand-over
            apart = d.average_every if self.traits.sync_every_k else 1
            out = run_workers(launched_worker, (cfg, str(run_dir)), Job.of(d),
                              log_dir=str(run_dir / "logs"), run_dir=str(run_dir),
                              stop_steps=STOP_STEPS - 1 + apart, leave_after_return=True)
        except Interrupted as e:
            left = handoff.take(run_dir)
            e.raws = left.ranks if left else None
            raise
        # ranks stopped by a signal to one of them (not to the launcher) return nothing:
        # rank 0's records are in the hand-off file
        left = handoff.take(run_dir)
        got = _arrived(out.get(0)) or left
        if got is None and (signame := stop_named(read_beats(run_dir))):
            # a host without rank 0, whose rank was signalled: interrupted, not ok with
            # nothing (its steps are read from the ranks' step logs)
            raise Interrupted(signame)
        return got

    def keep_traceback(self, run_dir: Path, end: Ending) -> None:
        save_traceback(run_dir, end.tb)


class UnderLauncher(BuiltinTraining):
    """Rank 0 of a job someone else launched (torchrun): it trains like every rank, monitors
    the launcher's process tree, and writes the result."""

    def __init__(self, cfg: RunConfig) -> None:
        super().__init__(cfg)
        self.training_in_children = False
        self.info = envmod.dist_info()

    def monitor_args(self) -> dict[str, Any]:
        gpus = envmod.cuda_indices(self.cfg.dist.nproc)
        return {"cuda_indices": [self.info.local_rank] if gpus else [],
                "run_root_pid": os.getppid()}  # the launcher's tree holds every local rank

    def launch(self, run_dir: Path) -> Launched | None:
        # ranks under a launcher stop together when it forwards a signal
        return _arrived(worker_main(self.cfg, str(run_dir),
                                    stop=StopRequest(escape_on_second=False)))

    def conclude(self, result: RunResult, end: Ending, run_dir: Path) -> RunConfig:
        result.launcher_run_id = os.environ.get("TORCHELASTIC_RUN_ID") or result.run_id
        return self.cfg


def run_under_launcher(cfg: RunConfig) -> RunResult | None:
    """This process is one worker of a job someone else launched (torchrun). Every rank
    trains; rank 0 monitors its own process tree and writes the result (None elsewhere)."""
    if envmod.dist_info().rank == 0:
        return execute(UnderLauncher(cfg))
    BuiltinTraining(cfg).preflight()
    worker_main(cfg, None, stop=StopRequest(escape_on_second=False))
    return None


def running_under_launcher() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or "LOCAL_RANK" in os.environ


def _arrived(ranks: list[RankRecord] | None) -> Launched | None:
    return handoff.arrived(ranks) if ranks else None
