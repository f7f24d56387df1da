"""scikit-learn's digits (1,797 real 8x8 handwritten images), the default data.

``load_digits`` imports scikit-learn, and with it ``scipy.stats``: about 0.7 s of every run's
start on a 2-core machine, more than a short run trains. The arrays are kept after the first
load in the cache folder (``--set data.cache_dir``, else ``$XDG_CACHE_HOME/scaleprobe`` or
``~/.cache/scaleprobe``) under scikit-learn's version, written whole or not at all; a cache
that cannot be read or written costs only the import, never the data.
"""

from __future__ import annotations

import os
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np

from scaleprobe.data.cache import default_cache_dir


def digits_arrays(cache_root: str | Path | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(images N x 8 x 8 float64 in 0..16, targets N int64), as ``load_digits`` gives them."""
    path = _cache_path(cache_root)
    if path is not None:
        try:
            with np.load(path) as z:
                return z["images"], z["target"]
        except Exception:  # noqa: BLE001  (absent, cut short, not a zip: load and rewrite it)
            pass
    from sklearn.datasets import load_digits  # heavy: sklearn

    d = load_digits()
    images, target = np.asarray(d.images), np.asarray(d.target)
    if path is not None:
        _write(path, images, target)
    return images, target


def _cache_path(cache_root: str | Path | None) -> Path | None:
    try:
        tag = version("scikit-learn")
    except PackageNotFoundError:
        return None
    if cache_root is None:
        cache_root = default_cache_dir()
    return Path(cache_root) / f"digits-sklearn-{tag}.npz"


def _write(path: Path, images: np.ndarray, target: np.ndarray) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".digits-", suffix=".npz")
    except OSError:
        return  # a read-only cache folder: load from scikit-learn every time
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, images=images, target=target)
        os.replace(tmp, path)  # ranks loading at once each write a whole file; one wins
    except OSError:
        Path(tmp).unlink(missing_ok=True)
