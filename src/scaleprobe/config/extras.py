"""Optional parts of scaleprobe and the pip extra that installs the libraries each needs.

    pip install 'scaleprobe[detection]'   --task detection with --eval: mAP through torchmetrics
                                          with the pycocotools backend
    pip install 'scaleprobe[face]'        datagen lfw: scikit-image's bundled face crops
    pip install 'scaleprobe[all]'         both

Without them everything else works; asking for one of these parts stops in one line that
names the extra (``require``).
"""

from __future__ import annotations

import importlib
import importlib.util

from scaleprobe.core.errors import ConfigError

EXTRAS: dict[str, tuple[str, ...]] = {  # extra -> modules it provides
    "detection": ("torchmetrics", "pycocotools"),
    "face": ("skimage",),
}
DISTRIBUTIONS = {"skimage": "scikit-image"}  # module -> what pip calls it, where they differ


def missing(extra: str) -> list[str]:
    """The distributions of ``extra`` that cannot be imported here."""
    out = []
    for module in EXTRAS[extra]:
        try:
            importlib.import_module(module)
        except ImportError:
            out.append(DISTRIBUTIONS.get(module, module))
    return out


def not_found(extra: str) -> list[str]:
    """The distributions of ``extra`` that are not installed, found without importing them
    (torchmetrics imports torch): the configuration's early check; ``missing`` imports."""
    out = []
    for module in EXTRAS[extra]:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out.append(DISTRIBUTIONS.get(module, module))
    return out


def require_installed(extra: str, what: str) -> None:
    """``require`` without importing anything: for the checks made before torch is."""
    _stop(not_found(extra), extra, what)


def require(extra: str, what: str) -> None:
    """A one-line ConfigError naming the extra when ``what`` cannot run without it."""
    _stop(missing(extra), extra, what)


def _stop(gone: list[str], extra: str, what: str) -> None:
    if gone:
        raise ConfigError(f"{what} needs {' and '.join(gone)}, not installed: "
                          f"pip install 'scaleprobe[{extra}]' (in a clone: "
                          f"pip install -e '.[{extra}]')")
