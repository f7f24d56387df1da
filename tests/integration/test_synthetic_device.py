"""--dataset synthetic: one batch made once on the device, FLOPs and MFU on a real CPU run."""

import pytest
import torch

from scaleprobe.config import runconfig as C
from scaleprobe.core.errors import ConfigError, DataError
from scaleprobe.data.device import DeviceBatches
from scaleprobe.run.workloads import run_config


def execute(cfg):
    """The run's record as written (result.json)."""
    return run_config(cfg).to_dict()

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


def _hand_count_per_sample(model, image_size):
    """resnet18's FLOPs per sample counted by hand, independently of FlopCounterMode: every
    Conv2d and Linear's multiply-adds from its weight shape and its output's size (seen by a
    forward hook), 2 FLOPs each; backward computes the weight's gradient (the same count)
    and the input's gradient (the same again) except at the first layer, whose input is the
    data. Batch norm, activations, pooling and the optimizer are not counted."""
    macs = []

    def hook(mod, _inp, out):
        per_out = mod.weight[0].numel()  # in_ch/groups x kh x kw, or in_features
        macs.append(per_out * out[0].numel())

    hs = [mod.register_forward_hook(hook) for mod in model.modules()
          if isinstance(mod, (torch.nn.Conv2d, torch.nn.Linear))]
    with torch.no_grad():
        model.eval()(torch.zeros(1, 3, image_size, image_size))
    for h in hs:
        h.remove()
    # forward, the weight's gradient, and the input's gradient except for the data's layer
    return sum(2 * m * (2 if i == 0 else 3) for i, m in enumerate(macs))


def test_resnet18_flops_per_step_match_a_hand_count_within_5_percent(r18):
    """Catches a count that is not the run's model at the run's size and batch (a different
    batch or image size counted, forward only, backward counted twice, the optimizer or a
    second step included): within 5% of the layers counted by hand."""
    from scaleprobe.models.build import build_model

    hand = _hand_count_per_sample(build_model("resnet18", 10, 32), 32)
    m = r18["metrics"]
    assert m["flops_per_step"] == pytest.approx(hand * r18["batch"]["global"], rel=0.05), \
        (m["flops_per_step"], hand * r18["batch"]["global"])


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
    from tests.conftest import run_config_cli

    rec = run_config_cli(cfg)
    assert rec["status"] == "audit_failed", rec["error"]
    assert rec["audit"]["ok"] is False and rec["audit"]["duplicate_samples"] > 0
    assert rec["metrics"]["peak"]["devices"] == 1  # two CPU ranks share one host's peak
