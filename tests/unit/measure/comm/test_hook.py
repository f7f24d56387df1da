"""DDP's comm hook on one process (measure/comm/hook.py): DDP still buckets its gradients and calls
the hook, so a one-rank run logs when each bucket became ready, which the step model lays a
multi-rank step out from; nothing is moved into the comm phase there."""

import pytest
import torch
from torch import nn

from scaleprobe.measure.comm.hook import BucketLog, CommTimer, HookSplit


class Recorder:
    def __init__(self):
        self.marks, self.moves = [], []

    def start(self):
        pass

    def mark(self, phase):
        self.marks.append(phase)

    def move(self, src, dst, seconds):
        self.moves.append((src, dst, seconds))


def test_bucket_log_ready_fraction_by_hand():
    """Backward from 10.0 to 10.4 s; buckets launched at 10.1 and 10.3 (given unordered):
    ready 0.1 and 0.3 s, fractions 0.25 and 0.75, all-reduces 0.05 and 0.02 s."""
    log = BucketLog()
    log.add(10.0, [(10.3, 10.32, 2000), (10.1, 10.15, 1000)], backward_end=10.4)
    log.add(20.0, [(20.1, 20.15, 1000), (20.3, 20.32, 2000)])  # end unknown: no fraction
    a, b = log.summary()
    assert (a["bytes"], b["bytes"]) == (1000, 2000)
    assert a["ready_s"] == pytest.approx(0.1) and b["ready_fraction"] == pytest.approx(0.75)
    assert a["allreduce_s"] == pytest.approx(0.05) and a["steps"] == 2


def test_one_process_ddp_logs_its_buckets_and_moves_nothing(one_rank_group):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10))
    # 1 MB buckets: the 1 MB of the middle layer and the first layer's 128 KB apart
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1)
    comm = CommTimer()
    comm.attach(ddp)
    assert comm.attached == 1
    rec, log = Recorder(), BucketLog()
    split = HookSplit(rec, comm, log, None, split=False)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    for _ in range(3):
        split.start()
        split.mark("h2d")
        loss = nn.functional.cross_entropy(ddp(x), y)
        split.mark("forward")
        loss.backward()
        split.mark("backward")
    assert rec.moves == []  # one process: nothing crosses a wire, nothing is comm
    got = log.summary()
    total = sum(p.numel() * 4 for p in model.parameters())
    assert len(got) >= 2 and sum(b["bytes"] for b in got) == total
    fracs = [b["ready_fraction"] for b in got]
    assert all(0 <= f <= 1 for f in fracs) and fracs == sorted(fracs)  # in launch order
    # DDP rebuilds its buckets after its first iteration (in the order gradients came):
    # the log keeps the layout of the steps after it
    assert got[0]["steps"] == 2


class TwoBuckets:
    """A comm timer that hands over one step's two all-reduces, as DDP's hook would with a
    model of two gradient buckets."""

    def __init__(self, buckets):
        self.buckets = buckets

    def take(self):
        got, self.buckets = self.buckets, []
        return got


def test_two_buckets_move_only_the_exposed_wait_out_of_backward():
    """Two buckets: the first all-reduce runs 1.00-1.30 s, overlapped with backward; the
    last is launched at 1.50 s, when every gradient is computed, and ends at 1.60 s. The
    exposed wait is 1.60 - 1.50 = 0.10 s; the time in flight is 0.30 + 0.10 = 0.40 s. Catches
    the whole time in flight moved out of backward (a one-bucket model cannot: there the two
    are equal)."""
    rec, flights = Recorder(), []
    clock = iter([0.9, 1.7]).__next__  # backward starts at 0.9 s, ends at 1.7 s
    split = HookSplit(rec, TwoBuckets([]), None, flights, clock=clock)
    split.start()
    split.comm = TwoBuckets([(1.0, 1.3, 4000), (1.5, 1.6, 1000)])
    split.mark("forward")
    split.mark("backward")
    assert len(rec.moves) == 1
    src, dst, moved = rec.moves[0]
    assert (src, dst) == ("backward", "comm")
    assert moved == pytest.approx(0.10)
    assert flights == [pytest.approx(0.40)]
