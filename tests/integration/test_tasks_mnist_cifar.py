"""MNIST (idx files) and CIFAR-10 (python batches) written by `scaleprobe datagen`, trained for
a few steps through the classification task."""

import json
import math
from pathlib import Path

import pytest

from scaleprobe.cli import main

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ref")
    assert main(["datagen", "mnist", "--out", str(root / "mnist"), "--count", "140"]) == 0
    assert main(["datagen", "cifar10", "--out", str(root / "cifar10"), "--count", "60"]) == 0
    return root


def _train(capsys, out: Path, *argv) -> dict:
    code = main(["run", *map(str, argv), "--loader", "naive", "--warmup-steps", "1", "--eval",
                 "--no-progress", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    rec = json.loads((out / "results.jsonl").read_text().splitlines()[-1])
    m = rec["metrics"]
    assert rec["status"] == "ok"
    assert 0.0 <= m["accuracy"] <= 1.0
    assert math.isfinite(m["loss_first"]) and math.isfinite(m["loss_last"])
    assert m["step_time_s"]["median"] > 0
    return rec


@pytest.mark.parametrize("model", ["digits_cnn", "mlp"])
def test_mnist(capsys, data, tmp_path, model):
    rec = _train(capsys, tmp_path / "o", "--model", model, "--dataset", "mnist",
                 "--data-dir", data / "mnist", "--batch-size", 16, "--steps", 4)
    assert rec["metrics"]["eval_samples"] == 20
    assert "MNIST" in rec["dataset_source"]


def test_cifar10_vgg19_bn_at_32_pixels(capsys, data, tmp_path):
    rec = _train(capsys, tmp_path / "o", "--model", "vgg19_bn", "--dataset", "cifar10",
                 "--data-dir", data / "cifar10", "--batch-size", 8, "--steps", 2)
    assert rec["metrics"]["param_count"] > 20_000_000  # vgg19_bn with the 512-wide CIFAR head
    assert rec["metrics"]["eval_samples"] == 10
