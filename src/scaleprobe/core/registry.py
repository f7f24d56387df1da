"""Name -> builder registries, with close-match suggestions for typos."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from typing import Any

from scaleprobe.core.errors import ConfigError


def _stem(name: str) -> str:
    return re.sub(r"\d+$", "", name.lower())


def suggest(name: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """Close matches for ``name``: similar spelling first, then same stem (resnet35 -> resnet34)."""
    choices = list(dict.fromkeys(choices))
    near = difflib.get_close_matches(name, choices, n=n, cutoff=0.6)
    if len(near) < n and _stem(name):
        stem = _stem(name)
        near += [c for c in sorted(choices) if _stem(c) == stem and c not in near]
    return near[:n]


class Registry:
    """A named collection of builders: ``reg.add(name, fn, help)``, ``reg.get(name)``."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, tuple[Callable[..., Any], str]] = {}

    def add(self, name: str, fn: Callable[..., Any], help: str = "") -> None:
        self._items[name] = (fn, help)

    def register(self, name: str, help: str = "") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.add(name, fn, help)
            return fn

        return deco

    def names(self) -> list[str]:
        return sorted(self._items)

    def describe(self) -> list[tuple[str, str]]:
        return [(n, self._items[n][1]) for n in self.names()]

    def __contains__(self, name: str) -> bool:
        return name in self._items

    def get(self, name: str) -> Callable[..., Any]:
        if name not in self._items:
            near = suggest(name, self._items)
            hint = f"; did you mean {', '.join(near)}?" if near else ""
            raise ConfigError(f"unknown {self.kind} '{name}'{hint}")
        return self._items[name][0]
