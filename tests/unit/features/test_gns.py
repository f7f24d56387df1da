"""The gradient noise scale's estimators (gns.py) against a problem whose gradient mean and
covariance are known exactly: linear regression with Gaussian inputs and noise.

Per-sample loss 1/2 (w.x - y)^2 with x ~ N(0, I_d), y = w*.x + e, e ~ N(0, s2). With
delta = w - w*: the per-sample gradient is x (x.delta - e), its mean G = delta and its
covariance Sigma = |delta|^2 I + delta delta^T + s2 I (Isserlis), so

    |G|^2 = |delta|^2,   tr(Sigma) = (d + 1) |delta|^2 + d s2.
"""

import math

import pytest
import torch

from scaleprobe.config import runconfig as C
from scaleprobe.config.sections import RunConfig
from scaleprobe.core.errors import ConfigError
from scaleprobe.core.run_parts import GnsSamples
from scaleprobe.features import gns

D, S2 = 4, 1.0
DELTA = torch.tensor([0.6, -0.5, 0.4, 0.3])
G2_TRUE = float(DELTA.square().sum())
TRACE_TRUE = (D + 1) * G2_TRUE + D * S2


def _grad(x, e):
    """The mean gradient over the rows of ``x`` (batch, D) at w - w* = DELTA."""
    r = x @ DELTA - e
    return (x * r[:, None]).mean(0)


def _norms(steps, b_small, ranks, seed=0):
    """Per step: the ranks' small squared norms (each rank's own batch) and the big one
    (their mean gradient): what DDP's hook measures."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(steps, ranks, b_small, D, generator=g, dtype=torch.float64)
    e = torch.randn(steps, ranks, b_small, generator=g, dtype=torch.float64) * math.sqrt(S2)
    r = torch.einsum("srbd,d->srb", x, DELTA.double()) - e
    local = (x * r[..., None]).mean(2)  # steps x ranks x D
    small = local.square().sum(-1)  # steps x ranks
    big = local.mean(1).square().sum(-1)  # steps
    return small, big


def test_known_gradient_mean_and_covariance_within_5_percent():
    small, big = _norms(steps=20000, b_small=4, ranks=4)
    s, b = gns.combine_ranks(small.T.tolist(), [big.tolist()])
    g2, tr = gns.per_step(s, b, 4, 16)
    assert sum(g2) / len(g2) == pytest.approx(G2_TRUE, rel=0.05)
    assert sum(tr) / len(tr) == pytest.approx(TRACE_TRUE, rel=0.05)
    assert gns.ratio(tr, g2) == pytest.approx(TRACE_TRUE / G2_TRUE, rel=0.05)


def test_few_steps_miss_and_the_interval_says_so():
    """At 30 steps the estimate is noisy: the bootstrap interval must hold the truth in most
    of 40 independent runs (coverage near 95%), and be wide."""
    truth = TRACE_TRUE / G2_TRUE
    covered = widths = 0
    for seed in range(40):
        small, big = _norms(steps=30, b_small=4, ranks=4, seed=seed)
        s, b = gns.combine_ranks(small.T.tolist(), [big.tolist()])
        g2, tr = gns.per_step(s, b, 4, 16)
        iv = gns.block_bootstrap(tr, g2, resamples=400)
        covered += iv[0] <= truth <= iv[1]
        widths += (iv[1] - iv[0]) / truth
    assert covered >= 32  # 80%: a bootstrap percentile interval at n=30 under-covers a little
    assert widths / 40 > 0.3


def test_summarize_ddp_ranks_and_the_series():
    small, big = _norms(steps=400, b_small=8, ranks=2, seed=3)
    ranks = [GnsSamples(method="ddp_hook", b_small=8, b_big=16, first_step=5,
                        small_sq=small[:, i].tolist(), big_sq=big.tolist()) for i in range(2)]
    out, why = gns.summarize(ranks, 16)
    assert why == {}
    assert out.steps == 400 and out.b_small == 8 and out.b_big == 16
    assert out.b_simple == pytest.approx(TRACE_TRUE / G2_TRUE, rel=0.15)
    assert out.b_simple_lo < out.b_simple < out.b_simple_hi
    assert len(out.series) == 20 and out.series[0].step == 5 and out.series[1].step == 25
    assert out.series[1].samples == 25 * 16
    # a stationary problem: the path average is the ratio up to the blocks' noise
    assert out.b_noise_path == pytest.approx(out.b_simple, rel=0.25)


def test_summarize_without_samples_names_the_reason():
    out, why = gns.summarize([GnsSamples(method="ddp_hook", reason="hook not attached")], 64)
    assert out is None and why == {"gns": "hook not attached"}


def test_negative_grad_estimate_is_null_with_reason():
    # the big gradient's norm above the small one's: the signal estimate is negative
    out, why = gns.summarize([GnsSamples(method="micro_batches", b_small=2, b_big=4,
                                         small_sq=[1.0] * 5, big_sq=[0.1] * 5)], 4)
    assert out.b_simple is None and "not positive" in why["gns.b_simple"]


def test_path_average_weights_blocks_by_their_smallest_batch_steps():
    blocks = [gns.Block(0, 10, 10.0), gns.Block(10, 10, 90.0)]
    # weights 10 / (1 + 10/10) = 5 and 10 / (1 + 90/10) = 1
    assert gns.path_average(blocks, 10) == pytest.approx((5 * 10 + 1 * 90) / 6)
    assert gns.path_average([gns.Block(0, 10, None)], 10) is None


def test_mode_and_config_rules():
    assert gns.mode(C.build({})) is None
    assert gns.mode(C.build({"gns": True})) == "micro_batches"
    assert gns.mode(C.build({"strategy": "ddp", "nproc": 2})) == "ddp_hook"
    assert gns.mode(C.build({"strategy": "ddp", "nproc": 2, "gns": False})) is None
    assert gns.mode(C.build({"strategy": "ddp", "nproc": 1, "gns": True})) == "micro_batches"
    with pytest.raises(ConfigError, match="even batch"):
        C.build({"gns": True, "batch_size": 9})
    with pytest.raises(ConfigError, match="not --strategy localsgd"):
        C.build({"gns": True, "strategy": "localsgd", "nproc": 2})
    with pytest.raises(ConfigError, match="two halves"):
        C.build({"gns": True, "task": "face"})


def test_key_unchanged_at_default():
    assert C.build({"gns": None}).key() == RunConfig().key()
    assert C.build({"gns": True}).key() != RunConfig().key()


def test_blocks_merge_a_block_without_signal_into_its_smaller_neighbour():
    g2 = [1.0] * 10 + [-1.5] * 10 + [1.0] * 20
    tr = [10.0] * 40
    out = gns.blocks(tr, g2, first_step=2, most=4, min_steps=10)
    # the second block (sum -15) joins the first (sizes tie: the earlier one), still -5, so
    # the third joins them: 30 steps summing to +5, then the last block on its own
    assert [(b.first_step, b.steps) for b in out] == [(2, 30), (32, 10)]
    assert out[0].b_simple == pytest.approx(300 / 5) and out[1].b_simple == pytest.approx(10)


def test_the_terminal_line_says_a_one_process_step_ran_as_two_half_batches():
    """Bug caught: the one-process --gns note was missing from the terminal: its step
    ran as two half-batches, so the run's step and epoch time and memory are of that step."""
    from scaleprobe.core.run_parts import Gns

    g = Gns(b_simple=120.0, b_simple_lo=80.0, b_simple_hi=200.0, steps=20, global_batch=64,
            method="micro_batches")
    line = gns.summary_line(g, {})
    assert line is not None and line.endswith(gns.HALF_BATCH_STEP)
    assert "two half-batches" in gns.HALF_BATCH_STEP
    ddp = gns.summary_line(Gns(b_simple=120.0, steps=20, method="ddp_hook"), {})
    assert ddp is not None and "half-batches" not in ddp
