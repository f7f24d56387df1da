import shutil
from pathlib import Path

import pytest
import torch
import torchvision

from scaleprobe.core.errors import DataError
from scaleprobe.data.formats import open_mnist, write_dataset


@pytest.fixture(scope="module")
def mnist(tmp_path_factory) -> Path:
    return write_dataset("mnist", tmp_path_factory.mktemp("m") / "mnist", count=70, seed=0)


def test_torchvision_mnist_reads_the_raw_files(mnist):
    train = torchvision.datasets.MNIST(str(mnist), train=True, download=False)
    test = torchvision.datasets.MNIST(str(mnist), train=False, download=False)
    assert (len(train), len(test)) == (60, 10)
    img, label = train[0]
    assert img.size == (28, 28) and img.mode == "L" and 0 <= label <= 9
    assert train.data.dtype == torch.uint8 and int(train.targets.max()) <= 9


def test_reader_accepts_the_root_or_the_raw_folder(mnist):
    a = open_mnist(mnist, train=True)
    b = open_mnist(mnist / "MNIST" / "raw", train=True)
    assert torch.equal(a.data, b.data) and torch.equal(a.targets, b.targets)


def test_digits_look_like_mnist(mnist):
    ds = open_mnist(mnist, train=True)
    x = ds.data.float()
    assert x[:, :2, :].mean() < 5 and x[:, 10:18, 10:18].mean() > 40  # dark border, ink middle
    assert len(set(ds.targets.tolist())) >= 8


def test_other_sizes_are_written_and_read(tmp_path):
    root = write_dataset("mnist", tmp_path / "m", count=14, size=(32, 24))
    assert open_mnist(root, train=True).data.shape[1:] == (24, 32)


def test_truncated_file_names_the_file(mnist, tmp_path):
    root = tmp_path / "copy"
    shutil.copytree(mnist, root)
    f = root / "MNIST" / "raw" / "train-images-idx3-ubyte"
    f.write_bytes(f.read_bytes()[:-50])
    with pytest.raises(DataError, match="train-images-idx3-ubyte holds .* bytes"):
        open_mnist(root, train=True)


def test_label_count_mismatch_and_bad_magic(mnist, tmp_path):
    root = tmp_path / "copy"
    shutil.copytree(mnist, root)
    raw = root / "MNIST" / "raw"
    shutil.copy(raw / "t10k-labels-idx1-ubyte", raw / "train-labels-idx1-ubyte")
    with pytest.raises(DataError, match="60 images but .* 10 labels"):
        open_mnist(root, train=True)
    (raw / "t10k-labels-idx1-ubyte").write_bytes(b"\x00" * 18)
    with pytest.raises(DataError, match="t10k-labels-idx1-ubyte is not an MNIST idx file"):
        open_mnist(root, train=False)


def test_empty_folder_is_a_data_error_with_the_fix(tmp_path):
    with pytest.raises(DataError, match="no MNIST idx files under .*datagen mnist"):
        open_mnist(tmp_path)
