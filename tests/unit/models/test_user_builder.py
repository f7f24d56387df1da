"""A user's model builder (``--model FILE.py:FUNC``) that returns nothing to train, and a
launched rank's user error: one line, exit 2 (models/build.py, run/driver.py)."""

import pytest
import torch

from scaleprobe.config import runconfig as C
from scaleprobe.core.errors import ConfigError
from scaleprobe.core.result_model import RunResult
from scaleprobe.models.build import build_model

FROZEN = """
import torch
def build(num_classes):
    m = torch.nn.Linear(4, num_classes)
    m.requires_grad_(False)
    return m
def empty():
    return torch.nn.Flatten()
"""


@pytest.mark.parametrize("fn,what", [("build", "every parameter is frozen"),
                                     ("empty", "it has no parameters")])
def test_a_model_with_nothing_to_train_is_one_line(tmp_path, fn, what):
    """Bug caught: torch's "element 0 of tensors does not require grad" (with or without --gns)
    or DDP's "not needed when a module doesn't have any parameter", exit 1."""
    f = tmp_path / "frozen.py"
    f.write_text(FROZEN)
    with pytest.raises(ConfigError, match=f"returned a model with nothing to train \\({what}"):
        build_model(f"{f}:{fn}")
    assert isinstance(build_model("linear", 10, 8), torch.nn.Module)  # built-ins untouched


@pytest.mark.parametrize("user_error", ["ConfigError", "DataError", None])
def test_a_launched_ranks_user_error_is_exit_2(tmp_path, user_error):
    """A DDP rank's ConfigError reaches the launcher as the rank's error record: raised again
    as the same one-line error, exit 2 (it was recorded as a failed run, exit 1, "rank 1:
    scaleprobe.core.errors.ConfigError: ..."); a rank's other error stays the run's failure."""
    from scaleprobe.core.errors import DataError
    from scaleprobe.launch.failures import WorkerFailure
    from scaleprobe.measure.heartbeat import RankError
    from scaleprobe.run import driver

    cfg = C.build({"out": str(tmp_path)})
    result = RunResult.from_dict({"kind": "run", "run_id": "r", "status": "running"})
    (tmp_path / "r").mkdir()
    line = f"scaleprobe.core.errors.{user_error or 'ValueError'}: model builder x returned a model"
    own = RankError(line, user_error, "model builder x returned a model" if user_error else None)
    failure = WorkerFailure(1, line, error=own)
    if user_error is None:  # not the user's: the driver records the failure as it is
        assert driver._reraise_user_error(failure, result, tmp_path / "r", cfg) is None
        return
    cls = {"ConfigError": ConfigError, "DataError": DataError}[user_error]
    with pytest.raises(cls, match="^model builder x returned a model$") as e:
        driver._reraise_user_error(failure, result, tmp_path / "r", cfg)
    assert e.value.exit_code == 2 and result.status == "failed"
