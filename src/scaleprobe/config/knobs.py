"""Typed configuration values. Every field of the run configuration declares, in one place
(``config.py``): its type (the annotation), its default, one line of help, and the values it
accepts (a range or a list of choices), with :func:`option`. :class:`Knob` reads that
declaration back and checks a value against it:

- text (from a flag, ``--set``, or a string in a TOML file) is converted to the field's type;
- any other value must already have the type (an integer is also a number; ``true`` is not);
- numbers must be finite and in range, text one of the choices, integers fit in 64 bits.

A value that fails is a :class:`BadValue`: one line with the key, what it expects and what was
given, e.g. ``train.momentum: expected a number in [0, 1), got -0.5``.

Hand-written rather than built on a validation library: pydantic is not installed with
scaleprobe, and with it the ranges, choices, the "auto" of ``steps``, the messages and the
``--help`` text would still be written here; it would replace only the conversion of text.
"""

from __future__ import annotations

import math
import types
import typing
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from scaleprobe.core.errors import ConfigError
from scaleprobe.core.registry import suggest

INT_LIMIT = 2**63  # integers reach C code (torch, numpy) as signed 64-bit values
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
KIND_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
              list: "an array", dict: "a table"}


def option(default: Any, help: str = "", *, choices: tuple[str, ...] = (),
           ge: float | None = None, gt: float | None = None, le: float | None = None,
           lt: float | None = None, unset: str = "", text: str = "",
           valid: Callable[[str], bool] | None = None) -> Any:
    """A config field: ``default``, one line of ``help`` (unit or meaning), the range
    (``ge``/``gt``/``le``/``lt``) or ``choices`` it accepts, what ``None`` means (``unset``)
    when the default is ``None``; for free text, what it must be (``text``, checked by
    ``valid``)."""
    return field(default=default, metadata={"help": help, "choices": tuple(choices), "ge": ge,
                                            "gt": gt, "le": le, "lt": lt, "unset": unset,
                                            "text": text, "valid": valid})


class BadValue(ConfigError):
    """A value that does not fit its key's declared type or range."""

    def __init__(self, key: str, expected: str, given: str, hint: str = "") -> None:
        self.key, self.problem = key, f"expected {expected}, got {given}{hint}"
        super().__init__(f"{key}: {self.problem}")


def show(value: Any, kinds: tuple[type, ...] = ()) -> str:
    """A value as a message shows it: short, on one line, with its kind when that is wrong."""
    try:
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, int) and value.bit_length() > 64:
            text = f"an integer of {value.bit_length()} bits"
        else:
            text = repr(value)
    except (ValueError, RecursionError):  # integers too long to print, arrays nested too deep
        text = "a value too large to show"
    if len(text) > 60:
        text = text[:57] + "..."
    wrong_kind = not isinstance(value, str) and type(value) not in kinds and not (
        type(value) is int and float in kinds)
    kind = KIND_NAMES.get(type(value), type(value).__name__)
    return f"{text} ({kind})" if wrong_kind and not text.startswith(kind) else text


def _num(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


@dataclass(frozen=True)
class Knob:
    """One config key: its declared type, default, help and accepted values."""

    key: str  # full dotted key, e.g. train.momentum
    kinds: tuple[type, ...]  # of bool, int, float, str (None apart)
    nullable: bool
    default: Any
    help: str = ""
    choices: tuple[str, ...] = ()  # accepted text (for int | str: the words besides numbers)
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    unset: str = ""  # what None means, for --help
    text: str = ""  # what free text must be, in words
    valid: Callable[[str], bool] | None = None  # and the check of it

    @classmethod
    def from_field(cls, key: str, f: Any, hint: Any) -> Knob:
        args = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
        md = f.metadata
        return cls(key, tuple(a for a in args if a is not type(None)), type(None) in args,
                   f.default, md.get("help", ""), md.get("choices", ()), md.get("ge"),
                   md.get("gt"), md.get("le"), md.get("lt"), md.get("unset", ""),
                   md.get("text", ""), md.get("valid"))

    def range_text(self) -> str:
        lo = ("[", self.ge) if self.ge is not None else ("(", self.gt) if self.gt is not None \
            else None
        hi = (self.le, "]") if self.le is not None else (self.lt, ")") if self.lt is not None \
            else None
        if lo and hi:
            return f" in {lo[0]}{_num(lo[1])}, {_num(hi[0])}{hi[1]}"
        if lo:
            return f" {'>=' if lo[0] == '[' else '>'} {_num(lo[1])}"
        if hi:
            return f" {'<=' if hi[1] == ']' else '<'} {_num(hi[0])}"
        return ""

    def expected(self) -> str:
        """What the key accepts, in words: ``a number in [0, 1)``, ``one of sgd, adamw``."""
        if bool in self.kinds:
            return "true or false"
        words = ("one of " + ", ".join(self.choices) if self.choices
                 else self.text or "a non-empty string")
        if int in self.kinds or float in self.kinds:
            num = ("a whole number" if int in self.kinds else "a number") + self.range_text()
            if str in self.kinds:
                return num + " or " + " or ".join(f"'{c}'" for c in self.choices)
            return num
        return words

    def bad(self, value: Any, hint: str = "", expected: str | None = None) -> BadValue:
        return BadValue(self.key, expected or self.expected(), show(value, self.kinds), hint)

    def check(self, value: Any, parse: bool = True) -> Any:
        """``value`` converted to the key's type (text, when ``parse``) and checked."""
        v = self._from_text(value) if parse and isinstance(value, str) else value
        if v is None:
            if self.nullable:
                return None
            raise self.bad(value)
        if isinstance(v, bool) or bool in self.kinds:
            if isinstance(v, bool) and bool in self.kinds:
                return v
            raise self.bad(value)
        if isinstance(v, int) and int in self.kinds:
            return self._in_range(v, value)
        if isinstance(v, int | float) and float in self.kinds:
            try:
                v = float(v)
            except OverflowError:
                raise self.bad(value) from None
            return self._in_range(v, value)
        if isinstance(v, str) and str in self.kinds:
            return self._text(v, value)
        raise self.bad(value)

    def _from_text(self, text: str) -> Any:
        t = text.strip()
        if self.nullable and t.lower() in ("none", "null"):
            return None
        if bool in self.kinds:
            if t.lower() in TRUE_WORDS + FALSE_WORDS:
                return t.lower() in TRUE_WORDS
            raise self.bad(text)
        for kind in (int, float):
            if kind in self.kinds:
                try:
                    return kind(t)
                except ValueError:  # also: more digits than Python converts
                    if str not in self.kinds:
                        raise self.bad(text) from None
        return t

    def _in_range(self, v: float, given: Any) -> float:
        ok = (math.isfinite(v) and abs(v) < INT_LIMIT
              and (self.ge is None or v >= self.ge) and (self.gt is None or v > self.gt)
              and (self.le is None or v <= self.le) and (self.lt is None or v < self.lt))
        if not ok:
            raise self.bad(given)
        return v

    def _text(self, v: str, given: Any) -> str:
        if self.choices:
            if v not in self.choices:
                near = suggest(v, list(self.choices))
                raise self.bad(given, f"; did you mean {', '.join(near)}?" if near else "")
            return v
        if not v:
            raise self.bad(given)
        if any(unicodedata.category(c) == "Cc" for c in v):
            raise self.bad(given, expected="text without control characters")
        if self.valid is not None and not self.valid(v):
            raise self.bad(given)
        return v

    def default_text(self) -> str:
        """The default as ``--help`` shows it: ``64``, ``0.05``, ``30 s``, ``off``, ``auto``."""
        d = self.default
        if d is None:
            return self.unset or "none"
        if isinstance(d, bool):
            return "on" if d else "off"
        text = _num(d) if isinstance(d, int | float) else str(d)
        return text + (" s" if self.key.endswith("_s") else "")


def knobs(cls: type, prefix: str = "") -> dict[str, Knob]:
    """The knobs of a config dataclass's fields, by full key (``prefix`` + field name)."""
    hints = typing.get_type_hints(cls)
    return {prefix + f.name: Knob.from_field(prefix + f.name, f, hints[f.name])
            for f in fields(cls)}
