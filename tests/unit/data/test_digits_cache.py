"""The digits arrays kept in the cache folder: the same data as scikit-learn's, written once."""

import numpy as np
from sklearn.datasets import load_digits

from scaleprobe.data.digits import digits_arrays


def test_cached_digits_are_scikit_learns_and_are_read_back(tmp_path):
    """Bug caught: a cache that changes the data (dtype, order, a truncated file) or is
    rewritten on every load."""
    d = load_digits()
    images, target = digits_arrays(tmp_path)
    (cached,) = tmp_path.glob("digits-sklearn-*.npz")
    mtime = cached.stat().st_mtime_ns
    again_images, again_target = digits_arrays(tmp_path)
    assert cached.stat().st_mtime_ns == mtime  # read, not written again
    for imgs, tgt in ((images, target), (again_images, again_target)):
        assert imgs.dtype == d.images.dtype and np.array_equal(imgs, d.images)
        assert tgt.dtype == d.target.dtype and np.array_equal(tgt, d.target)
    assert not list(tmp_path.glob(".digits-*"))  # no temporary file left


def test_a_damaged_cache_file_is_replaced_not_trusted(tmp_path):
    digits_arrays(tmp_path)
    (cached,) = tmp_path.glob("digits-sklearn-*.npz")
    cached.write_bytes(cached.read_bytes()[:100])  # cut short, as by a full disk
    images, target = digits_arrays(tmp_path)
    assert np.array_equal(images, load_digits().images) and len(target) == 1797
    assert np.array_equal(np.load(cached)["target"], target)  # written whole again


def test_an_unwritable_cache_folder_still_gives_the_data(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    images, target = digits_arrays(blocker / "cache")
    assert images.shape == (1797, 8, 8) and len(target) == 1797
