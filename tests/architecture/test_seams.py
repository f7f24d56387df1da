"""The seams hold (src/scaleprobe/protocols.py): every built-in task, strategy and workload is
what the training loop and the run driver ask of it. mypy checks the assignments below
(this file is in pyproject.toml's [tool.mypy] files: a method missing or with another
signature fails `make lint` and tests/architecture/test_layers.py); the tests check the same at run
time, and that the optional hooks are asked of the tasks that have them only."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from scaleprobe import protocols as P
from scaleprobe.config.sections import RunConfig
from scaleprobe.run.builtin import BuiltinTraining, UnderLauncher
from scaleprobe.run.script import UserScript
from scaleprobe.strategies.ddp import DDP
from scaleprobe.strategies.dp import DataParallelTowers
from scaleprobe.strategies.fsdp import FSDP
from scaleprobe.strategies.localsgd import LocalSGD
from scaleprobe.strategies.ps import ParameterServer
from scaleprobe.strategies.single import Single
from scaleprobe.tasks.classification import Classification
from scaleprobe.tasks.detection import Detection
from scaleprobe.tasks.face import FaceEmbedding
from scaleprobe.tasks.lm import LanguageModel

# checked by mypy: each class where its protocol is expected
STRATEGIES: tuple[type[P.Strategy], ...] = (Single, DataParallelTowers, DDP, ParameterServer,
                                             LocalSGD, FSDP)
TASKS: tuple[type[P.Task], ...] = (Classification, Detection, FaceEmbedding, LanguageModel)
WORKLOADS: tuple[type[P.Workload], ...] = (BuiltinTraining, UnderLauncher, UserScript)


def test_every_strategy_is_a_strategy() -> None:
    from scaleprobe.strategies import CLASSES

    names = {cls for _, cls in CLASSES.values()}
    assert names == {c.__name__ for c in STRATEGIES}  # a new strategy is listed above too
    for cls in STRATEGIES:
        s = cls.__new__(cls)  # the members are class attributes and methods
        assert isinstance(s, P.Strategy), cls


@pytest.mark.parametrize("name", ["classification", "face", "detection", "lm"])
def test_every_task_is_a_task_and_its_optional_hooks_are_its_own(name: str) -> None:
    from scaleprobe.tasks import TASKS as REGISTRY
    from scaleprobe.tasks import build_task

    task = build_task(replace(RunConfig().task, task=name), 10)
    assert isinstance(task, P.Task)
    assert type(task) in TASKS and len(REGISTRY.names()) == len(TASKS)
    # detection builds its own detectors and moves boxes with the image; lm checks a user's
    # model and has no image transforms; the others take the classification ones
    assert isinstance(task, P.OwnModel) == (name == "detection")
    assert isinstance(task, P.OwnTransforms) == (name in ("detection", "lm"))
    assert isinstance(task, P.ChecksModel) == (name == "lm")


def test_the_workloads_and_their_optional_parts(tmp_path: Path) -> None:
    cfg = RunConfig()
    builtin = BuiltinTraining(cfg)
    assert isinstance(builtin, P.Workload)
    # the built-in loop prepares no files, knows nothing of the ending the driver does not,
    # and words no error itself: the driver's defaults
    assert not isinstance(builtin, P.PreparesFiles | P.Concludes | P.NamesItsErrors)
    for cls in (UnderLauncher, UserScript):
        assert issubclass(cls, P.Concludes), cls
    assert issubclass(UserScript, P.PreparesFiles) and issubclass(UserScript, P.NamesItsErrors)
