"""measure/memstate.py on hand-built models: the state facts are exact counts, the probe's
activation bytes match what the layers save for backward."""

import contextlib
from types import SimpleNamespace

import torch
from torch import nn

from scaleprobe.measure.memstate import model_facts, probe_steps


def _units(model):
    return [model[0], model[2]], "children"


def _parts(model, opt):
    def step(o, scaler):
        o.step()

    return SimpleNamespace(
        device=torch.device("cpu"), autocast=contextlib.nullcontext(), model=model,
        optimizer=opt, task=SimpleNamespace(
            forward_loss=lambda m, x, y: nn.functional.cross_entropy(m(x), y)),
        scaler=SimpleNamespace(scale=lambda loss: loss),
        strategy=SimpleNamespace(optimizer_step=step))


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(100, 200), nn.ReLU(), nn.Linear(200, 10))


def test_adamw_facts_are_exact_counts():
    m = _model()
    opt = torch.optim.AdamW(m.parameters())
    m(torch.randn(4, 100)).sum().backward()
    opt.step()
    f = model_facts(m, opt, _units)
    n = 100 * 200 + 200 + 200 * 10 + 10
    assert f["param_count"] == n and f["param_numel_by_dtype"] == {"float32": n}
    assert f["optimizer"] == "AdamW" and f["optimizer_states_per_param"] == 2
    assert f["optimizer_bytes_per_param"] == 8.0  # exp_avg + exp_avg_sq, fp32
    assert f["optimizer_scalar_bytes"] == 4 * 4  # one fp32 ``step`` per parameter tensor
    assert f["largest_unit_bytes"] == 4 * (100 * 200 + 200)
    assert f["second_unit_bytes"] == 4 * (200 * 10 + 10)
    assert f["root_unit_bytes"] == 0  # both Linears are units: the root holds nothing
    # every unit in the rule's order, the root last: one all-gather each in an FSDP step
    assert f["unit_bytes"] == [4 * (100 * 200 + 200), 4 * (200 * 10 + 10), 0]
    assert f["master_bytes_per_param"] == 0.0
    assert f["buffer_bytes"] == []  # no buffers: nothing for DDP to broadcast


def test_buffers_are_grouped_by_dtype_as_ddp_broadcasts_them():
    """BatchNorm's running mean and variance (fp32) and its count (int64), and a bool mask:
    one broadcast per dtype, in the order the dtypes first occur."""
    m = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2), nn.BatchNorm1d(2))
    m.register_buffer("mask", torch.ones(5, dtype=torch.bool))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    f = model_facts(m, opt, lambda model: ([model[0], model[2]], "children"))
    assert f["buffer_bytes"] == [5, 4 * (8 + 8 + 2 + 2), 8 * 2]


def test_sgd_momentum_one_state_and_plain_sgd_none():
    m = _model()
    for momentum, states in ((0.9, 1), (0.0, 0)):
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=momentum)
        m(torch.randn(4, 100)).sum().backward()
        opt.step()
        assert model_facts(m, opt, _units)["optimizer_states_per_param"] == states


def test_probe_activation_bytes_per_sample_match_the_saved_tensors():
    # per sample, at the peak (the ReLU's backward): its saved output (200 fp32, also the
    # second Linear's input), the gradient arriving at it and the one leaving it (200 each);
    # the 10-wide softmax and its gradient are freed by then, the first Linear's input is the
    # batch itself, live before the step. 600 x 4 = 2400 bytes, within 10%
    m = _model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    p = _parts(m, opt)
    x, y = torch.randn(256, 100), torch.randint(0, 10, (256,))
    probe_steps(p, (x, y))  # warm
    got = probe_steps(p, (x, y))
    assert got["batch_sizes"] == [256, 128, 64] and got["device"] == "cpu"
    assert got["probe_s"] > 0  # its cost, for the record
    fb = got["fwd_bwd_peak_bytes"]
    per_sample = (fb[0] - fb[1]) / 128
    assert abs(per_sample / 2400 - 1) < 0.10, per_sample
    grads = 4 * (100 * 200 + 200 + 200 * 10 + 10)
    assert fb[1] >= grads  # the gradients are made in backward: inside the peak


def test_the_cpu_probe_writes_nothing_to_the_runs_stderr(capfd):
    """The profiler's native library logged 'profiler_start', 'profiler_stop' and, without a
    GPU, 'ERROR ... gpuGetDeviceCount failed' on every run's stderr; they are kept out, and
    what Python writes to stderr afterwards still arrives."""
    import sys

    import torch

    from scaleprobe.measure import memstate

    x = torch.ones(256, 256)
    peak = memstate._cpu_peak(lambda: (x @ x).sum().item())
    print("after the probe", file=sys.stderr)
    err = capfd.readouterr().err
    assert peak >= 256 * 256 * 4
    assert "profiler_start" not in err and "gpuGetDeviceCount" not in err
    assert "after the probe" in err
