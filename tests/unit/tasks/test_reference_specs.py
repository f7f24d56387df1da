"""Every reference sweep spec in examples/ parses: tables, keys, values and every grid point."""

from pathlib import Path

import pytest

from scaleprobe.experiments.spec import check_points, load_spec

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SPECS = sorted(EXAMPLES.glob("reference-*.toml"))


def test_the_three_reference_specs_are_there():
    names = {p.stem for p in SPECS}
    assert {"reference-detection-voc", "reference-face", "reference-mnist-cifar"} <= names


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_reference_spec_is_valid(path):
    sp = load_spec(path)
    points = check_points(sp, out="unused")
    assert points, path
    for p in points:
        cfg = sp.config(p)
        assert (cfg.train.steps or 0) <= 20 and (cfg.train.epochs or 0) <= 1  # CI size
        assert cfg.train.steps or cfg.train.epochs
        if cfg.data.dataset in ("voc", "lfw", "mnist", "cifar10"):
            assert cfg.data.data_dir, f"{path.name}: {p.axes} has no data_dir"


def test_face_spec_splits_a_global_batch_with_an_override():
    sp = load_spec(EXAMPLES / "reference-face.toml", {"global_batch": 96})
    per_device = sorted({sp.config(p).per_device_batch() for p in check_points(sp)})
    assert per_device == [32, 48, 96]


def test_detection_spec_leaves_out_only_impossible_points():
    sp = load_spec(EXAMPLES / "reference-detection-voc.toml")
    points = check_points(sp)
    combos = {(p.axes["strategy"], p.axes["nproc"]) for p in points}
    assert combos == {("single", 1), ("ddp", 1), ("ddp", 2), ("ps", 2)}
    assert all(sp.config(p).task.task == "detection" for p in points)
