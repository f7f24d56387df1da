"""User models in `run`: lazy modules get their shapes from one batch of the run's data before
anything counts or wraps their parameters; outputs in a tuple or a dict are read as logits."""

import pytest

from scaleprobe.config.runconfig import build
from scaleprobe.run.workloads import run_config

pytestmark = pytest.mark.timeout(240)


def execute(cfg):
    """The run's record as written (result.json)."""
    return run_config(cfg).to_dict()


LAZY = """
import torch
class Lazy(torch.nn.Module):
    def __init__(self, out):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.LazyLinear(32),
                                        torch.nn.ReLU())
        self.head = torch.nn.LazyLinear(10)
        self.out = out
    def forward(self, x):
        z = self.head(self.body(x))
        if self.out == "dict":
            return {"aux": z.detach() * 0, "logits": z}
        if self.out == "tuple":
            return (z, None)
        return z
def lazy():
    return Lazy("tensor")
def lazy_dict():
    return Lazy("dict")
def lazy_tuple():
    return Lazy("tuple")
def lazy_noting_start_method():
    import multiprocessing, os
    with open(__file__ + f".start-method-{os.environ.get('RANK', '0')}", "w") as fh:
        fh.write(multiprocessing.get_start_method())
    return Lazy("tensor")
def returns_a_string():
    class S(torch.nn.Module):
        def __init__(self):
            super().__init__(); self.l = torch.nn.Linear(1, 1)
        def forward(self, x):
            return "logits"
    return S()
"""


def _run(tmp_path, fn, **kw):
    f = tmp_path / "models.py"
    f.write_text(LAZY)
    cfg = build({"model": f"{f}:{fn}", "steps": 6, "warmup_steps": 1, "loader": "naive",
                 "eval": True, "out": str(tmp_path / "out"), "progress": False, **kw})
    if cfg.dist.nproc > 1:  # its ranks fork from the CLI server, not fresh interpreters
        from tests.conftest import run_config_cli

        return run_config_cli(cfg)
    return execute(cfg)


@pytest.mark.parametrize("fn", ["lazy", "lazy_dict", "lazy_tuple"])
def test_a_lazy_model_trains_and_its_parameters_are_counted(tmp_path, fn):
    """Bugs caught: "Attempted to use an uninitialized parameter" (parameters counted before
    the first forward), the optimizer handed empty parameters (the model never learns), a
    dict or tuple output failing the loss."""
    rec = _run(tmp_path, fn)
    assert rec["status"] == "ok", rec.get("error")
    m = rec["metrics"]
    # digits at the run's image size s: 3 x s x s inputs; LazyLinear(32), LazyLinear(10)
    s = rec["resolved"]["data.image_size"]
    assert m["param_count"] == (3 * s * s * 32 + 32) + (32 * 10 + 10), (m["param_count"], s)
    assert m["loss_last"] < m["loss_first"]  # the optimizer got the real parameters
    assert m["accuracy"] is not None


def test_a_lazy_model_under_ddp_starts_on_every_rank(tmp_path):
    """Bugs caught: DDP refusing the model ("Modules with uninitialized parameters can't be
    used with DistributedDataParallel") on every rank; a launched rank whose loader workers
    start as multiprocessing's spawn (inherited from the launcher), each a fresh interpreter
    importing torch again, where the same rank under torchrun forks them (the platform's
    default, as a fresh interpreter reports it)."""
    import subprocess
    import sys

    rec = _run(tmp_path, "lazy_noting_start_method", strategy="ddp", nproc=2, eval=False)
    assert rec["status"] == "ok", rec.get("error")
    assert rec["batch"]["world_size"] == 2
    fresh = subprocess.run([sys.executable, "-c", "import multiprocessing as m; "
                            "print(m.get_start_method())"], capture_output=True, text=True,
                           check=True).stdout.strip()
    for rank in (0, 1):
        assert (tmp_path / f"models.py.start-method-{rank}").read_text() == fresh, rank


def test_an_output_that_holds_no_tensor_is_a_one_line_error(tmp_path):
    """Bug caught: a traceback from inside the loss for a model returning something that is
    not logits; the user is told what to return."""
    from scaleprobe.core.errors import ConfigError

    with pytest.raises(ConfigError, match="return a tensor of logits"):
        rec = _run(tmp_path, "returns_a_string")
        raise AssertionError(rec.get("status"))
