"""Human formatting of figures for terminal tables (no torch), and ``esc`` for any text that
goes through rich."""

from __future__ import annotations

from typing import Any

from rich.markup import escape


def esc(v: Any) -> str:
    """Text that came from a user or an exception (a run name, a path, an error message) made
    safe for rich markup: ``[/oops]`` or ``[bold red]x[/]`` print as written, never as styles
    and never as a MarkupError."""
    return escape(str(v))


def num(v: Any, spec: str = ".1f", unit: str = "") -> str:
    return "n/a" if v is None else f"{v:{spec}}{unit}"


def bytes_(v: Any) -> str:
    if v is None:
        return "n/a"
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(v) >= div:
            return f"{v / div:.2f} {unit}" if unit == "GiB" else f"{v / div:.0f} {unit}"
    return f"{v} B"


def ms(v: Any) -> str:
    return "n/a" if v is None else f"{v * 1000:.1f} ms"


def pct(v: Any, scale: float = 100.0) -> str:
    return "n/a" if v is None else f"{v * scale:.1f}%"


def seconds(v: Any) -> str:
    return "n/a" if v is None else f"{v:.2f}s"
