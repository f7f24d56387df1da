"""The seams, in one module: what the training loop asks of a task and of a strategy, and what
the run driver asks of a workload. The built-in ones (tasks/, strategies/, run/builtin.py,
run/script.py) are checked against these by mypy (tests/architecture/test_seams.py, in
pyproject.toml's [tool.mypy] files) and at run time by the same test.

A new task, strategy or workload implements the members below; nothing else is asked of it.
The optional hooks of a task are protocols of their own, asked with ``isinstance``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # annotations only: the CLI reads the task and strategy names without torch
    import torch
    from torch import nn

    from scaleprobe.config.sections import RunConfig
    from scaleprobe.core.rank_record import RankComm, RankRecord
    from scaleprobe.core.result_model import RunResult
    from scaleprobe.core.traits import StrategyTraits


@runtime_checkable
class Task(Protocol):
    """A task owns its loss and its metric, so every strategy and sweep works with each
    (tasks/__init__.py; docs/TASKS.md)."""

    name: str
    metric_name: str

    def collate(self, batch: list[Any]) -> Any:
        """The loader's collate: ``(x, y, item indices, unreadable count)``."""

    def build_model(self, base: nn.Module) -> nn.Module:
        """The trained model around the zoo's ``base`` (face: an embedding head)."""

    def to_device(self, x: Any, y: Any, device: torch.device, channels_last: bool) -> Any:
        """``(x, y)`` on the device."""

    def forward_loss(self, model: nn.Module, x: Any, y: Any) -> torch.Tensor:
        """The timed forward phase: the loss of one batch."""

    def batch_sampler(self, dataset: Any, batch_size: int, seed: int) -> Any:
        """The task's own batches (face: k images per identity), or None for shuffled ones."""

    def evaluate(self, model: nn.Module, loader: Any, device: torch.device,
                 autocast: contextlib.AbstractContextManager[Any],
                 channels_last: bool = False) -> dict[str, Any]:
        """The held-out metrics: ``{metric_name: value, "eval_samples": n, ...}``."""


@runtime_checkable
class OwnTransforms(Protocol):
    """A task whose transforms move its targets with the image (detection's boxes)."""

    def transforms(self, kind: str, size: int) -> tuple[Any, Any]:
        """``(joint(image, target), image(x))`` for ``kind`` light, heavy or eval."""


@runtime_checkable
class OwnModel(Protocol):
    """A task that builds its own kind of model from the ``--model`` name (detection)."""

    def make_model(self, name: str, num_classes: int, image_size: int) -> nn.Module:
        """The model for ``name``."""


@runtime_checkable
class ChecksModel(Protocol):
    """A task that checks a user's model on one batch before training (lm: the logits'
    shape against the vocabulary)."""

    def check_model(self, model: nn.Module, x: Any, spec: str) -> None: ...


@runtime_checkable
class UsesBaseline(Protocol):
    """A task that reports its held-out loss beside the context-free model's (lm: token
    data's unigram baseline, data/token_windows.py)."""

    def use_baseline(self, nats: Any) -> None: ...


@runtime_checkable
class ShardedBatches(Protocol):
    """A task's batch sampler that builds its batches from this rank's samples only: it gets
    the strategy's distributed sampler in ``shard`` (face, triplet loss)."""

    shard: Any


@runtime_checkable
class Strategy(Protocol):
    """How the ranks share one training step (strategies/; docs/ARCHITECTURE.md). What a
    strategy is (trains, shards state, has a server) is its ``traits``, never its name."""

    traits: StrategyTraits
    name: str
    distributed: bool
    explicit_comm: bool
    has_overlapped_comm: bool
    is_server: bool
    progress_rank: int
    towers: int
    sync_period: int
    world: int
    rank: int

    def configure(self, cfg: Any) -> None: ...
    def wrap(self, model: nn.Module) -> nn.Module: ...
    def unwrap(self, model: nn.Module) -> nn.Module: ...
    def sampler(self, dataset: Any, seed: int, shuffle: bool = True) -> Any: ...
    def set_epoch(self, sampler: Any, epoch: int) -> None: ...
    def before_optimizer(self, model: nn.Module) -> None: ...
    def optimizer_step(self, optimizer: torch.optim.Optimizer, scaler: Any) -> None: ...
    def after_step(self, model: nn.Module, step: int) -> None: ...
    def no_sync(self, model: nn.Module) -> contextlib.AbstractContextManager[Any]: ...
    def step_timer(self, timer: Any) -> Any: ...
    @property
    def evaluates(self) -> bool: ...
    def comm_record(self, calibration: dict[str, Any] | None) -> RankComm | None: ...
    def phases_unseen(self) -> dict[str, str]: ...
    def finish_worker(self) -> None: ...
    @property
    def trainers(self) -> int: ...
    def sync_bytes(self, model: nn.Module) -> int: ...
    def coll_device(self) -> torch.device: ...
    def gather(self, obj: Any) -> list[Any] | None: ...
    def any_true(self, flag: bool) -> bool: ...
    def barrier(self) -> None: ...
    def extra_metrics(self) -> dict[str, Any]: ...
    def gns_samples(self) -> Any: ...


@runtime_checkable
class Serves(Protocol):
    """A strategy whose rank serves the others' parameters instead of training (ps)."""

    def serve(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]: ...


@dataclass
class Launched:
    """What a workload's ranks handed back (launch/handoff.py): every rank's record, in rank
    order."""

    ranks: list[RankRecord]


@dataclass
class Ending:
    """How a workload's launch ended: the ranks' records, the error that ended it, or the
    signal that stopped it; ``tb`` the driver's traceback of that error."""

    ranks: list[RankRecord] | None = None
    error: BaseException | None = None
    signame: str | None = None
    tb: str | None = None
    logged: list[int] = field(default_factory=list)  # ranks read from their step logs


@runtime_checkable
class Workload(Protocol):
    """What trains in a run (run/driver.py): the built-in loop or the user's script, narrowed to
    what every workload does. ``cfg`` is the configuration asked for (its key identifies the
    run); ``label`` the run's name when ``--name`` gives none. What only some workloads do is
    one of the protocols below, asked with ``isinstance``."""

    cfg: RunConfig
    label: str
    training_in_children: bool  # the monitor counts its child processes as the run's

    def preflight(self) -> None:
        """Cheap checks, so a typo fails in one line before any worker starts."""

    def monitor_args(self) -> dict[str, Any]:
        """The monitor's devices and process tree."""

    def environment(self) -> contextlib.AbstractContextManager[Any]:
        """The environment the ranks start in."""

    def launch(self, run_dir: Path) -> Launched | None:
        """Train; the ranks' records, or None. Raises as the run ends otherwise."""

    def keep_traceback(self, run_dir: Path, end: Ending) -> None:
        """traceback.txt of a failed run."""


@runtime_checkable
class PreparesFiles(Protocol):
    """A workload whose ranks read files made before they start (the script's boot file)."""

    def prepare(self, run_dir: Path) -> None: ...


@runtime_checkable
class Concludes(Protocol):
    """A workload that knows more of the ending than the driver (the script's own record, a
    launcher's run id): it writes that into ``result`` (and ``end.ranks`` where the ranks left
    them in files) and returns the configuration as it ran (else the one asked for)."""

    def conclude(self, result: RunResult, end: Ending, run_dir: Path) -> RunConfig: ...


@runtime_checkable
class NamesItsErrors(Protocol):
    """A workload that words a failure better than the driver (a script's exit code)."""

    def error_line(self, end: Ending) -> str | None: ...
