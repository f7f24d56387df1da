"""The training state a rank holds, in exact bytes for models of known size."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from scaleprobe.core.rank_record import RankRecord
from scaleprobe.measure.held import held_bytes, local_bytes, summarize_held

pytestmark = pytest.mark.timeout(60)

# Linear(10, 5) + Linear(5, 3): 10*5 + 5 + 5*3 + 3 = 73 parameters in 4 tensors, fp32
PARAMS = 73
FP32 = 4


def _model_and_step(opt_name: str):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(10, 5), nn.ReLU(), nn.Linear(5, 3))
    opt = (torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) if opt_name == "sgd"
           else torch.optim.AdamW(m.parameters(), lr=0.1))
    m(torch.randn(4, 10)).sum().backward()
    opt.step()
    return m, opt


def test_sgd_with_momentum_holds_one_buffer_per_parameter():
    m, opt = _model_and_step("sgd")
    assert held_bytes(m, opt) == {"params": PARAMS * FP32, "grads": PARAMS * FP32,
                                  "optimizer": PARAMS * FP32}


def test_adamw_holds_two_moments_and_a_step_count_per_tensor():
    m, opt = _model_and_step("adamw")
    # exp_avg + exp_avg_sq per parameter, and one float32 step scalar per parameter tensor
    assert held_bytes(m, opt)["optimizer"] == 2 * PARAMS * FP32 + 4 * FP32


def test_gradients_not_there_count_zero_and_tied_parameters_once():
    emb = nn.Embedding(7, 3)
    head = nn.Linear(3, 7, bias=False)
    head.weight = emb.weight  # tied: one tensor
    m = nn.ModuleDict({"emb": emb, "head": head})
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    assert held_bytes(m, opt) == {"params": 21 * FP32, "grads": 0, "optimizer": 0}


def test_a_sharded_tensor_counts_its_local_part():
    class Shard:  # a DTensor's interface: to_local() gives this rank's part
        def to_local(self):
            return torch.zeros(3, 2, dtype=torch.bfloat16)

    assert local_bytes(Shard()) == 6 * 2
    assert local_bytes(torch.zeros(5, dtype=torch.float64)) == 40


def test_the_run_record_shows_the_largest_rank_and_every_rank_with_its_peak():
    def rank(i, p, g, o, rss):
        return RankRecord.from_dict({"rank": i, "mem": {
            "params_bytes": p, "grads_bytes": g, "optimizer_bytes": o, "host_peak_rss": rss}})

    server = RankRecord.from_dict({"rank": 0, "mem": {"host_peak_rss": 5}})  # read nothing
    out = summarize_held([server, rank(1, 100, 100, 200, 7), rank(2, 104, 104, 208, 8)])
    assert out["rank"] == 2 and out["total_bytes"] == 416 and out["params_bytes"] == 104
    assert [r["rank"] for r in out["by_rank"]] == [1, 2]
    assert out["by_rank"][0]["total_bytes"] == 400 and out["by_rank"][0]["host_peak_rss"] == 7
    assert summarize_held([server]) is None
