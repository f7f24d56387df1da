"""A user's model builder (``--model FILE.py:FUNC``) that returns nothing to train, and a
launched rank's user error: one line, exit 2 (models/build.py, run/driver.py)."""

import pytest
import torch

from scaleprobe.core import config as C
from scaleprobe.core.errors import ConfigError
from scaleprobe.core.results import RunResult
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
    """Issue 41: torch's "element 0 of tensors does not require grad" (with or without --gns)
    or DDP's "not needed when a module doesn't have any parameter", exit 1."""
    f = tmp_path / "frozen.py"
    f.write_text(FROZEN)
    with pytest.raises(ConfigError, match=f"returned a model with nothing to train \\({what}"):
        build_model(f"{f}:{fn}")
    assert isinstance(build_model("linear", 10, 8), torch.nn.Module)  # built-ins untouched


@pytest.mark.parametrize("prefix", ["", "scaleprobe.core.errors."])
def test_a_launched_ranks_user_error_is_exit_2(tmp_path, prefix):
    """A DDP rank's ConfigError reaches the launcher with its module path; it was recorded
    as a failed run, exit 1, "rank 1: scaleprobe.core.errors.ConfigError: ..."."""
    from scaleprobe.run import driver

    cfg = C.build({"out": str(tmp_path)})
    result = RunResult.from_dict({"kind": "run", "run_id": "r", "status": "running"})
    (tmp_path / "r").mkdir()
    with pytest.raises(ConfigError, match="^model builder x returned a model") as e:
        driver._reraise_user_error(f"{prefix}ConfigError: model builder x returned a model",
                                   result, tmp_path / "r", cfg)
    assert e.value.exit_code == 2 and result.status == "failed"
