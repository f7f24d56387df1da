"""The import floors (pyproject.toml's [tool.importlinter], docs/ARCHITECTURE.md) hold: the
record, its figures and the errors import nothing above them (and no torch), nor do the
features' rules, the config and the prediction import torch, the report never trains or
launches, the experiments render nothing (no report import), nothing below the commands
imports them, wrap never reaches into the run driver; and the whole stack as one picture of
floors (a ``layers`` contract), which catches an import up the stack that no narrower rule
names."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_import_contracts_are_kept():
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    out = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def test_a_broken_floor_is_caught(tmp_path):
    """The checker fails on a forbidden import (so the test above can fail): a copy of the
    package where the record imports the report."""
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    shutil.copytree(ROOT / "src" / "scaleprobe", tmp_path / "src" / "scaleprobe",
                    ignore=shutil.ignore_patterns("docs", "examples", "__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    metrics = tmp_path / "src" / "scaleprobe" / "core" / "metrics.py"
    metrics.write_text(metrics.read_text() + "\nfrom scaleprobe.report import fmt  # noqa\n")
    # an import up the floors that no narrower rule names: the timers reading the model zoo
    timer = tmp_path / "src" / "scaleprobe" / "measure" / "timer.py"
    timer.write_text(timer.read_text() + "\nfrom scaleprobe.models import build  # noqa\n")
    out = subprocess.run([exe], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(tmp_path / "src"), "PATH": "/usr/bin:/bin"})
    assert out.returncode != 0
    broken = [ln for ln in out.stdout.splitlines() if ln.rstrip().endswith("BROKEN")]
    # core's own rule, the floors, and every rule the broken import leaks into (the
    # experiments reach core.metrics, which now reaches the report)
    assert any(ln.startswith("the floors") for ln in broken), out.stdout[-3000:]
    assert any("import nothing above them" in ln for ln in broken), out.stdout[-3000:]
    assert "scaleprobe.measure.timer -> scaleprobe.models.build" in out.stdout


def test_the_record_and_its_figures_pass_mypy_strict():
    """The torch-free floors (pyproject.toml's [tool.mypy] files) are typed strictly: a
    misspelt field or a figure that may be None used as a number fails here, not in a user's
    report. Every other package's bodies are checked too (report/'s rows typed by
    report/tables/rows.py), but for the modules [tool.mypy] leaves out, with its reason."""
    exe = shutil.which("mypy", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("mypy is not installed (pip install -e '.[test]')")
    # mypy's own cache (.mypy_cache, which `make lint` just filled in CI): it re-checks what
    # changed since, by content
    out = subprocess.run([exe], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:]
    assert "Success" in out.stdout


def test_a_misspelt_row_key_in_the_report_is_caught(tmp_path):
    """The report's rows are typed (report/tables/rows.py): mypy fails on a key no row has (so the
    test above can fail), where a plain dict would have read it as None, "not measured"."""
    exe = shutil.which("mypy", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("mypy is not installed (pip install -e '.[test]')")
    for name, key in (("reader.py", "peak_mem_byte"), ("right.py", "peak_mem_bytes")):
        (tmp_path / name).write_text("from scaleprobe.report.tables.rows import BatchRow\n\n\n"
                                     "def peak(row: BatchRow) -> object:\n"
                                     f'    return row["{key}"]\n')
    # rows.py checked beside the readers, the modules it imports skipped: two seconds, not the
    # whole package's twenty
    out = subprocess.run([exe, "--cache-dir", "/dev/null", "--follow-imports", "skip",
                          "--ignore-missing-imports", "reader.py", "right.py",
                          str(ROOT / "src" / "scaleprobe" / "report" / "tables" / "rows.py")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={"MYPYPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    assert "right.py" not in out.stdout, out.stdout[-3000:]
    assert out.returncode != 0 and '"peak_mem_byte"' in out.stdout, out.stdout[-3000:]
