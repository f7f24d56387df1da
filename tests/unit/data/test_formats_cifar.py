import hashlib
import pickle
from pathlib import Path

import numpy as np
import pytest

from scaleprobe.core.errors import ConfigError, DataError
from scaleprobe.data.formats import generate, open_cifar10, write_dataset
from scaleprobe.data.formats.cifar import LocalCIFAR10


@pytest.fixture(scope="module")
def cifar(tmp_path_factory) -> Path:
    return write_dataset("cifar10", tmp_path_factory.mktemp("c") / "cifar", count=60, seed=3)


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(root).as_posix().encode() + p.read_bytes())
    return h.hexdigest()


def test_torchvision_class_reads_train_and_test(cifar):
    train = LocalCIFAR10(str(cifar), train=True)
    test = LocalCIFAR10(str(cifar), train=False)
    assert len(train) + len(test) == 60 and len(test) == 10
    img, label = train[0]
    assert img.size == (32, 32) and img.mode == "RGB"
    assert set(train.targets) <= set(range(10)) and len(set(train.targets)) == 10
    assert train.classes[0] == "airplane" and len(train.classes) == 10


def test_reader_matches_torchvision(cifar):
    ours = open_cifar10(cifar, train=True)
    theirs = LocalCIFAR10(str(cifar), train=True)
    assert np.array_equal(ours.data, theirs.data) and ours.targets == theirs.targets
    assert len(open_cifar10(cifar / "cifar-10-batches-py", train=False)) == 10


def test_batches_load_like_the_published_python2_files(cifar):
    path = cifar / "cifar-10-batches-py" / "data_batch_1"
    with path.open("rb") as fh:
        as_bytes = pickle.load(fh, encoding="bytes")
    assert b"data" in as_bytes and b"labels" in as_bytes
    assert as_bytes[b"data"].dtype == np.uint8 and as_bytes[b"data"].shape[1] == 3072
    with (cifar / "cifar-10-batches-py" / "batches.meta").open("rb") as fh:
        meta = pickle.load(fh, encoding="latin1")
    assert meta["label_names"][9] == "truck"


def test_class_decides_the_picture(cifar):
    ds = LocalCIFAR10(str(cifar), train=True)
    labels = np.asarray(ds.targets)
    red = ds.data[labels == 0].reshape(-1, 3).astype(int)  # class 0 is a red circle
    share = np.mean((red[:, 0] > 160) & (red[:, 1] < 100) & (red[:, 2] < 100))
    assert share > 0.15


def test_same_seed_same_files_other_seed_other_files(tmp_path):
    a = write_dataset("cifar10", tmp_path / "a", count=12, seed=1)
    b = write_dataset("cifar10", tmp_path / "b", count=12, seed=1)
    c = write_dataset("cifar10", tmp_path / "c", count=12, seed=2)
    assert _digest(a) == _digest(b) != _digest(c)


def test_empty_folder_is_a_data_error_with_the_fix(tmp_path):
    with pytest.raises(DataError, match="no CIFAR-10 batches under .*datagen cifar10"):
        open_cifar10(tmp_path)
    with pytest.raises(DataError, match="not found"):
        open_cifar10(tmp_path / "missing")


def test_corrupt_batch_names_the_file(cifar, tmp_path):
    import shutil

    root = tmp_path / "copy"
    shutil.copytree(cifar, root)
    bad = root / "cifar-10-batches-py" / "data_batch_3"
    bad.write_bytes(bad.read_bytes()[:100])
    with pytest.raises(DataError, match="data_batch_3"):
        open_cifar10(root, train=True)
    assert len(open_cifar10(root, train=False)) == 10  # the test split is still fine


def test_a_pickle_that_runs_code_is_refused_not_run(cifar, tmp_path):
    import shutil

    root = tmp_path / "copy"
    shutil.copytree(cifar, root)
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (Path.touch, (marker,))

    (root / "cifar-10-batches-py" / "test_batch").write_bytes(pickle.dumps({"data": Evil()}))
    with pytest.raises(DataError, match="test_batch"):
        open_cifar10(root, train=False)
    assert not marker.exists()


def test_cifar_size_is_fixed_and_count_has_a_floor(tmp_path):
    with pytest.raises(ConfigError, match="32x32"):
        generate("cifar10", tmp_path / "x", size=(64, 64))
    with pytest.raises(ConfigError, match="at least"):
        generate("cifar10", tmp_path / "y", count=3)
