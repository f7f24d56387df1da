"""Human formatting of figures for terminal tables (no torch)."""

from __future__ import annotations

from typing import Any

from scaleprobe.report.fmt import bytes_  # one byte formatter for the terminal and the report

__all__ = ["bytes_", "ms", "num", "pct", "seconds"]


def num(v: Any, spec: str = ".1f", unit: str = "") -> str:
    return "n/a" if v is None else f"{v:{spec}}{unit}"


def ms(v: Any) -> str:
    return "n/a" if v is None else f"{v * 1000:.1f} ms"


def pct(v: Any, scale: float = 100.0) -> str:
    return "n/a" if v is None else f"{v * scale:.1f}%"


def seconds(v: Any) -> str:
    return "n/a" if v is None else f"{v:.2f}s"
