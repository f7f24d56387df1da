"""One device, one process: every collective is the identity."""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import nn

from scaleprobe.core.rank_record import RankComm
from scaleprobe.core.traits import TRAITS, StrategyTraits


class Single:
    """The base of every strategy. Its traits (``scaleprobe.core.traits``) say what it is; the
    attributes below that repeat them are kept for the training loop's readability."""

    traits: StrategyTraits = TRAITS["single"]
    name = "single"
    distributed = False  # a process group exists (the strategy was launched)
    explicit_comm = False  # True when the step has communication phases of its own (ps, local SGD)
    has_overlapped_comm = False  # gradient sync inside backward, measured with no_sync()
    is_server = False  # a rank that serves parameters instead of training (ps rank 0)
    progress_rank = 0  # the rank that shows the progress bar
    towers = 1  # devices this process feeds (dp: every visible GPU)
    sync_period = 1  # steps per synchronisation (local SGD: K)
    world = 1
    rank = 0

    def __init__(self, dist_cfg: Any, device: torch.device) -> None:
        self.cfg = dist_cfg
        self.device = device

    # --- setup -----------------------------------------------------------------------------
    def configure(self, cfg: Any) -> None:
        """Settings outside the ``dist`` section that the strategy needs (fsdp: ``--amp``),
        from the run's ``RunConfig``, before ``wrap``."""

    def wrap(self, model: nn.Module) -> nn.Module:
        return model

    def unwrap(self, model: nn.Module) -> nn.Module:
        """The model itself: without torch.compile's wrapper (its eager original: evaluating
        it compiles nothing) and without the strategy's."""
        model = getattr(model, "_orig_mod", model)
        return getattr(model, "module", model)

    def sampler(self, dataset: Any, seed: int, shuffle: bool = True) -> Any:
        return None

    def set_epoch(self, sampler: Any, epoch: int) -> None:
        if sampler is not None and hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)

    # --- one step --------------------------------------------------------------------------
    def before_optimizer(self, model: nn.Module) -> None:
        """Explicit gradient communication (timed as ``comm``); none here."""

    def optimizer_step(self, optimizer: torch.optim.Optimizer, scaler: Any) -> None:
        scaler.step(optimizer)
        scaler.update()

    def after_step(self, model: nn.Module, step: int) -> None:
        """Communication after the update (local SGD averaging); none here."""

    def no_sync(self, model: nn.Module) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def step_timer(self, timer: Any) -> Any:
        """The step timer the loop marks phases on (fsdp: one that moves the time blocked on
        its collectives into ``comm``)."""
        return timer

    @property
    def evaluates(self) -> bool:
        """Does this rank run the evaluation? One rank does; a strategy whose forward needs
        every rank (fsdp: sharded parameters) runs it on all, and the progress rank records."""
        return self.rank == self.progress_rank

    def comm_record(self, calibration: dict[str, Any] | None) -> RankComm | None:
        """This rank's communication record from the no_sync calibration (fsdp: the
        in-step measurement, the calibration a cross-check)."""
        return RankComm.from_dict(calibration) if calibration else None

    def phases_unseen(self) -> dict[str, str]:
        """Phases this rank could not measure ({phase: why}): null in the breakdown."""
        return {}

    def finish_worker(self) -> None:
        """Called by a training rank after its last step (ps: tell the server it is done)."""

    @property
    def trainers(self) -> int:
        """Ranks that take a batch (the engine sizes batches by these)."""
        return self.traits.training_ranks(self.world)

    # --- what one synchronisation moves (split of exposed comm into transfer + overhead) ---
    def sync_bytes(self, model: nn.Module) -> int:
        """Bytes one synchronisation moves per rank: the gradients of trainable parameters."""
        return sum(p.numel() * p.element_size() for p in self.unwrap(model).parameters()
                   if p.requires_grad)

    def coll_device(self) -> torch.device:
        """Where this strategy's collectives run (gloo: the CPU)."""
        return torch.device("cpu")

    # --- collectives -----------------------------------------------------------------------
    def gather(self, obj: Any) -> list[Any] | None:
        return [obj]

    def any_true(self, flag: bool) -> bool:
        return flag

    def barrier(self) -> None:
        pass

    def extra_metrics(self) -> dict[str, Any]:
        return {}

    def gns_samples(self) -> Any:
        """The squared gradient norms this strategy measured in its own communication
        (``results.GnsSamples``: DDP's comm hook); None: none (one process uses two
        micro-batches instead, ``measure/gns_probe.py``)."""
        return None
