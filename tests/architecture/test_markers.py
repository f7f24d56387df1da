"""The markers select what they say: ``pytest -m gpu`` runs the GPU tests, ``-m root`` the
network-namespace tests, ``-m slow`` the long ones, and ``make test-fast`` leaves the slow
ones out. A marker misspelt on a test (``@pytest.mark.gpus``) is an error
(``--strict-markers``), not a test that silently runs everywhere or nowhere."""

import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]


PLUGIN = """
def pytest_collection_finish(session):
    for item in session.items:
        marks = sorted({m.name for m in item.iter_markers()})
        print("ITEM", item.nodeid.split("[")[0], ",".join(marks))
"""


def _marks_of_this_session() -> dict[str, set[str]] | None:
    """Each test's markers from the session running now, when it collected the whole suite
    (``make test``, and ``make test-fast``: what -m leaves out was collected first): the same
    answer as a second collection, without its 8-50 s. None otherwise (a file, a folder)."""
    from tests.conftest import COLLECTED

    files = {str(Path(i.fspath).resolve()) for i in COLLECTED}
    if files != {str(f.resolve()) for f in TESTS.rglob("test_*.py")}:
        return None
    marks: dict[str, set[str]] = {}
    for item in COLLECTED:
        marks.setdefault(item.nodeid.split("[")[0], set()).update(
            m.name for m in item.iter_markers())
    return marks


@pytest.fixture(scope="module")
def selections(request, tmp_path_factory):
    """One collection of the whole suite: each test's markers, as pytest resolves them
    (module-level ``pytestmark`` included)."""
    marks = _marks_of_this_session()
    if marks is not None:
        return _select(marks)
    d = tmp_path_factory.mktemp("plugin")
    (d / "marks_plugin.py").write_text(PLUGIN)
    base = __import__("os").environ.get("PYTHONPATH", "")
    env = {**__import__("os").environ,
           "PYTHONPATH": ":".join(p for p in (str(d), str(TESTS.parent), base) if p)}
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                          "-p", "marks_plugin", str(TESTS)], capture_output=True, text=True,
                         timeout=300, cwd=TESTS.parent, env=env)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    marks: dict[str, set[str]] = {}
    for ln in out.stdout.splitlines():
        if ln.startswith("ITEM "):
            parts = ln.split(" ")
            marks.setdefault(parts[1], set()).update(filter(None, (parts[2:] or [""])[0].split(",")))
    return _select(marks)


def _select(marks: dict[str, set[str]]) -> dict[str, set[str]]:
    sel = {m: {t for t, ms in marks.items() if m in ms} for m in ("gpu", "root", "slow")}
    sel["not slow"] = {t for t, ms in marks.items() if "slow" not in ms}
    return sel


def test_each_marker_selects_its_tests(selections):
    """Bug caught: a marker dropped or renamed in a refactor, so `pytest -m gpu` on a GPU
    machine (or `-m root` as root) runs nothing and reports success."""
    assert any("test_gpu.py" in t for t in selections["gpu"]), selections["gpu"]
    assert all("test_gpu.py" in t for t in selections["gpu"])
    assert any("netns" in t for t in selections["root"]), selections["root"]
    assert len(selections["slow"]) >= 10


def test_fast_selection_leaves_the_slow_ones_out(selections):
    """Bug caught: `make test-fast` (-m "not slow") running a slow test, or losing fast ones."""
    assert selections["slow"].isdisjoint(selections["not slow"])
    assert len(selections["not slow"]) > len(selections["slow"])
    assert any("test_markers.py" in t for t in selections["not slow"])
