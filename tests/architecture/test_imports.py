"""Imports stay where a reader expects them (docs/ARCHITECTURE.md, "Imports"): at the top of
the module, with no cycle between scaleprobe's modules; an import inside a function is the
exception, for a heavy or optional library, and says which on its line or the line above:

    import torch  # heavy: torch stays out of the CLI's start-up
    # optional: submitit (the cluster extra)
    import submitit

(a comment above a group of imports, with no blank line between them, covers the group).

The graph is read from the source with `ast`, so a failure names the file, the line and the
cycle; a package's `__init__` counts as imported by every import of it or of a module in it,
and an import inside a function counts as an import (it defers a cycle, it does not break it)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PKG = SRC / "scaleprobe"
MAX_SHARE = 0.10
# the first word after the tag names the library that makes the import worth deferring
REASON = re.compile(r"#\s*(heavy|optional):\s*([A-Za-z_][\w.]*)")
LIBRARIES = {"torch", "torchvision", "torchmetrics", "pycocotools", "submitit", "matplotlib",
             "scipy", "sklearn", "skimage", "numpy", "PIL", "pynvml", "tensorboard", "rich",
             "psutil"}


@dataclass(frozen=True)
class Imp:
    module: str        # the importing module, dotted
    path: Path
    line: int
    targets: tuple     # dotted names imported (modules, or modules the names come from)
    in_function: bool
    type_only: bool    # under `if TYPE_CHECKING:`: never runs
    after: int = 0     # the line of the import right above it in the same block, if any


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _targets(node: ast.AST, mod: str, is_pkg: bool, modules: set[str]) -> tuple:
    if isinstance(node, ast.Import):
        return tuple(a.name for a in node.names)
    if node.level:
        base = mod.split(".") if is_pkg else mod.split(".")[:-1]
        base = base[:len(base) - node.level + 1]
        src = ".".join(base + ([node.module] if node.module else []))
    else:
        src = node.module or ""
    # `from P import m` imports the module P.m where m is one, else a name of P
    return (src,) + tuple(f"{src}.{a.name}" for a in node.names if f"{src}.{a.name}" in modules)


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def scan() -> tuple[list[Imp], set[str]]:
    paths = sorted(PKG.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    out: list[Imp] = []
    for p in paths:
        _scan_file(p, modules, out)
    return out, modules


def _scan_file(p: Path, modules: set[str], out: list[Imp]) -> None:
    mod, is_pkg = module_name(p), _is_package(p)

    def visit(node, in_fn, type_only):
        prev = None
        for ch in ast.iter_child_nodes(node):
            if isinstance(ch, (ast.Import, ast.ImportFrom)):
                above = prev.lineno if prev is not None and prev.end_lineno == ch.lineno - 1 else 0
                out.append(Imp(mod, p, ch.lineno, _targets(ch, mod, is_pkg, modules),
                               in_fn, type_only, above))
                prev = ch
                continue
            prev = None
            if isinstance(ch, ast.If) and _type_checking(ch.test):
                for sub in ch.body:
                    visit(ast.Module(body=[sub], type_ignores=[]), in_fn, True)
                for sub in ch.orelse:
                    visit(ast.Module(body=[sub], type_ignores=[]), in_fn, type_only)
            else:
                fn = isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                visit(ch, in_fn or fn, type_only)

    visit(ast.parse(p.read_text(), str(p)), False, False)


def internal(imp: Imp) -> bool:
    return any(t == "scaleprobe" or t.startswith("scaleprobe.") for t in imp.targets)


def where(imp: Imp) -> str:
    return f"{imp.path.relative_to(SRC.parent)}:{imp.line}"


def graph(imports: list[Imp], modules: set[str]) -> dict[str, dict[str, Imp]]:
    """Module -> {module it imports: the import statement}, from every import that runs, at
    the top or inside a function (an import moved into a function still closes a cycle, it
    only hides it until the call); not those under TYPE_CHECKING, which never run. Importing
    a.b.c runs a's and a.b's `__init__` too, except the packages the importer is itself
    inside (already running)."""
    edges: dict[str, dict[str, Imp]] = {m: {} for m in modules}
    for imp in sorted(imports, key=lambda i: i.in_function):  # name a top-level line first
        if imp.type_only:
            continue
        mine = imp.module.split(".")
        own = {".".join(mine[:i]) for i in range(1, len(mine) + 1)}
        for t in imp.targets:
            parts = t.split(".")
            for i in range(1, len(parts) + 1):
                dep = ".".join(parts[:i])
                if dep in modules and dep not in own:
                    edges[imp.module].setdefault(dep, imp)
    return edges


def cycles(edges: dict[str, dict[str, Imp]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each as one
    closed path through it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    limit = sys.getrecursionlimit()  # the walk is recursive; the limit is the session's
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for v in sorted(edges):
            if v not in index:
                strong(v)
    finally:
        sys.setrecursionlimit(limit)
    return [_closed_path(sorted(c)[0], set(c), edges) for c in comps]


def _closed_path(start: str, comp: set[str], edges) -> list[str]:
    prev: dict[str, str] = {}
    todo, seen = [start], {start}
    while todo:
        v = todo.pop(0)
        for w in sorted(edges[v]):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return path[::-1] + [start]
            if w in comp and w not in seen:
                seen.add(w)
                prev[w] = v
                todo.append(w)
    return [start]


def describe(path: list[str], edges) -> str:
    return "\n    ".join(f"{a} -> {b}  ({where(edges[a][b])})" for a, b in zip(path, path[1:], strict=False))


def reason_of(imp: Imp, lines: list[str], imports: list[Imp] = ()) -> re.Match | None:
    """The reason on the import's line or on the comment line above it; an import right
    under another (no blank line: one group) and with no comment of its own shares the
    group's reason."""
    here = lines[imp.line - 1]
    above = lines[imp.line - 2].strip() if imp.line > 1 else ""
    found = REASON.search(here) or (REASON.match(above) if above.startswith("#") else None)
    if found is None and imp.after and "#" not in here:
        prev = next((i for i in imports if i.path == imp.path and i.line == imp.after), None)
        return reason_of(prev, lines, imports) if prev is not None else None
    return found


def test_few_imports_sit_inside_functions():
    imports, _ = scan()
    mine = [i for i in imports if internal(i)]
    inner = [i for i in mine if i.in_function]
    share = len(inner) / len(mine)
    by_file: dict[str, int] = {}
    for i in inner:
        by_file[str(i.path.relative_to(SRC.parent))] = by_file.get(
            str(i.path.relative_to(SRC.parent)), 0) + 1
    worst = sorted(by_file.items(), key=lambda kv: -kv[1])[:10]
    assert share <= MAX_SHARE, (
        f"{len(inner)} of {len(mine)} internal imports ({share:.0%}) are inside functions "
        f"(at most {MAX_SHARE:.0%}); the files with most: {worst}")


def test_an_import_inside_a_function_says_why():
    imports, _ = scan()
    text: dict[Path, list[str]] = {}
    missing = []
    for imp in imports:
        if not imp.in_function:
            continue
        lines = text.setdefault(imp.path, imp.path.read_text().splitlines())
        m = reason_of(imp, lines, imports)
        if m is None or m.group(2).split(".")[0] not in LIBRARIES:
            missing.append(f"{where(imp)}: {lines[imp.line - 1].strip()}")
    assert not missing, (
        f"{len(missing)} imports inside functions without a reason naming a heavy or optional "
        "library (`# heavy: torch ...` or `# optional: submitit ...` on the line or above; "
        "docs/ARCHITECTURE.md); move them to the top of the module where that is cheap:\n"
        + "\n".join(missing[:60]))


def test_no_import_cycle_between_modules():
    imports, modules = scan()
    edges = graph(imports, modules)
    found = cycles(edges)
    assert not found, f"{len(found)} import cycles between scaleprobe's modules:\n" + "\n".join(
        "  " + " -> ".join(c) + "\n    " + describe(c, edges) for c in found)


def test_the_checks_catch_what_they_look_for(tmp_path, monkeypatch):
    """The scanner sees a cycle closed through a package's __init__, a relative import and
    an import in a function (not one only a type checker follows), and an import in a
    function with and without its reason (so the tests above can fail)."""
    pkg = tmp_path / "scaleprobe"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nfrom scaleprobe.sub import thing\n"
                              "if TYPE_CHECKING:\n    from scaleprobe import c\n")
    (pkg / "c.py").write_text("from scaleprobe import a\n")  # a cycle only for a type checker
    (pkg / "sub" / "__init__.py").write_text("from .b import thing\n")
    (pkg / "sub" / "b.py").write_text(
        "import json\nthing = 1\n\ndef f():\n    import torch  # heavy: torch\n"
        "    # optional: submitit (the cluster extra)\n    import submitit\n"
        "    from scaleprobe import a  # a habit\n    import torch.nn  # heavy: nothing\n"
        "\ndef g():\n    # heavy: torch\n    import torch\n    import torch.distributed\n\n"
        "    import torch.fx\n")
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PKG", pkg)
    imports, modules = scan()
    assert modules == {"scaleprobe", "scaleprobe.a", "scaleprobe.c", "scaleprobe.sub",
                       "scaleprobe.sub.b"}
    edges = graph(imports, modules)
    assert edges["scaleprobe.sub"] == {"scaleprobe.sub.b": edges["scaleprobe.sub"]["scaleprobe.sub.b"]}
    assert edges["scaleprobe.sub.b"]["scaleprobe.a"].line == 8  # closed inside a function
    assert cycles(edges) == [["scaleprobe.a", "scaleprobe.sub", "scaleprobe.sub.b", "scaleprobe.a"]]
    inner = [i for i in imports if i.in_function]
    assert [i.line for i in inner] == [5, 7, 8, 9, 13, 14, 16]
    lines = (pkg / "sub" / "b.py").read_text().splitlines()
    ok = [bool((m := reason_of(i, lines, imports)) and m.group(2) in LIBRARIES) for i in inner]
    assert ok == [True, True, False, False, True, True, False]
    assert [internal(i) for i in inner] == [False, False, True, False, False, False, False]


def test_the_cli_starts_without_torch():
    """`scaleprobe --help` builds every command's parser: none of it imports torch or
    torchvision (seconds before the first line of help), nor matplotlib, scipy, submitit or
    rich, which only some commands use."""
    code = ("import sys; from scaleprobe.cli import build_parser; build_parser(); "
            "heavy = sorted(m for m in ('torch', 'torchvision', 'matplotlib', 'scipy', "
            "'submitit', 'rich') if m in sys.modules); assert not heavy, heavy")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr[-2000:]


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["sweep", "--help"]])
def test_help_of_the_entry_point_imports_no_torch(argv):
    code = ("import sys; from scaleprobe.cli import main; code = main(sys.argv[1:]); "
            "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(code)")
    p = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                       timeout=120, env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0 and "usage: scaleprobe" in p.stdout, p.stderr[-2000:]
