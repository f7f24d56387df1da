"""Detection on generated Pascal VOC end to end, and bad VOC / LFW data stopping a run with one
line that names the file and the line."""

import json
import shutil
from pathlib import Path

import pytest

from scaleprobe.cli import main
from scaleprobe.data.formats import write_dataset

pytestmark = pytest.mark.timeout(240)

QUICK = ("--loader", "naive", "--warmup-steps", "1", "--no-progress")


@pytest.fixture(scope="module")
def voc(tmp_path_factory) -> Path:
    return write_dataset("voc", tmp_path_factory.mktemp("v") / "voc", count=30, size=(160, 120))


@pytest.fixture(scope="module")
def lfw(tmp_path_factory) -> Path:
    return write_dataset("lfw", tmp_path_factory.mktemp("l") / "lfw", count=60, size=(64, 64))


def _run(capsys, *argv) -> tuple[int, str]:
    code = main(["run", *map(str, argv), *QUICK])
    return code, capsys.readouterr().err.strip()


def test_detection_trains_and_reports_map50(capsys, voc, tmp_path):
    code, err = _run(capsys, "--task", "detection", "--dataset", "voc", "--data-dir", voc,
                     "--image-size", 96, "--batch-size", 4, "--steps", 2, "--eval",
                     "--out", tmp_path / "o")
    assert code == 0, err
    rec = json.loads((tmp_path / "o" / "results.jsonl").read_text().splitlines()[-1])
    m = rec["metrics"]
    assert rec["status"] == "ok" and m["loss_first"] > 0
    # bug: the default model was recorded as digits_cnn; the result names the detector
    assert rec["config"]["model"]["name"] == "ssdlite320_mobilenet_v3_large"
    assert 0.0 <= m["map50"] <= 1.0 and 0.0 <= m["map50_voc"] <= 1.0
    assert m["map50_source"].startswith("torchmetrics")  # installed with scaleprobe
    assert m["eval_samples"] == 6 and m["eval_objects"] > 0
    assert m["steps_per_epoch"] == 6  # 24 training images, 4 per step


def test_heavy_transform_in_loader_workers(capsys, voc, tmp_path):
    code, err = _run(capsys, "--task", "detection", "--dataset", "voc", "--data-dir", voc,
                     "--image-size", 64, "--batch-size", 2, "--steps", 1, "--transform", "heavy",
                     "--loader", "pipelined", "--workers", 1, "--out", tmp_path / "o")
    assert code == 0, err


@pytest.mark.parametrize("model", ["ssdlite320_mobilenet_v3_large",
                                   "fasterrcnn_mobilenet_v3_large_fpn"])
def test_detector_named_on_the_command_line(capsys, voc, tmp_path, model):
    code, err = _run(capsys, "--task", "detection", "--dataset", "voc", "--data-dir", voc,
                     "--model", model, "--image-size", 64, "--batch-size", 2, "--steps", 1,
                     "--out", tmp_path / "o")
    assert code == 0, err
    rec = json.loads((tmp_path / "o" / "results.jsonl").read_text().splitlines()[-1])
    assert rec["status"] == "ok" and rec["config"]["model"]["name"] == model


def test_a_classifier_is_not_a_detector(capsys, voc, tmp_path):
    code, err = _run(capsys, "--task", "detection", "--dataset", "voc", "--data-dir", voc,
                     "--model", "resnet18", "--out", tmp_path / "o")
    assert code == 2 and "needs a detection model, not 'resnet18'" in err


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(src, dst)
    return dst


def _first_train_annotation(root: Path) -> Path:
    voc = root / "VOCdevkit" / "VOC2012"
    first = (voc / "ImageSets" / "Main" / "train.txt").read_text().split()[0]
    return voc / "Annotations" / f"{first}.xml"


def _one_line(code: int, err: str) -> None:
    assert code == 2
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err


def test_voc_annotation_that_does_not_parse(capsys, voc, tmp_path):
    root = _copy(voc, tmp_path)
    xml = _first_train_annotation(root)
    xml.write_text(xml.read_text().replace("</size>", "</sise>"))
    code, err = _run(capsys, "--task", "detection", "--dataset", "voc", "--data-dir", root,
                     "--out", tmp_path / "o")
    _one_line(code, err)
    assert str(xml) in err and " line " in err and "not valid XML" in err


def test_voc_box_outside_the_image(capsys, voc, tmp_path):
    root = _copy(voc, tmp_path)
    xml = _first_train_annotation(root)
    text = xml.read_text()
    start = text.index("<xmax>") + len("<xmax>")
    xml.write_text(text[:start] + "9999" + text[text.index("</xmax>"):])
    code, err = _run(capsys, "--task", "detection", "--dataset", "voc", "--data-dir", root,
                     "--out", tmp_path / "o")
    _one_line(code, err)
    assert str(xml) in err and " line " in err and "outside the 160x120 image" in err


def test_lfw_pairs_line_naming_a_missing_person(capsys, lfw, tmp_path):
    root = _copy(lfw, tmp_path)
    pairs = root / "lfw-py" / "pairsDevTest.txt"
    lines = pairs.read_text().splitlines()
    lines[1] = "Nobody_Here\t1\t2"
    pairs.write_text("\n".join(lines) + "\n")
    code, err = _run(capsys, "--task", "face", "--dataset", "lfw", "--data-dir", root,
                     "--out", tmp_path / "o")
    _one_line(code, err)
    assert "pairsDevTest.txt line 2: person 'Nobody_Here' has no folder" in err


def test_task_and_dataset_that_do_not_fit(capsys, voc, tmp_path):
    code, err = _run(capsys, "--task", "detection", "--out", tmp_path / "o")
    _one_line(code, err)
    assert "needs a dataset with boxes" in err
    code, err = _run(capsys, "--task", "face", "--dataset", "voc", "--data-dir", voc,
                     "--out", tmp_path / "o")
    _one_line(code, err)
    assert "labelled by identity" in err
