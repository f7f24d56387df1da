"""--strategy fsdp on one process: the sharding rule, the timed collectives (PyTorch's own,
called unchanged), and the strategy's wrap / no_sync / record in a one-rank gloo group."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

from scaleprobe.config import runconfig as C
from scaleprobe.core.errors import ConfigError
from scaleprobe.strategies.fsdp import RULE_BLOCKS, RULE_CHILDREN, shard_units
from scaleprobe.strategies.fsdp_comm import WaitClock, timed_comms

pytestmark = pytest.mark.timeout(60)


class Blocks(nn.Module):
    """A GPT-shaped toy: embedding, blocks in a ModuleList, head."""

    def __init__(self, n: int = 3, d: int = 8) -> None:
        super().__init__()
        self.embed = nn.Linear(4, d)
        self.blocks = nn.ModuleList([nn.Linear(d, d) for _ in range(n)])
        self.head = nn.Linear(d, 2)

    def forward(self, x):
        x = self.embed(x)
        for b in self.blocks:
            x = torch.relu(b(x))
        return self.head(x)


class Mixed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(4, 8)
        self.act = nn.ReLU()  # no parameters: not a unit
        self.stages = nn.ModuleList([nn.Linear(8, 8), nn.Identity(), nn.Linear(8, 8)])
        self.extra = nn.ModuleDict({"a": nn.Linear(8, 2)})


def test_a_model_with_blocks_is_sharded_block_by_block():
    m = Blocks(3)
    units, rule = shard_units(m)
    assert rule == RULE_BLOCKS
    assert units == list(m.blocks)  # embed and head stay with the root


def test_any_other_model_by_its_top_level_children_that_hold_parameters():
    m = Mixed()
    units, rule = shard_units(m)
    assert rule == RULE_CHILDREN
    # a ModuleList / ModuleDict contributes its items that hold parameters, never itself
    # (it has no forward, so FSDP's gather before it would never run)
    assert units == [m.stem, m.stages[0], m.stages[2], m.extra["a"]]
    from scaleprobe.models.small import DigitsCNN

    cnn = DigitsCNN()
    assert shard_units(cnn)[0] == [cnn.features, cnn.head]


def test_fsdp_with_fp16_is_refused_with_one_line():
    with pytest.raises(ConfigError, match="fsdp with --amp fp16 is not supported.*bf16"):
        C.build({"strategy": "fsdp", "nproc": 2, "amp": "fp16"})


def test_the_timed_collectives_are_pytorchs_own_and_count_their_time(one_rank_group):
    """Bugs caught: a wrapper that skips the collective (output left empty), times nothing,
    or books a reduce-scatter as an all-gather."""
    t = iter([1.0, 1.25, 5.0, 5.5])
    clock = WaitClock(clock=lambda: next(t))
    ag, rs = timed_comms(clock)
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import (
        DefaultAllGather,
        DefaultReduceScatter,
    )

    assert isinstance(ag, DefaultAllGather) and isinstance(rs, DefaultReduceScatter)
    src, out = torch.arange(4.0), torch.zeros(4)
    assert ag(out, src, dist.group.WORLD) is None  # synchronous, as FSDP calls it on the CPU
    assert torch.equal(out, src)
    red = torch.zeros(4)
    rs(red, torch.arange(4.0) * 2, dist.group.WORLD, dist.ReduceOp.SUM)
    assert torch.equal(red, torch.arange(4.0) * 2)
    assert clock.take() == pytest.approx(0.25 + 0.5)
    assert clock.take() == 0.0  # drained
    clock.begin_step()
    assert clock.step_calls == {"all_gather": 1, "reduce_scatter": 1}


def _strategy(**over):
    from scaleprobe.strategies.fsdp import FSDP

    cfg = C.build({"strategy": "fsdp", "nproc": 1, **over})
    s = FSDP(cfg.dist, torch.device("cpu"))
    s.configure(cfg)
    return s


def test_wrap_shards_the_units_and_keeps_training_equal_to_plain(one_rank_group):
    """One rank: FSDP's sharded step gives the plain model's parameters; the units are the
    rule's plus the root; no_sync turns the gradient reduction off and back on."""
    from torch.distributed.fsdp import FSDPModule

    torch.manual_seed(0)
    plain = Blocks(3)
    sharded = Blocks(3)
    sharded.load_state_dict(plain.state_dict())
    s = _strategy()
    model = s.wrap(sharded)
    assert s.unwrap(model) is model and s.units == 4 and s.rule == RULE_BLOCKS
    assert sum(isinstance(m, FSDPModule) for m in model.modules()) == 4
    x, y = torch.randn(6, 4), torch.randint(0, 2, (6,))
    for m in (plain, model):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        nn.functional.cross_entropy(m(x), y).backward()
        opt.step()
    for a, b in zip(plain.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(a, b.full_tensor())
    groups = [g for m in model.modules() if isinstance(m, FSDPModule)
              for g in m._get_fsdp_state()._fsdp_param_groups]
    with s.no_sync(model):
        assert not any(g.reduce_grads for g in groups)
    assert all(g.reduce_grads for g in groups)
    assert s.evaluates and s.phases_unseen() == {}


class Norms(nn.Module):
    """A conv net with BatchNorm nested in a Sequential, a BatchNorm without affine
    parameters, and a LayerNorm (no buffers: it follows the policy)."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(),
                                      nn.BatchNorm2d(4, affine=False), nn.Flatten())
        self.norm = nn.LayerNorm(4 * 4 * 4)
        self.head = nn.Linear(4 * 4 * 4, 2)

    def forward(self, x):
        return self.head(self.norm(self.features(x)))


def test_fp32_units_are_the_modules_with_parameters_and_float_buffers():
    from scaleprobe.strategies.fsdp import fp32_units, keeps_fp32

    m = Norms()
    assert fp32_units(m) == [m.features[1]]  # affine=False holds no parameters to cast
    assert not keeps_fp32(m.norm) and not keeps_fp32(m.head)
    assert fp32_units(Blocks()) == []


@pytest.mark.filterwarnings("ignore:.*returned a view tensor")  # Flatten ends features
@pytest.mark.parametrize("autocast", [True, False])
def test_bf16_keeps_batchnorm_in_fp32_beside_its_running_stats(one_rank_group, autocast):
    """--amp bf16 under FSDP2 on the CPU (the CUDA code path): the convolution and the head
    compute on bf16 weights, BatchNorm on fp32 ones beside its fp32 running stats (cast to
    bf16 it fails: "expected scalar type BFloat16 but found Float"), its output handed on in
    bf16; the sharded master weights and their gradients stay fp32. With autocast off too:
    the unit's output cast keeps the next layer's input in its weights' dtype."""
    import contextlib

    torch.manual_seed(0)
    model = Norms()
    s = _strategy(amp="bf16")
    model = s.wrap(model)
    # the BatchNorm apart, then features and head (top-level children), LayerNorm, the root
    assert s.fp32_units == 1 and s.units == 1 + 3 + 1
    seen = {}

    def before(name):  # after FSDP's own pre-forward: the weights it gathered
        def hook(mod, args):
            seen[name] = (args[0].dtype, mod.weight.dtype)
        return hook

    def after(name):
        def hook(mod, args, out):
            seen[name] += (out.dtype,)
        return hook

    for name, mod in [("conv", model.features[0]), ("bn", model.features[1]),
                      ("head", model.head)]:
        mod.register_forward_pre_hook(before(name))
        mod.register_forward_hook(after(name))
    x, y = torch.randn(6, 3, 6, 6), torch.randint(0, 2, (6,))
    before = model.features[1].running_mean.clone()
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with ctx:
        loss = nn.functional.cross_entropy(model(x).float(), y)
    loss.backward()
    assert seen["conv"][1] == seen["head"][1] == torch.bfloat16
    assert seen["bn"] == (torch.float32, torch.float32, torch.bfloat16)
    bn = model.features[1]
    assert bn.running_mean.dtype == torch.float32 and not torch.equal(bn.running_mean, before)
    for p in model.parameters():
        assert p.dtype == torch.float32 and p.grad is not None and p.grad.dtype == torch.float32
    model.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert model(x).shape == (6, 2)  # evaluation: running stats, same units
    assert s.comm_record(None).extra["fp32_units"] == 1


def test_the_comm_record_keeps_the_calibration_as_a_cross_check_only(one_rank_group):
    """The calibration's difference never becomes exposed_s (which the breakdown would carve
    out of backward); it is kept with its own interval."""
    s = _strategy()
    s.world = 2  # as on two ranks: the cross-check is kept
    cal = {"sync_step_s": 0.30, "no_sync_step_s": 0.20, "sync_cost_s": 0.1, "exposed_s": 0.1,
           "samples": {"sync": [9.0, 0.30, 0.31, 0.29], "no_sync": [9.0, 0.20, 0.22, 0.20]}}
    rec = s.comm_record(cal)
    assert rec.exposed_s is None and rec.in_step is True
    cc = rec.cross_check
    # pairs after the first: differences 0.10, 0.09, 0.09 (paired, not medians subtracted)
    assert cc["pairs"] == 3 and cc["difference_s"] == pytest.approx(0.09)
    assert cc["interval_s"] == pytest.approx([0.09, 0.10]) and cc["resolved"] is True


def test_fully_shard_from_torch_2_6_then_the_older_path_then_a_one_line_error(monkeypatch):
    import sys
    import types

    from torch.distributed.fsdp import fully_shard

    from scaleprobe.strategies.fsdp import fsdp_api

    assert fsdp_api()[0] is fully_shard
    monkeypatch.setitem(sys.modules, "torch.distributed.fsdp", None)  # as before torch 2.6
    old = types.ModuleType("torch.distributed._composable.fsdp")  # where 2.4-2.5 had it
    old.fully_shard, old.MixedPrecisionPolicy, old.FSDPModule = "fs", "mp", "mod"
    monkeypatch.setitem(sys.modules, "torch.distributed._composable.fsdp", old)
    assert fsdp_api() == ("fs", "mp", "mod")
    monkeypatch.setitem(sys.modules, "torch.distributed._composable.fsdp", None)  # before 2.4
    with pytest.raises(ConfigError, match=r"--strategy fsdp needs PyTorch's FSDP2 fully_shard "
                                          r"\(torch 2.4 or later\); this is torch "):
        fsdp_api()


@pytest.mark.parametrize("model", ["digits_cnn", "examples/models/mixer.py:build"])
def test_a_unit_returning_a_view_warns_only_for_a_model_not_scaleprobes_own(one_rank_group, model):
    """`run --strategy fsdp --nproc 2` (a README command) printed torch's warning that
    digits_cnn's features unit returns a view (its Flatten), twice on every rank. Bug caught:
    torch's words about an in-place op scaleprobe's own models never do. A user's model keeps
    the warning: its next unit may do one."""
    import warnings

    from scaleprobe.models.small import DigitsCNN

    s = _strategy(model=model)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        wrapped = s.wrap(DigitsCNN(10))
        wrapped(torch.randn(2, 3, 8, 8)).sum().backward()
    views = [w for w in seen if "returned a view tensor" in str(w.message)]
    assert bool(views) == (model != "digits_cnn"), [str(w.message)[:80] for w in seen]
