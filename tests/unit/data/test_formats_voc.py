import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision

from scaleprobe.core.errors import ConfigError, DataError
from scaleprobe.data.formats import VOC_CLASSES, open_voc, validate_voc, write_dataset
from scaleprobe.data.formats.voc_gen import DRAWN, draw_scene

ANN = Path("VOCdevkit/VOC2012/Annotations")


@pytest.fixture(scope="module")
def voc(tmp_path_factory) -> Path:
    return write_dataset("voc", tmp_path_factory.mktemp("v") / "voc", count=25, size=(160, 120))


@pytest.fixture
def copy(voc, tmp_path) -> Path:
    root = tmp_path / "copy"
    shutil.copytree(voc, root)
    return root


def test_torchvision_voc_detection_reads_it(voc):
    train = torchvision.datasets.VOCDetection(str(voc), year="2012", image_set="train")
    val = torchvision.datasets.VOCDetection(str(voc), year="2012", image_set="val")
    assert (len(train), len(val)) == (20, 5)
    img, target = train[0]
    ann = target["annotation"]
    assert img.size == (160, 120) and ann["size"] == {"width": "160", "height": "120",
                                                      "depth": "3"}
    for obj in ann["object"]:
        assert obj["name"] in VOC_CLASSES
        b = {k: int(v) for k, v in obj["bndbox"].items()}
        assert 1 <= b["xmin"] <= b["xmax"] <= 160 and 1 <= b["ymin"] <= b["ymax"] <= 120


def test_reader_gives_detection_targets(voc):
    ds = open_voc(voc, "trainval")
    assert len(ds) == 25
    img, t = ds[0]
    assert img.dtype == torch.uint8 and img.shape == (3, 120, 160)
    assert t["boxes"].dtype == torch.float32 and t["labels"].dtype == torch.int64
    for k in range(len(ds)):
        boxes = ds[k][1]["boxes"]
        assert len(boxes) >= 1
        assert (boxes[:, 0] >= 0).all() and (boxes[:, 2] <= 160).all()
        assert (boxes[:, 1] >= 0).all() and (boxes[:, 3] <= 120).all()
        assert (boxes[:, 2] > boxes[:, 0]).all() and (boxes[:, 3] > boxes[:, 1]).all()
    labels = torch.cat([ds[k][1]["labels"] for k in range(len(ds))])
    assert labels.min() >= 1 and labels.max() <= 20
    assert validate_voc(voc, "train")[0] == 20


def test_boxes_are_tight_around_the_drawn_object():
    rng = np.random.default_rng(7)
    for _ in range(10):
        img, objects = draw_scene(rng, 120, 90)
        for name, (x0, y0, x1, y1), _, _ in objects:
            colour = np.asarray(DRAWN[name][1])
            near = np.abs(img.astype(int) - colour).max(axis=-1) < 70
            inside = near[y0 - 1: y1, x0 - 1: x1]
            # the object's colour reaches every edge of its box
            assert inside[0].any() and inside[-1].any()
            assert inside[:, 0].any() and inside[:, -1].any()


def test_same_seed_same_annotations(tmp_path):
    a = write_dataset("voc", tmp_path / "a", count=4, size=(64, 48), seed=5)
    b = write_dataset("voc", tmp_path / "b", count=4, size=(64, 48), seed=5)
    for f in (a / ANN).iterdir():
        assert f.read_bytes() == (b / ANN / f.name).read_bytes()
    jpg = Path("VOCdevkit/VOC2012/JPEGImages/2012_000001.jpg")
    assert (a / jpg).read_bytes() == (b / jpg).read_bytes()


def _first_train_xml(root: Path) -> Path:
    main = root / "VOCdevkit/VOC2012/ImageSets/Main/train.txt"
    return root / ANN / (main.read_text().split()[0] + ".xml")


def test_broken_xml_names_the_file_and_line(copy):
    xml = _first_train_xml(copy)
    xml.write_text(xml.read_text().replace("</size>", "</sise>", 1))
    with pytest.raises(DataError, match=rf"{xml.name} line \d+: not valid XML"):
        validate_voc(copy, "train")


def test_box_outside_the_image_names_file_and_object(copy):
    xml = _first_train_xml(copy)
    text = xml.read_text()
    start = text.index("<xmax>") + len("<xmax>")
    xml.write_text(text[:start] + "999" + text[text.index("</xmax>"):])
    with pytest.raises(DataError, match=rf"{xml.name} line \d+: object 1 .* outside the 160x120"):
        open_voc(copy, "train")


def test_degenerate_box_and_unknown_class(copy):
    xml = _first_train_xml(copy)
    text = xml.read_text()
    start = text.index("<ymax>") + len("<ymax>")
    xml.write_text(text[:start] + "0" + text[text.index("</ymax>"):])
    with pytest.raises(DataError, match="object 1 .*degenerate box"):
        validate_voc(copy, "train")
    name = text[text.index("<name>") + 6: text.index("</name>")]
    xml.write_text(text.replace(f"<name>{name}</name>", "<name>persson</name>", 1))
    with pytest.raises(DataError, match="unknown class 'persson'; did you mean person"):
        validate_voc(copy, "train")


def test_items_are_checked_when_read(copy):
    ds = open_voc(copy, "train", validate=False)
    _first_train_xml(copy).write_text("<annotation><size>")
    with pytest.raises(DataError, match="not valid XML"):
        ds[0]
    ds[1]


def test_set_file_naming_a_missing_annotation_gives_the_line(copy):
    main = copy / "VOCdevkit/VOC2012/ImageSets/Main/train.txt"
    ids = main.read_text().split()
    (copy / ANN / f"{ids[2]}.xml").unlink()
    with pytest.raises(DataError, match=r"train.txt line 3: annotation .* not found"):
        validate_voc(copy, "train")


def test_empty_folder_and_bad_image_set(tmp_path, voc):
    with pytest.raises(DataError, match="no Pascal VOC data under .*datagen voc"):
        open_voc(tmp_path)
    with pytest.raises(ConfigError, match="did you mean train"):
        open_voc(voc, "trian")


def test_transforms_receive_image_and_target(voc):
    def flip(image, target):
        w = image.shape[-1]
        boxes = target["boxes"].clone()
        boxes[:, [0, 2]] = w - target["boxes"][:, [2, 0]]
        return image.flip(-1), {**target, "boxes": boxes}

    plain, flipped = open_voc(voc, "val"), open_voc(voc, "val", transforms=flip)
    (a, ta), (b, tb) = plain[0], flipped[0]
    assert torch.equal(a.flip(-1), b)
    assert torch.allclose(ta["boxes"][:, 2], 160 - tb["boxes"][:, 0])
