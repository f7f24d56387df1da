"""The check before launching N ranks (run/resources.py): cores and memory, --force."""

import pytest

from scaleprobe.core.errors import ConfigError
from scaleprobe.run import resources as R

MIB = 1 << 20


@pytest.fixture
def host(monkeypatch):
    """A 2-core host with 24 GiB available and ranks of 281 MiB each at least."""
    figures = {"cores": 2, "free": 24 << 30, "floor": 281 * MIB}
    monkeypatch.setattr(R, "host_cores", lambda: figures["cores"])
    monkeypatch.setattr(R, "available_bytes", lambda: figures["free"])
    monkeypatch.setattr(R, "rank_floor_bytes", lambda: figures["floor"])
    return figures


def test_64_ranks_on_2_cores_are_refused_with_the_figures(host):
    with pytest.raises(ConfigError) as e:
        R.check_fits(64, on_cpu=True, force=False)
    assert str(e.value) == ("--nproc 64 does not fit this machine: 64 ranks on 2 cores is "
                            "32.0 per core (at most 2: more time-share the cores); use fewer "
                            "ranks, or --force to start them anyway")


def test_ranks_that_cannot_fit_the_memory_available_are_refused(host):
    host["free"] = 1 << 30
    with pytest.raises(ConfigError, match=r"4 ranks need at least 4 x 281 MiB = 1.1 GiB of "
                                          r"memory .* and 1.0 GiB is available"):
        R.check_fits(4, on_cpu=True, force=False)


def test_what_fits_and_what_is_forced_starts(host):
    R.check_fits(4, on_cpu=True, force=False)  # 2 a core: the README's --nproc 1,2,4
    R.check_fits(64, on_cpu=True, force=True)
    R.check_fits(8, on_cpu=False, force=False)  # a GPU each: the cores are not held to it


def test_force_is_an_option_that_does_not_change_a_runs_key():
    """--force says how the ranks were let start, not what they measure: a sweep resumes
    runs made with and without it alike."""
    from scaleprobe.config import runconfig as C

    plain = C.build({"strategy": "ddp", "nproc": 2})
    forced = C.build({"strategy": "ddp", "nproc": 2, "dist.force": True})
    assert forced.dist.force is True and plain.key() == forced.key()


def _lm(**over):
    from scaleprobe.config import runconfig as C

    return C.build({"task": "lm", "model": "gpt2_small", **over})


def test_a_gpt_whose_floor_exceeds_the_memory_is_refused_with_the_batch_that_fits(
        host, monkeypatch):
    """Bug caught: `run --task lm --model gpt2_small` at its defaults on a 24 GiB CPU host
    grew to 22 GiB, and neither its first step nor Ctrl+C was answered for 20 minutes."""
    monkeypatch.setattr(R.envmod, "cuda_available", lambda: False)
    host["free"] = 13 << 30
    with pytest.raises(ConfigError) as e:
        R.check_config(_lm(), launched=False)
    line = str(e.value)
    assert line.startswith("--model gpt2_small at a batch of 64 x 1024 tokens needs at least "
                           "37.0 GiB (982 MiB of model state, 36.0 GiB of activations kept "
                           "for backward) and 13.0 GiB is available now"), line
    assert "--batch-size 21" in line and "--force" in line
    # 21 passes, 22 does not: the batch named is the largest that fits the floor
    R.check_config(_lm(batch_size=21), launched=False)
    with pytest.raises(ConfigError):
        R.check_config(_lm(batch_size=22), launched=False)
    # two DDP ranks each hold their batch: 9 each fits 6.5 GiB, not 10
    with pytest.raises(ConfigError, match="for each of 2 processes.*--batch-size 9"):
        R.check_config(_lm(batch_size=10, strategy="ddp", nproc=2), launched=True)
    R.check_config(_lm(batch_size=9, strategy="ddp", nproc=2), launched=True)
    R.check_config(_lm(force=True), launched=False)  # --force starts it anyway
    R.check_config(_lm(model="gpt_tiny"), launched=False)  # 0.3 GiB at batch 64


def test_the_floor_is_left_out_where_it_is_not_a_floor(host, monkeypatch):
    """On a GPU an out-of-memory is a recorded `oom`, not a stalled host; compiled, backward
    may recompute what eager keeps; an image model has no floor counted."""
    from scaleprobe.features.lmspec import memory_floor

    host["free"] = 1 << 30
    monkeypatch.setattr(R.envmod, "cuda_available", lambda: True)
    R.check_config(_lm(), launched=False)
    monkeypatch.setattr(R.envmod, "cuda_available", lambda: False)
    assert memory_floor(_lm(compile=True)) is None
    from scaleprobe.config import runconfig as C

    assert memory_floor(C.build({"model": "resnet18"})) is None


def test_the_floors_model_state_counts_gpt2_smalls_published_parameters():
    """The parameters counted from the shape: GPT-2 small's published 124,439,808 (the
    vocabulary unpadded: a floor), each with AdamW's two moments beside it, in fp32."""
    from scaleprobe.features.lmspec import memory_floor

    f = memory_floor(_lm(dataset="tokens-synthetic", optimizer="adamw"))
    assert f is not None and f.state_bytes == 124_439_808 * 4 * 3
    # per sample: 16 saved tensors of 1024 x 768 per block, 12 blocks, and the logits and
    # their gradient, 1024 x 50,257 each, in fp32
    assert f.per_sample_bytes == 1024 * (12 * 16 * 768 + 2 * 50_257) * 4
