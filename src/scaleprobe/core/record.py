"""What every record scaleprobe writes is made of: ``Record``, a dataclass base that reads a
JSON record (``from_dict``: a missing field reads as None, "not measured"; a field this
version does not declare is kept in ``extra`` and written back, so reading and writing a
record never loses a figure) and writes it (``to_dict``), and ``get``, a dotted read of a
record still in its dict form. The records themselves: ``core/result_model.py`` (a run, a
rank; their parts in ``core/run_metrics.py``, ``core/run_parts.py`` and
``core/rank_record.py``) and ``core/experiment_records.py``. Torch-free."""

from __future__ import annotations

import math
from dataclasses import fields
from types import UnionType
from typing import Any, ClassVar, TypeVar, Union, get_args, get_origin, get_type_hints


def get(rec: dict[str, Any], dotted: str, default: Any = None) -> Any:
    """``get(rec, "metrics.step_time_s.median")``; missing or null parts give ``default``."""
    cur: Any = rec
    for part in dotted.split("."):
        if not isinstance(cur, dict) or cur.get(part) is None:
            return default
        cur = cur[part]
    return cur


# ---- the typed result model -----------------------------------------------------------------
# Dataclasses for every record scaleprobe writes, on exactly the JSON schema above. Each one
# reads a record (``from_dict``: a missing field reads as None, "not measured"; a field this
# version does not declare is kept in ``extra`` and written back, so reading and writing a
# record never loses a figure) and writes it (``to_dict``). Derived figures are not stored
# here twice: they come from ``scaleprobe.core.metrics``.

_R = TypeVar("_R", bound="Record")


class Record:
    """Mixin for the dataclasses below: ``to_dict`` / ``from_dict`` on the JSON schema."""

    extra: dict[str, Any]
    # the folder a record was read from (report/reading/records.load_records); "" for one made here.
    # Not part of the record: never written.
    source = ""
    # fields written only where they hold something (older records never had them)
    OPTIONAL: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):  # type: ignore[arg-type]
            if f.name == "extra" or f.metadata.get("transient"):
                continue
            v = getattr(self, f.name)
            if v is not None or f.name not in self.OPTIONAL:
                out[f.name] = _dump(v)
        for k, v in self.extra.items():
            out.setdefault(k, v)
        return out

    @classmethod
    def from_dict(cls: type[_R], d: Any) -> _R:
        """The record ``d`` (a dict from JSON) as this class; raises TypeError on a record
        that is not a JSON object."""
        if isinstance(d, cls):
            return d
        if not isinstance(d, dict):
            raise TypeError(f"{cls.__name__}: expected a JSON object, got {type(d).__name__}")
        hints = _fields(cls)
        kwargs: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for k, v in d.items():
            if k in hints:
                loaded = _load(hints[k], v)
                if loaded is not _BAD:
                    kwargs[k] = loaded
                # else: a block of the wrong shape (a damaged or foreign file) reads as
                # not measured: the field keeps its default
            else:
                extra[k] = v
        return cls(**kwargs, extra=extra)  # type: ignore[call-arg]

    @classmethod
    def declares(cls, name: str) -> bool:
        """Is ``name`` a declared field (rather than one kept in ``extra``)?"""
        return name in _fields(cls)

    def get(self, dotted: str, default: Any = None) -> Any:
        """``result.get("metrics.step_time_s.median")`` on the record's JSON form."""
        return get(self.to_dict(), dotted, default)


_FIELDS: dict[type, dict[str, Any]] = {}


def _fields(cls: type) -> dict[str, Any]:
    """The type of each field a record reads and writes (not ``extra``, not a transient
    field: ``field(metadata=TRANSIENT)``, which lives in memory only)."""
    if cls not in _FIELDS:
        hints = get_type_hints(cls)
        _FIELDS[cls] = {f.name: hints[f.name] for f in fields(cls)
                        if f.name != "extra" and not f.metadata.get("transient")}
    return _FIELDS[cls]


TRANSIENT = {"transient": True}  # a field's metadata: kept in memory, never written or read


def _dump(v: Any) -> Any:
    if isinstance(v, Record):
        return v.to_dict()
    if isinstance(v, list):
        return [_dump(x) for x in v]
    if isinstance(v, dict):
        return {k: _dump(x) for k, x in v.items()}
    return v


def _record_type(hint: Any) -> type[Record] | None:
    """The Record class in ``X``, ``X | None``."""
    if isinstance(hint, type) and issubclass(hint, Record):
        return hint
    if get_origin(hint) in (Union, UnionType):
        for a in get_args(hint):
            if isinstance(a, type) and issubclass(a, Record):
                return a
    return None


_BAD = object()  # _load's answer for a value of the wrong shape


def _load(hint: Any, v: Any) -> Any:
    """``v`` read as a field declared ``hint``; ``_BAD`` for a value of another type (a
    damaged or foreign record): the field then keeps its default, "not measured". A number
    that is not finite reads as missing too, so a reader never meets NaN in a figure."""
    rt = _record_type(hint)
    if rt is not None:
        if isinstance(v, dict):
            return rt.from_dict(v)
        return None if v is None and hint is not rt else _BAD
    origin = get_origin(hint)
    if origin in (Union, UnionType):
        args = get_args(hint)
        if v is None:
            return None if type(None) in args else _BAD
        for a in args:
            if a is not type(None):
                got = _load(a, v)
                if got is not _BAD:
                    return got
        return _BAD
    if hint is Any or isinstance(hint, TypeVar):
        return v
    if origin is list or hint is list:
        if not isinstance(v, list):
            return _BAD
        (item,) = get_args(hint) or (Any,)
        it = _record_type(item)
        if it is not None:
            return [it.from_dict(x) for x in v if isinstance(x, dict)]
        return v
    if origin is tuple or hint is tuple:
        return v if isinstance(v, (list, tuple)) else _BAD
    if origin is dict or hint is dict:
        return v if isinstance(v, dict) else _BAD
    return v if _is_a(hint, v) else _BAD


def _is_a(hint: Any, v: Any) -> bool:
    """Is the JSON value ``v`` one of the plain type ``hint``? (a bool is no number; an int
    is a float; a float must be finite)"""
    if hint is bool:
        return isinstance(v, bool)
    if hint is int:
        return isinstance(v, int) and not isinstance(v, bool)
    if hint is float:
        return (isinstance(v, (int, float)) and not isinstance(v, bool)
                and math.isfinite(v))
    if hint is str:
        return isinstance(v, str)
    return True


