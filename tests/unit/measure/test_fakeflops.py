"""FLOPs of compiled models on fake tensors (measure/fakeflops.py): the same count as a real
eager step, and nothing the training holds changed."""

import copy

import pytest
import torch
from torch import nn

from scaleprobe.measure.fakeflops import CallCapture, count_step, eager_module
from scaleprobe.measure.flops import count_flops


class Tied(nn.Module):
    """Embedding -> conv-free transformer-ish MLP with a head tied to the embedding, batch norm
    (buffers updated in training) and dropout (draws random numbers)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(32, 16)
        self.mlp = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Dropout(0.5), nn.Linear(64, 16))
        self.bn = nn.BatchNorm1d(16)
        self.head = nn.Linear(16, 32, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, idx):
        x = self.emb(idx)  # (B, T, 16)
        x = x + self.mlp(x)
        x = self.bn(x.transpose(1, 2)).transpose(1, 2)
        return self.head(x)


def _loss(model, x, y):
    out = model(x)
    return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def test_the_fake_count_is_the_eager_steps_and_changes_nothing():
    """Bugs caught: a count of the forward only (backward left out: a third of the figure),
    the tied head counted as two weights' gradients (or the tie broken), batch-norm statistics
    or the dropout generator advanced by the count, gradients left on the real parameters."""
    torch.manual_seed(0)
    model = Tied()
    x, y = torch.randint(0, 32, (4, 8)), torch.randint(0, 32, (4, 8))
    eager = count_flops(lambda: _loss(model, x, y).backward())
    model.zero_grad(set_to_none=True)
    state = copy.deepcopy(model.state_dict())
    rng = torch.get_rng_state()
    compiled = torch.compile(model, backend="eager")
    got, why = count_step(compiled, _loss, x, y)
    assert why is None and got == eager > 0
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert torch.equal(rng, torch.get_rng_state())
    assert all(p.grad is None for p in model.parameters())
    assert model.head.weight is model.emb.weight and model.training


def test_the_captured_calls_of_a_compiled_module_are_counted():
    """wrap's capture: fake copies of each call's inputs (keyword ones too), counted later with
    ones as the outputs' gradient: two calls of a Linear(4, 3) at batch 8 and 2 are
    (2 x 4 x 3) x (8 + 2) forward and as much for the weight's gradient."""
    model = nn.Linear(4, 3)
    cap = CallCapture(torch.compile(model, backend="eager"))
    cap.add((torch.randn(8, 4),), {})
    cap.add((), {"input": torch.randn(2, 4)})
    assert cap.count() == (2 * 2 * 4 * 3 * (8 + 2), None)
    assert CallCapture(model).count() == (None, None)  # not called in the counted step


def test_wrappers_come_off_down_to_the_module():
    m = nn.Linear(2, 2)
    assert eager_module(torch.compile(m, backend="eager")) is m
    assert eager_module(nn.DataParallel(m)) is m
    assert eager_module(m) is m


def test_a_model_that_needs_real_values_is_not_counted_with_the_reason():
    """Data-dependent shapes (a boolean mask) cannot be had from fake tensors."""

    class Masked(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(x[x.sum(1) > 0])

    got, why = count_step(Masked(), lambda m, x, y: m(x).sum(), torch.randn(8, 4), None)
    assert got is None and why.startswith("not counted: the model does not run on fake tensors")


@pytest.mark.parametrize("amp", [False, True])
def test_autocast_does_not_change_the_count(amp):
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    x, y = torch.randn(4, 8), torch.randint(0, 4, (4,))
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if amp else None
    got, _ = count_step(model, lambda m, a, b: nn.functional.cross_entropy(m(a).float(), b),
                        x, y, ctx)
    assert got == 4 * 2 * (8 * 16 + 16 * 4) * 2 + 4 * 2 * 16 * 4


def test_a_module_compiled_in_place_is_counted_eagerly_and_stays_compiled():
    """``module.compile()``: calling the module runs its compiled call, which a frame under a
    dispatch mode would not compile; the count runs its eager call and puts the compiled one
    back."""
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    x, y = torch.randn(4, 8), torch.randint(0, 4, (4,))
    eager = count_flops(lambda: nn.functional.cross_entropy(model(x), y).backward())
    model.compile(backend="eager")
    compiled_call = model._compiled_call_impl
    got, why = count_step(model, lambda m, a, b: nn.functional.cross_entropy(m(a), b), x, y)
    assert why is None and got == eager
    assert model._compiled_call_impl is compiled_call


def test_a_gpts_attention_is_counted_on_fake_tensors_as_in_the_eager_step():
    """A compiled GPT counts what the eager step counts, attention included: the CPU's SDPA
    kernel has no formula in PyTorch's counter, so a fake count without the eager count's
    formulas (measure/flops.flop_counter) misses 12 L d T per token; the total is also
    checked against 6N + 12 L d T (tied head, full T x T scores)."""
    from scaleprobe.features.lmspec import GPTShape
    from scaleprobe.models.gpt import GPT, matmul_params

    torch.manual_seed(0)
    shape = GPTShape(2, 32, 2, 16, 64)
    model = GPT(shape, 64)
    x, y = torch.randint(0, 64, (3, 16)), torch.randint(0, 64, (3, 16))
    eager = count_flops(lambda: _loss(model, x, y).backward())
    model.zero_grad(set_to_none=True)
    got, why = count_step(torch.compile(model, backend="eager"), _loss, x, y)
    assert why is None and got == eager
    tokens = 3 * 16
    assert got == tokens * (6 * matmul_params(model) + 12 * 2 * 32 * 16)


@pytest.mark.timeout(120)
def test_a_sharded_compiled_model_is_counted_as_the_plain_one_and_keeps_its_hooks():
    """--strategy fsdp --compile: FSDP2's forward hooks all-gather the real shards, which fake
    tensors cannot feed (the count was "not counted"); with them off for the count, the
    sharded model counts what the plain one does, and its hooks are back after (training the
    sharded model still matches the plain one)."""
    import torch.distributed as dist

    from scaleprobe.config import runconfig as C
    from scaleprobe.strategies.fsdp import FSDP

    if dist.is_initialized():
        pytest.skip("a process group is already up in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        plain = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        sharded = copy.deepcopy(plain)
        cfg = C.build({"strategy": "fsdp", "nproc": 1})
        s = FSDP(cfg.dist, torch.device("cpu"))
        s.configure(cfg)
        model = s.wrap(sharded)
        x, y = torch.randn(6, 4), torch.randint(0, 2, (6,))
        loss = lambda m, a, b: nn.functional.cross_entropy(m(a), b)  # noqa: E731
        eager = count_flops(lambda: loss(plain, x, y).backward())
        got, why = count_step(torch.compile(model, backend="eager"), loss, x, y)
        assert why is None and got == eager > 0
        hooks = [len(m._forward_pre_hooks) for m in model.modules()]
        for m in (plain, model):
            m.zero_grad(set_to_none=True)
            opt = torch.optim.SGD(m.parameters(), lr=0.1)
            loss(m, x, y).backward()
            opt.step()
        for a, b in zip(plain.parameters(), model.parameters(), strict=True):
            torch.testing.assert_close(a, b.full_tensor())
        assert hooks == [len(m._forward_pre_hooks) for m in model.modules()] and sum(hooks) > 0
    finally:
        dist.destroy_process_group()
