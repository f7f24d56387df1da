"""Every reported figure is defined once, in ``metrics.py``: no other module defines a
function of the same name that computes it again (a function elsewhere may share the name
only to hand the call on to ``metrics``). Bug class caught: samples/s computed in three
places, two ``efficiency`` functions that meant different things (speedup / N and the
network model's C / (C + exposed))."""

from __future__ import annotations

import ast
from pathlib import Path

import scaleprobe
from scaleprobe.core import metrics

SRC = Path(scaleprobe.__file__).parent
FIGURES = ("samples_per_s", "window_samples_per_s", "step_samples_per_s", "tokens_per_s",
           "unique_samples_per_s", "compute_s", "speedup", "time_speedup", "efficiency",
           "mfu", "achieved_flops_per_s", "flops_per_sample", "joules_per_sample",
           "joules_to_target", "growth", "slowdown", "window_epoch_s")


def _formats(fn: ast.FunctionDef) -> bool:
    """Returns ``str``: it prints a figure (``core/fmt.py``), it does not compute one."""
    return isinstance(fn.returns, ast.Name) and fn.returns.id == "str"


def _delegates(fn: ast.FunctionDef, name: str) -> bool:
    """The body calls ``<module>.name(...)`` (``M.compute_s(...)``): it hands the figure on."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
               and n.func.attr == name for n in ast.walk(fn))


def redefinitions(root: Path) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        if path == root / "core" / "metrics.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.FunctionDef) and node.name in FIGURES
                    and not _delegates(node, node.name) and not _formats(node)):
                out.append(f"{path.relative_to(root)}:{node.lineno} {node.name}")
    return out


def test_each_figure_is_a_function_of_metrics():
    for name in FIGURES:
        assert callable(getattr(metrics, name)), name


def test_no_module_defines_a_figure_again():
    assert redefinitions(SRC) == []


def test_a_figure_defined_again_is_caught(tmp_path):
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "metrics.py").write_text("def efficiency(s, n):\n    return s / n\n")
    (tmp_path / "model.py").write_text(
        "def efficiency(c, e):\n    return c / (c + e)\n\n"
        "def growth(v) -> str:\n    return f'{v:+.0%}'\n\n"
        "class R:\n    def compute_s(self):\n        return M.compute_s(self.phases())\n")
    assert redefinitions(tmp_path) == ["model.py:1 efficiency"]
