"""--dataset synthetic: one batch made once on the device, FLOPs and MFU on a real CPU run."""

import pytest
import torch

from scaleprobe import config as C
from scaleprobe.data.device import DeviceBatches
from scaleprobe.errors import ConfigError, DataError
from scaleprobe.runner import execute

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def r18(tmp_path_factory):
    """resnet18 on 32 px device-resident synthetic data, one process, CPU (the measured peak
    cached in a folder of the test's own)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
    out = tmp_path_factory.mktemp("r18")
    try:
        cfg = C.build({"model": "resnet18", "dataset": "synthetic", "image_size": 32,
                       "batch_size": 16, "steps": 8, "warmup_steps": 2, "out": str(out),
                       "progress": False})
        yield execute(cfg)
    finally:
        mp.undo()


def test_device_resident_data_waits_under_one_percent_of_the_step(r18):
    """Catches synthetic data still going through per-sample __getitem__, transform and
    collate (on an H100 that path waited 24.8 of 34.2 ms per step): with the batch made once
    on the device the step's wait for it is a Python next()."""
    m = r18["metrics"]
    assert r18["status"] == "ok", r18["error"]
    assert r18["input_mode"] == "device-resident"
    assert m["data_wait_fraction"] < 0.01, m["breakdown_s"]
    assert m["breakdown_s"]["h2d"] < 0.01 * m["step_time_s"]["median"]


def test_cpu_run_reports_flops_and_an_mfu_between_0_and_1(r18):
    """Catches FLOPs not counted on a real run, a per-rank count mixed with the job's,
    achieved FLOP/s off the measured samples/s, and an MFU against no peak or the wrong one."""
    m = r18["metrics"]
    assert m["flops_per_step"] > 0
    assert m["flops_per_sample"] * r18["batch"]["global"] == pytest.approx(m["flops_per_step"])
    assert m["achieved_flops_per_s"] == pytest.approx(m["flops_per_sample"] * m["samples_per_s"])
    assert m["peak"]["measured"] is True and m["peak"]["source"].startswith("measured peak")
    assert m["peak"]["dtype"] == "fp32" and m["peak"]["devices"] == 1
    assert 0 < m["mfu"] < 1, (m["mfu"], m["peak"])


def test_resnet18_flops_per_sample_at_32px_follow_the_224px_count(r18):
    """Catches the count not being the model's (a different batch or image size counted):
    resnet18's convolutions scale with the pixels, so 32 px costs about (32/224)^2 of 224 px
    (3 x 2 x 1.82 G for forward + backward, less the first layer's input gradient); the
    fully-connected head and the stem's stride keep it within 30% of that."""
    per_sample = r18["metrics"]["flops_per_sample"]
    expected = 3 * 2 * 1.82e9 * (32 / 224) ** 2
    assert 0.7 < per_sample / expected < 1.3, per_sample / expected


def test_ranks_get_different_batches_and_the_sampler_indices():
    """Catches ranks training on the same tensors (one seed for all) and a data path that
    forgets the sampler (the shard audit would have nothing to check), or copies per step."""
    from torch.utils.data import DistributedSampler

    cpu = torch.device("cpu")
    ds = list(range(64))
    b = [DeviceBatches(64, 8, DistributedSampler(ds, 2, r, seed=0, drop_last=True), 16, 10,
                       seed=0, rank=r, device=cpu) for r in (0, 1)]
    assert not torch.equal(b[0].x, b[1].x)
    idx = [torch.cat([i for _, _, i, _ in bi]).tolist() for bi in b]
    assert len(b[0]) == 4 and len(idx[0]) == 32 and not set(idx[0]) & set(idx[1])
    ptrs = {x.data_ptr() for x, _, _, _ in b[0]}
    assert ptrs == {b[0].x.data_ptr()}  # the same pre-made tensor every step
    again = DeviceBatches(64, 8, None, 16, 10, seed=0, rank=0, device=cpu)
    assert torch.equal(again.x, b[0].x)  # seeded: a repeat trains on the same numbers
    first, second = (torch.cat([i for _, _, i, _ in again]).tolist() for _ in range(2))
    assert sorted(first) == sorted(second) == list(range(64)) and first != second


def test_fewer_samples_than_a_batch_is_a_data_error():
    """Catches an empty epoch (a run that times nothing) instead of a one-line error."""
    with pytest.raises(DataError, match="fewer than one batch"):
        DeviceBatches(4, 8, None, 16, 10, seed=0, rank=0, device=torch.device("cpu"))


@pytest.mark.parametrize("extra, what", [({"transform": "heavy"}, "--transform heavy"),
                                         ({"task": "face"}, "--task face")])
def test_options_that_need_an_input_pipeline_say_use_synthetic_loader(extra, what):
    """Catches --transform heavy silently doing nothing on device-resident data (a user
    measuring augmentation would read a loader-free figure)."""
    with pytest.raises(ConfigError, match="synthetic-loader") as e:
        C.validate(C.build({"dataset": "synthetic", **extra}))
    assert what in str(e.value)


@pytest.mark.slow  # two processes (ddp, gloo): ~25 s under load
def test_shard_audit_still_catches_ranks_reading_the_same_samples(tmp_path, monkeypatch):
    """Catches the audit losing its meaning on device-resident data: the sampler's indices are
    still recorded, so the injected same-batch fault is still reported."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cfg = C.build({"model": "mlp", "dataset": "synthetic", "image_size": 16, "num_samples": 256,
                   "batch_size": 8, "epochs": 2, "strategy": "ddp", "nproc": 2,
                   "sampler": "same_batch", "calibrate_comm": False, "out": str(tmp_path),
                   "progress": False})
    rec = execute(cfg)
    assert rec["status"] == "ok", rec["error"]
    assert rec["audit"]["ok"] is False and rec["audit"]["duplicate_samples"] > 0
    assert rec["metrics"]["peak"]["devices"] == 1  # two CPU ranks share one host's peak
