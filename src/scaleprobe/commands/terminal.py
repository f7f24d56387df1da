"""Human formatting of figures for terminal tables (no torch), and ``esc`` for any text that
goes through rich."""

from __future__ import annotations

from typing import Any

from rich.markup import escape

# one byte and one time formatter for the terminal and the report
from scaleprobe.core.fmt import bytes_, duration

__all__ = ["bytes_", "duration", "esc", "num", "pct"]


def esc(v: Any) -> str:
    """Text that came from a user or an exception (a run name, a path, an error message) made
    safe for rich markup: ``[/oops]`` or ``[bold red]x[/]`` print as written, never as styles
    and never as a MarkupError."""
    return escape(str(v))


def num(v: Any, spec: str = ".1f", unit: str = "") -> str:
    return "n/a" if v is None else f"{v:{spec}}{unit}"


def pct(v: Any, scale: float = 100.0) -> str:
    return "n/a" if v is None else f"{v * scale:.1f}%"

