"""Human formatting of figures for report tables, and Markdown table rendering. No torch.

Every formatter takes ``None`` and prints ``n/a``: a figure that was not measured is shown as
missing, never as zero.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import Any, Concatenate, ParamSpec

NA = "n/a"
GIB = 1 << 30
P = ParamSpec("P")


def _n(v: Any) -> Any:
    """Numbers pass, anything else (None, text, a misplaced dict) becomes None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        return None
    return v


def _or_na(fmt: Callable[Concatenate[float, P], str]) -> Callable[Concatenate[Any, P], str]:
    """A formatter of a number that prints ``n/a`` for anything ``_n`` does not pass."""

    @functools.wraps(fmt)
    def guarded(v: Any, /, *args: P.args, **kwargs: P.kwargs) -> str:
        v = _n(v)
        return NA if v is None else fmt(v, *args, **kwargs)

    return guarded


def _in_unit(v: float, units: Sequence[tuple[str, float]], below: str,
             scaled: Callable[[float], str]) -> str:
    """``v`` in the first of ``units`` ((name, size), largest first) it reaches, the number
    written by ``scaled``; ``below`` when it reaches none."""
    for unit, div in units:
        if abs(v) >= div:
            return f"{scaled(v / div)} {unit}"
    return below


_BINARY = (("TiB", 1 << 40), ("GiB", GIB), ("MiB", 1 << 20), ("KiB", 1 << 10))


@_or_na
def num(v: float, spec: str = ".1f", unit: str = "") -> str:
    return f"{v:{spec}}{unit}"


@_or_na
def bytes_(v: float) -> str:
    """2254857830 -> '2.1 GiB'; 44040192 -> '42 MiB'."""
    return _in_unit(v, _BINARY, f"{int(v)} B", lambda x: f"{x:.1f}" if x < 100 else f"{x:.0f}")


@_or_na
def size(v: float) -> str:
    """Message sizes in the style of collective benchmarks: '1 KiB', '16 MiB'."""
    return _in_unit(v, _BINARY[1:], f"{int(v)} B",
                    lambda x: f"{x:g}" if x == int(x) else f"{x:.1f}")


@_or_na
def duration(v_s: float, projected: bool = False) -> str:
    """A time, one way everywhere (report, terminal, compare): '412.3 ms' below a second,
    '1.50 s' below 10 s, '95.8 s' below 10 minutes, then '12.5 min'; '~' where projected."""
    a = abs(v_s)
    text = (f"{v_s * 1000:.1f} ms" if a < 1.0 else f"{v_s:.2f} s" if a < 10.0
            else f"{v_s:.1f} s" if a < 600.0 else f"{v_s / 60:.1f} min")
    return f"~{text}" if projected else text


def durations(values: Sequence[Any], projected: Sequence[bool] = ()) -> list[str]:
    """A table column of times in one unit (never '65.1 ms' above '1.25 s'): milliseconds
    where the column's middle value is below a second, else seconds; '~' before the values
    marked ``projected``."""
    nums = sorted(v for v in map(_n, values) if v is not None)
    if not nums:
        return [NA for _ in values]
    in_ms = nums[len(nums) // 2] < 1.0

    @_or_na
    def one(v: float) -> str:
        if in_ms:
            x = v * 1000
            return f"{x:,.1f} ms" if abs(x) < 100 else f"{x:,.0f} ms"
        return (f"{v:.3f} s" if abs(v) < 1 else f"{v:,.2f} s" if abs(v) < 10
                else f"{v:,.1f} s")

    marks = [*projected, *[False] * len(values)]
    return [("~" if mark and _n(v) is not None else "") + one(v)
            for v, mark in zip(values, marks, strict=False)]


@_or_na
def us(v_s: float) -> str:
    return f"{v_s * 1e6:.1f}"


@_or_na
def pct(fraction: float, digits: int = 0) -> str:
    """0.256 -> '26%'."""
    return f"{fraction * 100:.{digits}f}%"


@_or_na
def pct_value(value_pct: float) -> str:
    """A value already in percent (CPU / GPU utilisation): 87.3 -> '87%'."""
    return f"{value_pct:.0f}%"


def growth(rel: Any) -> str:
    """Relative change between consecutive points: 0.37 -> '+37%', -0.48 -> '-48%'; '-' where
    there is none (the first point of a group)."""
    rel = _n(rel)
    if rel is None:
        return "-"
    return f"{rel * 100:+.0f}%"


@_or_na
def signed_pct(rel: float, digits: int = 1) -> str:
    return f"{rel * 100:+.{digits}f}%"


@_or_na
def rate(v: float) -> str:
    """Samples per second with sensible precision."""
    if v >= 100:
        return f"{v:,.0f}"
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}"


@_or_na
def tflops(flops_per_s: float) -> str:
    """FLOP/s as TFLOP/s with three significant figures: 2.6e10 -> '0.0260'."""
    t = flops_per_s / 1e12
    return f"{t:,.0f}" if t >= 100 else f"{t:.3g}" if t >= 0.001 else f"{t:.2e}"


def flops_column(values: Sequence[Any]) -> tuple[str, list[str]]:
    """A column of FLOP/s in the unit that reads for its largest value, with its header:
    ('TFLOP/s', ['312', '298']) on a GPU, ('GFLOP/s', ['3.49', '5.19']) on a CPU, never
    '2.40e-04' TFLOP/s."""
    nums = [abs(v) for v in map(_n, values) if v is not None]
    if not nums:
        return "TFLOP/s", [NA for _ in values]
    top = max(nums)
    unit, div = next(((u, d) for u, d in (("TFLOP/s", 1e12), ("GFLOP/s", 1e9),
                                            ("MFLOP/s", 1e6)) if top >= d), ("MFLOP/s", 1e6))

    @_or_na
    def one(v: float) -> str:
        x = v / div
        return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"

    return unit, [one(v) for v in values]


@_or_na
def flops(v: float, per_s: bool = False) -> str:
    """FLOPs (or FLOP/s) in the unit that reads: 4.2e6 -> '4.2 MFLOP', 2.781e10 -> '27.8
    GFLOP', 9.89e14 with per_s -> '989 TFLOP/s'."""
    unit = "FLOP/s" if per_s else "FLOP"
    prefixes = (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3))
    return _in_unit(v, [(p + unit, div) for p, div in prefixes], f"{v:.3g} {unit}",
                    lambda x: f"{x:.3g}" if x < 1000 else f"{x:,.0f}")


@_or_na
def mfu(v: float) -> str:
    """0.554 -> '55%', 0.034 -> '3.4%'."""
    return pct(v, 1 if v < 0.1 else 0)


@_or_na
def ratio(v: float) -> str:
    return f"{v:.2f}x"


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


def clipped(text: str, width: int = 80) -> str:
    """``text`` in at most ``width`` characters, cut at a word with `` ...`` (a table cell
    that holds an error: its whole text is in the record)."""
    text = " ".join(str(text).split())
    if len(text) <= width:
        return text
    cut = text[:width - 4].rsplit(" ", 1)[0] if " " in text[:width - 4] else text[:width - 4]
    return cut.rstrip(",;:") + " ..."


def phase_name(phase: str, gpu: bool) -> str:
    """A step phase as a reader knows it. 'h2d' (the record's key) is the copy of a batch to
    the GPU; on a CPU nothing is copied and the phase is what the loop does to the batch
    there (dtype and memory-format conversion): 'batch prep'."""
    if phase == "h2d":
        return "to device" if gpu else "batch prep"
    return phase


def repeat_label(index: int) -> str:
    """A repeat as every text names it, counted from 1: repeat index 0 -> 'repeat 1' (the
    terminal and the report once said 'repeat 2' and '#1' for the same run)."""
    return f"repeat {index + 1}"


def describe_point(point: dict[str, Any] | None) -> str:
    """{"batch_size": 64, "workers": 2} -> 'batch_size=64, workers=2'."""
    if not point:
        return ""
    return ", ".join(f"{k}={v}" for k, v in point.items())


def same_but_figures(notes: Sequence[str], where: str) -> list[str]:
    """The notes once each, those that differ only in their figures (one per device count:
    ``on 2 ranks: all-gather 0.923 ms`` and ``on 4 ranks: ... 1.76 ms``) as the first of
    them, saying the others are alike and ``where`` they are."""
    groups: dict[str, list[str]] = {}
    for n in dict.fromkeys(notes):
        groups.setdefault(re.sub(r"\d[\d.,]*", "#", n), []).append(n)
    return [g[0] if len(g) == 1 else
            f"{g[0]} (and {len(g) - 1} more like it, with other figures: {where})"
            for g in groups.values()]
