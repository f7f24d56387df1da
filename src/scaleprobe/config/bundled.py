"""The example specs and the docs that come with scaleprobe.

In a clone they are ``examples/`` and ``docs/`` at the top; the package reaches them through
the links ``src/scaleprobe/examples`` and ``src/scaleprobe/docs``, and an installed wheel
carries copies at the same place inside the package (pyproject.toml, package-data). So the
paths the README and the help name (``examples/sweep_quickstart.toml``, ``docs/REPORTS.md``)
can be found from wherever scaleprobe was installed.
"""

from __future__ import annotations

from pathlib import Path

KINDS = ("examples", "docs")


def bundled(kind: str) -> Path:
    """The folder of ``kind`` (``examples`` or ``docs``) that comes with this scaleprobe."""
    if kind not in KINDS:
        raise ValueError(f"{kind!r} is not one of {KINDS}")
    return (Path(__file__).parent.parent / kind).resolve()


def hint(path: str | Path) -> str:
    """For a path like ``examples/x.toml`` that is not where it was looked for: where the
    copy that comes with scaleprobe is (``""`` when there is none)."""
    parts = Path(path).parts
    if len(parts) < 2 or parts[0] not in KINDS:
        return ""
    copy = bundled(parts[0]).joinpath(*parts[1:])
    return f" (scaleprobe comes with a copy: {copy})" if copy.is_file() else ""
