"""The squared gradient norms measured in the step (measure/gns_probe.py): the two halves of
one process's batch, and the tap on DDP's comm hook, against gradients computed directly."""

import contextlib
import math
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from torch import nn

from scaleprobe.features import gns
from scaleprobe.measure.comm.hook import CommTimer
from scaleprobe.measure.gns_probe import HalfSteps, NormTap, StepNorms, TapSteps

D, S2 = 4, 1.0
DELTA = torch.tensor([0.6, -0.5, 0.4, 0.3])


class _MSE:
    @staticmethod
    def forward_loss(model, x, y):
        return 0.5 * (model(x).squeeze(-1) - y).square().mean()


class _Marks:
    def __init__(self):
        self.marks = []

    def start(self):
        self.marks.append("start")

    def mark(self, phase):
        self.marks.append(phase)


def _parts(model):
    return SimpleNamespace(model=model, task=_MSE(), autocast=contextlib.nullcontext(),
                           scaler=SimpleNamespace(scale=lambda t: t),
                           strategy=SimpleNamespace(no_sync=lambda m: contextlib.nullcontext()))


def _batch(g, b):
    x = torch.randn(b, D, generator=g)
    return x, x @ (torch.zeros(D) - DELTA) + torch.randn(b, generator=g) * math.sqrt(S2)


def test_halves_give_the_whole_batch_gradient_and_each_halfs_norm():
    torch.manual_seed(0)
    model = nn.Linear(D, 1, bias=False)
    probe = HalfSteps(model, 8, first_step=0)
    x, y = _batch(torch.Generator().manual_seed(1), 8)
    tm = _Marks()
    loss = probe.step(_parts(model), x, y, tm, timed=True)
    assert tm.marks == ["forward", "backward", "forward", "backward"]
    got = model.weight.grad.clone()
    # the whole batch's mean gradient, and each half's own
    model.weight.grad = None
    whole = _MSE.forward_loss(model, x, y)
    whole.backward()
    assert torch.allclose(got, model.weight.grad, atol=1e-6)
    assert float(loss) == pytest.approx(float(whole.detach()), rel=1e-6)
    halves = []
    for sl in (slice(0, 4), slice(4, 8)):
        model.weight.grad = None
        _MSE.forward_loss(model, x[sl], y[sl]).backward()
        halves.append(float(model.weight.grad.square().sum()))
    rec = probe.log.record()
    assert rec.small_sq[0] == pytest.approx(sum(halves) / 2, rel=1e-5)
    assert rec.big_sq[0] == pytest.approx(float(got.square().sum()), rel=1e-5)
    assert (rec.b_small, rec.b_big, rec.first_step) == (4, 8, 0)
    probe.close()


def test_untimed_steps_record_nothing_and_the_estimate_converges():
    """At a fixed w (no optimizer step), the measured B_noise over many steps is the
    problem's tr(Sigma) / |G|^2 within 12%."""
    model = nn.Linear(D, 1, bias=False)
    with torch.no_grad():
        model.weight.zero_()  # w - w* = DELTA (y was made with w* = -DELTA)
    probe = HalfSteps(model, 8, first_step=3)
    g = torch.Generator().manual_seed(2)
    p = _parts(model)
    probe.step(p, *_batch(g, 8), _Marks(), timed=False)
    assert probe.log.small == []
    for _ in range(1500):
        model.weight.grad = None
        probe.step(p, *_batch(g, 8), _Marks(), timed=True)
    out, why = gns.summarize([probe.log.record()], 8)
    truth = ((D + 1) * float(DELTA.square().sum()) + D * S2) / float(DELTA.square().sum())
    assert out.b_simple == pytest.approx(truth, rel=0.12)
    assert out.method == "micro_batches" and out.steps == 1500


@pytest.fixture
def group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_tap_sees_the_gradient_and_sends_it_unchanged(group):
    """One process: the reduced gradient is the local one, so the tap's two norms agree with
    each other and with the gradient; and the gradient is what DDP computes without a tap."""
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(D, 16), nn.ReLU(), nn.Linear(16, 1))
    twin = nn.Sequential(nn.Linear(D, 16), nn.ReLU(), nn.Linear(16, 1))
    twin.load_state_dict(base.state_dict())
    tapped = nn.parallel.DistributedDataParallel(base)
    plain = nn.parallel.DistributedDataParallel(twin)
    timer = CommTimer()
    timer.tap = NormTap()
    tapped.register_comm_hook(state=None, hook=timer.hook_for(tapped))
    log = StepNorms("ddp_hook", 8, 8, 0)
    steps = TapSteps(_Marks(), timer.tap, log)
    x, y = _batch(torch.Generator().manual_seed(4), 8)
    steps.start()
    _MSE.forward_loss(tapped, x, y).backward()
    steps.mark("backward")
    _MSE.forward_loss(plain, x, y).backward()
    for a, b in zip(base.parameters(), twin.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad)
    want = sum(float(q.grad.square().sum()) for q in base.parameters())
    rec = log.record()
    assert len(timer.take()) >= 1  # the buckets were timed as before
    assert rec.small_sq == [pytest.approx(want, rel=1e-5)]
    assert rec.big_sq == [pytest.approx(want, rel=1e-5)]
