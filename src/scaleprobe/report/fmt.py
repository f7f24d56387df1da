"""Human formatting of figures for report tables, and Markdown table rendering. No torch.

Every formatter takes ``None`` and prints ``n/a``: a figure that was not measured is shown as
missing, never as zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

NA = "n/a"
GIB = 1 << 30


def _n(v: Any) -> Any:
    """Numbers pass, anything else (None, text, a misplaced dict) becomes None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        return None
    return v


def num(v: Any, spec: str = ".1f", unit: str = "") -> str:
    v = _n(v)
    return NA if v is None else f"{v:{spec}}{unit}"


def bytes_(v: Any) -> str:
    """2254857830 -> '2.1 GiB'; 44040192 -> '42 MiB'."""
    v = _n(v)
    if v is None:
        return NA
    for unit, div in (("TiB", 1 << 40), ("GiB", GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(v) >= div:
            scaled = v / div
            return f"{scaled:.1f} {unit}" if scaled < 100 else f"{scaled:.0f} {unit}"
    return f"{int(v)} B"


def size(v: Any) -> str:
    """Message sizes in the style of collective benchmarks: '1 KiB', '16 MiB'."""
    v = _n(v)
    if v is None:
        return NA
    for unit, div in (("GiB", GIB), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if v >= div:
            scaled = v / div
            return f"{scaled:g} {unit}" if scaled == int(scaled) else f"{scaled:.1f} {unit}"
    return f"{int(v)} B"


def ms(v_s: Any) -> str:
    """Seconds -> '12.3 ms' (or '1.20 s' from a second up)."""
    v_s = _n(v_s)
    if v_s is None:
        return NA
    if abs(v_s) >= 1.0:
        return f"{v_s:.2f} s"
    return f"{v_s * 1000:.1f} ms"


def us(v_s: Any) -> str:
    v_s = _n(v_s)
    return NA if v_s is None else f"{v_s * 1e6:.1f}"


def seconds(v_s: Any, projected: bool = False) -> str:
    v_s = _n(v_s)
    if v_s is None:
        return NA
    text = f"{v_s:.1f} s" if v_s < 600 else f"{v_s / 60:.1f} min"
    return f"~{text}" if projected else text


def pct(fraction: Any, digits: int = 0) -> str:
    """0.256 -> '26%'."""
    fraction = _n(fraction)
    return NA if fraction is None else f"{fraction * 100:.{digits}f}%"


def pct_value(value_pct: Any) -> str:
    """A value already in percent (CPU / GPU utilisation): 87.3 -> '87%'."""
    value_pct = _n(value_pct)
    return NA if value_pct is None else f"{value_pct:.0f}%"


def growth(rel: Any) -> str:
    """Relative change between consecutive points: 0.37 -> '+37%', -0.48 -> '-48%'; '-' where
    there is none (the first point of a group)."""
    rel = _n(rel)
    if rel is None:
        return "-"
    return f"{rel * 100:+.0f}%"


def signed_pct(rel: Any, digits: int = 1) -> str:
    rel = _n(rel)
    return NA if rel is None else f"{rel * 100:+.{digits}f}%"


def rate(v: Any) -> str:
    """Samples per second with sensible precision."""
    v = _n(v)
    if v is None:
        return NA
    if v >= 100:
        return f"{v:,.0f}"
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def tflops(flops_per_s: Any) -> str:
    """FLOP/s as TFLOP/s with three significant figures: 2.6e10 -> '0.0260'."""
    v = _n(flops_per_s)
    if v is None:
        return NA
    t = v / 1e12
    return f"{t:,.0f}" if t >= 100 else f"{t:.3g}" if t >= 0.001 else f"{t:.2e}"


def flops(v: Any, per_s: bool = False) -> str:
    """FLOPs (or FLOP/s) in the unit that reads: 4.2e6 -> '4.2 MFLOP', 2.781e10 -> '27.8
    GFLOP', 9.89e14 with per_s -> '989 TFLOP/s'."""
    v = _n(v)
    if v is None:
        return NA
    unit = "FLOP/s" if per_s else "FLOP"
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            x = v / scale
            return f"{x:.3g} {prefix}{unit}" if x < 1000 else f"{x:,.0f} {prefix}{unit}"
    return f"{v:.3g} {unit}"


def mfu(v: Any) -> str:
    """0.554 -> '55%', 0.034 -> '3.4%'."""
    v = _n(v)
    return NA if v is None else pct(v, 1 if v < 0.1 else 0)


def ratio(v: Any) -> str:
    v = _n(v)
    return NA if v is None else f"{v:.2f}x"


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]],
             right: Sequence[bool] | None = None) -> str:
    """A GitHub-flavoured Markdown table; ``right`` marks right-aligned (numeric) columns."""
    default = [i > 0 for i in range(len(headers))]
    # one alignment cell per header, always: a delimiter row of another width is not a table
    right = [*(right or default)[:len(headers)], *default[len(right or default):]]
    out = ["| " + " | ".join(_cell(h) for h in headers) + " |",
           "|" + "|".join("---:" if r else "---" for r in right) + "|"]
    for row in rows:
        out.append("| " + " | ".join(_cell(c) for c in row) + " |")
    return "\n".join(out)


def describe_point(point: dict[str, Any] | None) -> str:
    """{"batch_size": 64, "workers": 2} -> 'batch_size=64, workers=2'."""
    if not point:
        return ""
    return ", ".join(f"{k}={v}" for k, v in point.items())
