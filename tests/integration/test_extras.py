"""Without an optional extra, what needs it stops in one line that names the extra; nothing
else needs it."""

import sys

import pytest

from scaleprobe.cli import main
from scaleprobe.data.formats import write_dataset

pytestmark = pytest.mark.timeout(240)


def _missing(monkeypatch, *modules):
    for m in modules:  # an import of a module set to None in sys.modules fails
        monkeypatch.setitem(sys.modules, m, None)


def test_detection_eval_without_the_extra_stops_before_training(tmp_path, capsys, monkeypatch):
    """Bug caught: with torchmetrics absent, a detection run trained to the end and then
    failed in evaluation (or reported a figure from a different definition)."""
    voc = write_dataset("voc", tmp_path / "voc", count=12, size=(64, 48))
    _missing(monkeypatch, "torchmetrics")
    code = main(["run", "--task", "detection", "--dataset", "voc", "--data-dir", str(voc),
                 "--batch-size", "2", "--image-size", "64", "--steps", "1", "--warmup-steps", "0",
                 "--eval", "--loader", "naive", "--no-progress",
                 "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "torchmetrics" in err and "pip install 'scaleprobe[detection]'" in err
    assert not list((tmp_path / "out").glob("*/result.json"))  # stopped before any run began


def test_lfw_generator_without_the_face_extra(tmp_path, capsys, monkeypatch):
    """Bug caught: `datagen lfw` without scikit-image pointed at a package name, not at the
    extra that installs what scaleprobe needs."""
    _missing(monkeypatch, "skimage", "skimage.data")
    code = main(["datagen", "lfw", "--out", str(tmp_path / "lfw")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "scikit-image" in err and "pip install 'scaleprobe[face]'" in err
