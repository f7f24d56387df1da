"""DDP's communication under `wrap` (wrap/ddp_comm.py), in this process on a one-rank gloo group:
the timing hook must not change what DDP computes, must give way to a hook the script
registers itself, and must split the wait on the all-reduce out of backward."""

import time

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

from scaleprobe.measure.comm.hook import CommTimer, step_figures
from scaleprobe.wrap import ddp_comm as C
from scaleprobe.wrap import hooks as H


def test_step_figures_union_and_exposed():
    """Exposed runs from the last launch to the last completion; in flight is the union of
    the intervals (bugs caught: summing overlapping buckets, exposed from the first launch)."""
    assert step_figures([]) is None
    exposed, busy = step_figures([(0.0, 4.0), (1.0, 2.0), (3.0, 7.0), (9.0, 10.0)])
    assert exposed == pytest.approx(1.0)  # last launch 9, last completion 10
    assert busy == pytest.approx(7.0 + 1.0)  # [0, 7] and [9, 10]
    assert step_figures([(2.0, 5.0)]) == (3.0, 3.0)


@pytest.fixture
def group():
    """A one-rank gloo process group, and DDP patched as `wrap` patches it; both undone."""
    if dist.is_initialized():
        pytest.skip("a process group is already up in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    cls = DDP
    saved = (cls.__init__, cls.register_comm_hook, cls._register_builtin_comm_hook)
    timer = CommTimer()
    C.install(timer)
    try:
        yield timer
    finally:
        cls.__init__, cls.register_comm_hook, cls._register_builtin_comm_hook = saved
        dist.destroy_process_group()


def _grads(model, x, y):
    model.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    return [p.grad.clone() for p in model.parameters()]


def test_the_timing_hook_keeps_ddps_gradients_and_sees_every_bucket(group):
    torch.manual_seed(0)
    x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
    bare = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    ddp = DDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)))
    ddp.module.load_state_dict(bare.state_dict())
    assert group.attached == 1 and group.reason is None
    for a, b in zip(_grads(bare, x, y), _grads(ddp, x, y), strict=True):
        torch.testing.assert_close(a, b)  # the average DDP computes without a hook
    got = group.take()
    assert got and all(b >= a and n > 0 for a, b, n in got)  # (launched, completed, bytes)
    assert group.take() == []  # handed over once


def test_a_hook_the_script_registers_runs_inside_the_timing_hook(group):
    """The script's own hook (here one that zeroes the gradients) is what DDP runs; without
    the patch its register_comm_hook call would raise (DDP takes one hook only)."""
    calls = []

    def zero(state, bucket):
        calls.append(state)
        fut = torch.futures.Future()
        fut.set_result(bucket.buffer().mul_(0))
        return fut

    ddp = DDP(nn.Linear(8, 3))
    ddp.register_comm_hook(state="mine", hook=zero)
    grads = _grads(ddp, torch.randn(4, 8), torch.randint(0, 3, (4,)))
    assert calls and calls[0] == "mine"
    assert all(float(g.abs().sum()) == 0.0 for g in grads)
    assert group.take()  # still timed


def test_the_wait_on_the_all_reduce_leaves_backward(group):
    """A comm path that takes a known 250 ms (a script hook that delays its result) lands in
    the step's exposed communication, not in backward (bug caught: the wait counted in
    backward, or exposed taken from the step's first bucket)."""
    delay = 0.25

    def slow(state, bucket):
        fut = torch.futures.Future()
        buf = bucket.buffer()

        def later():
            time.sleep(delay)
            fut.set_result(buf)

        import threading

        threading.Thread(target=later).start()
        return fut

    rec = H.Recorder(1)
    rec.comm = group
    from torch.utils.data import dataloader as dl

    saved = (dl._BaseDataLoaderIter.__next__, dl._BaseDataLoaderIter._next_index,
             dl.DataLoader.__iter__, torch.Tensor.backward)
    rec.install(loss=False)
    try:
        ddp = DDP(nn.Linear(8, 3))
        ddp.register_comm_hook(state=None, hook=slow)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        data = TensorDataset(torch.randn(24, 8), torch.randint(0, 3, (24,)))
        for xb, yb in DataLoader(data, batch_size=8):
            opt.zero_grad()
            nn.functional.cross_entropy(ddp(xb), yb).backward()
            opt.step()
    finally:
        for h in rec._handles:
            h.remove()
        (dl._BaseDataLoaderIter.__next__, dl._BaseDataLoaderIter._next_index,
         dl.DataLoader.__iter__, torch.Tensor.backward) = saved
    assert len(rec.step_times) == 3
    for i in range(3):
        assert rec.comm_exposed[i] >= delay
        assert rec.comm_in_flight[i] >= rec.comm_exposed[i]
        assert rec.phases["backward"][i] < delay  # the wait is not backward's
        parts = sum(rec.phases[p][i] for p in H.STEP_PHASES) + rec.comm_exposed[i]
        assert parts == pytest.approx(rec.step_times[i], rel=1e-9)


def test_in_flight_is_on_the_breakdowns_basis_so_it_is_never_below_the_exposed_wait():
    """Per step the all-reduce is in flight at least as long as the step waits for it; the
    record's two figures keep that order (bug caught: the median of in flight against the
    breakdown's mean of the exposed wait, 3.4 ms < 3.8 ms in a two-process run, when a few
    typical steps waited long)."""
    import time as _t

    from scaleprobe.measure.aggregate import rank_summary
    from scaleprobe.wrap import boot

    rec = H.Recorder(1)
    rec.comm = CommTimer()
    rec.comm.attached = 1
    exposed = [0.001] * 12 + [0.010] * 8
    for i, e in enumerate(exposed):
        rec.step_times.append(0.050 + 0.001 * (i % 5))
        for p in H.STEP_PHASES:
            rec.phases[p].append(0.0)
        rec.phases["backward"][-1] = rec.step_times[-1] - e
        rec.comm_exposed.append(e)
        rec.comm_in_flight.append(e + 0.0002)
        rec.samples.append(8)
        rec.walls.append(_t.time())
    rec.warmup = 1
    raw = boot.rank_record(rec, 0, 2, {})
    c = raw.comm
    flight = sorted(rec.comm_in_flight[1:])
    assert flight[len(flight) // 2] < 0.005  # the median alone would sit below the wait
    bd = rank_summary(raw).breakdown_s
    assert bd.comm > 0.003
    assert c.in_flight_s >= bd.comm
