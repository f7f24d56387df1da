import re
from pathlib import Path

import pytest
import torchvision

from scaleprobe.core.errors import ConfigError, DataError
from scaleprobe.data.formats import open_imagefolder, write_dataset


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return write_dataset("imagefolder", tmp_path_factory.mktemp("f") / "shapes", count=40,
                         size=(48, 40))


def test_torchvision_imagefolder_reads_it(folder):
    ds = torchvision.datasets.ImageFolder(str(folder))
    assert len(ds) == 40 and len(ds.classes) == 10
    img, label = ds[0]
    assert img.size == (48, 40) and 0 <= label < 10
    assert sorted(set(ds.targets)) == list(range(10))


def test_reader_gives_the_same_samples(folder):
    ds = open_imagefolder(folder)
    assert ds.samples == torchvision.datasets.ImageFolder(str(folder)).samples
    img, _ = ds[5]
    assert img.mode == "RGB"


def test_corrupt_jpeg_names_the_file(tmp_path):
    root = write_dataset("imagefolder", tmp_path / "d", count=10, size=(32, 32))
    ds = open_imagefolder(root)
    bad = Path(ds.samples[3][0])
    bad.write_bytes(bad.read_bytes()[:40])
    with pytest.raises(DataError, match="cannot read image " + re.escape(str(bad))):
        ds[3]
    bad.write_bytes(b"not an image")
    with pytest.raises(DataError, match="not a recognised image format"):
        ds[3]
    ds[4]  # the others still read


def test_empty_or_missing_folder(tmp_path):
    with pytest.raises(DataError, match="is empty .*datagen imagefolder"):
        open_imagefolder(tmp_path)
    with pytest.raises(DataError, match="not found"):
        open_imagefolder(tmp_path / "nope")
    (tmp_path / "a.txt").write_text("x")
    with pytest.raises(DataError, match="no class folders"):
        open_imagefolder(tmp_path)
    (tmp_path / "cls").mkdir()
    (tmp_path / "cls" / "notes.txt").write_text("x")
    with pytest.raises(DataError, match="hold no image files"):
        open_imagefolder(tmp_path)


def test_count_must_cover_the_classes(tmp_path):
    with pytest.raises(ConfigError, match="at least 10"):
        write_dataset("imagefolder", tmp_path / "x", count=5)
