"""Name / description listings for the terminal (``scaleprobe models``, ``datasets``): the
names in one column, each description wrapped to the terminal with its continuation lines
under the description, never past the right edge."""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Iterable


def columns(rows: Iterable[tuple[str, str]], width: int | None = None) -> str:
    """``name  description`` lines; the name column as wide as the longest name (at most 36:
    a longer name takes its own line)."""
    rows = list(rows)
    width = width or shutil.get_terminal_size((100, 24)).columns
    width = max(width, 60)
    pad = min(max((len(n) for n, _ in rows), default=0), 36) + 2
    out = []
    for name, desc in rows:
        if len(name) + 2 > pad:
            out.append(name)
            first = " " * pad
        else:
            first = name.ljust(pad)
        out.append(textwrap.fill(desc, width - 1, initial_indent=first,
                                 subsequent_indent=" " * pad, break_on_hyphens=False))
    return "\n".join(out)
