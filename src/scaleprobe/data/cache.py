"""Where scaleprobe keeps what it makes once and reads again (the digits arrays, generated
JPEGs, token caches): ``--set data.cache_dir``, else ``$XDG_CACHE_HOME/scaleprobe`` or
``~/.cache/scaleprobe``. No torch: the digits' cache is read before torch is imported."""

from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "scaleprobe"
