"""What an installed scaleprobe carries: the examples and docs the README and the help point
to, and the optional libraries kept out of the plain install."""

import re
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from scaleprobe.config.bundled import bundled, hint

ROOT = Path(__file__).resolve().parents[2]
OPTIONAL = {"torchmetrics": "detection", "pycocotools": "detection", "scikit-image": "face"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    """A wheel built from a copy of the sources (the checkout is left untouched), offline:
    with the setuptools of this environment."""
    pytest.importorskip("setuptools", minversion="77", reason="building needs setuptools>=77")
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("examples", "docs"):
        shutil.copytree(ROOT / name, src / name)
    shutil.copytree(ROOT / "src", src / "src", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    out = tmp_path_factory.mktemp("wheel")
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                        "-q", str(src), "-w", str(out)], capture_output=True, text=True,
                       timeout=240)
    assert p.returncode == 0, p.stderr[-2000:]
    (whl,) = out.glob("scaleprobe-*.whl")
    return zipfile.ZipFile(whl)


@pytest.mark.timeout(300)
def test_wheel_carries_examples_and_docs(wheel):
    """Bug caught: `pip install scaleprobe` then `scaleprobe sweep examples/...` or "see
    docs/REPORTS.md": neither existed anywhere on the user's machine. Every file of examples/
    and docs/, and so every one the README links to, is inside the package."""
    names = set(wheel.namelist())
    for kind in ("examples", "docs"):
        for f in sorted(p for p in (ROOT / kind).rglob("*") if p.is_file()):
            rel = f.relative_to(ROOT).as_posix()
            assert f"scaleprobe/{rel}" in names, f"{rel} not in the wheel"
    linked = set(re.findall(r"\b((?:examples|docs)/[\w.-]+\.(?:toml|md))", (ROOT /
                                                                           "README.md").read_text()))
    assert linked and all(f"scaleprobe/{p}" in names for p in linked), linked
    # the data files the code reads beside itself: the accelerators' peaks (MFU)
    data = sorted(p.relative_to(ROOT / "src").as_posix()
                  for p in (ROOT / "src" / "scaleprobe").rglob("*.csv"))
    assert data and all(d in names for d in data), data


@pytest.mark.timeout(300)
def test_optional_libraries_are_extras(wheel):
    """Bug caught: every user installed pycocotools, torchmetrics and scikit-image (and
    compiled pycocotools) for parts most never use; `.[all]` must still bring them all."""
    (meta,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    msg = Parser().parsestr(wheel.read(meta).decode())
    requires = msg.get_all("Requires-Dist")
    for dist, extra in OPTIONAL.items():
        lines = [r for r in requires if re.match(rf"{dist}\b", r)]
        assert lines and all(f'extra == "{extra}"' in r for r in lines), (dist, lines)
    (everything,) = [r for r in requires if r.startswith("scaleprobe[") and 'extra == "all"' in r]
    assert set(re.search(r"\[(.*?)\]", everything).group(1).split(",")) == {
        "detection", "face", "cluster"}
    assert {"detection", "face", "cluster", "all", "test"} <= set(msg.get_all("Provides-Extra"))
    assert any(re.match(r"submitit\b", r) and 'extra == "cluster"' in r for r in requires)


def test_a_missing_example_path_names_the_copy_that_comes_with_scaleprobe(tmp_path, capsys,
                                                                         monkeypatch):
    """Bug caught: run from another folder, `scaleprobe sweep examples/sweep_quickstart.toml`
    (the README's command) said only "not found"."""
    from scaleprobe.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["sweep", "examples/sweep_quickstart.toml"]) == 2
    err = capsys.readouterr().err.strip()
    copy = bundled("examples") / "sweep_quickstart.toml"
    assert len(err.splitlines()) == 1 and str(copy) in err and copy.is_file()
    assert hint("mine/sweep.toml") == "" and hint("examples/no_such.toml") == ""


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize("torch_index", [None, "https://example.invalid/whl/cpu"])
def test_make_demo_shows_the_install_and_takes_another_torch_index(tmp_path, torch_index):
    """Bug: `make demo` installed with `pip -q`: minutes of silence, and on a machine
    without a GPU PyTorch's CUDA build (a 5.9 GB venv) with no word of the CPU-only one."""
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    extra = [f"TORCH_INDEX={torch_index}"] if torch_index else []
    p = subprocess.run(["make", "-n", "demo", f"PY={sys.executable}", *extra], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    pips = [ln for ln in p.stdout.splitlines() if "/pip install" in ln]
    install = [ln for ln in pips if "-e '.[all,test]'" in ln]
    assert install and " -q" not in install[0]  # pip's own progress shows
    assert re.search(r"the venv is about 5\.9 GB, the CPU-only torch about 0\.75 GB", p.stdout)
    assert "TORCH_INDEX=https://download.pytorch.org/whl/cpu" in p.stdout
    first = [ln for ln in pips if "--index-url" in ln]
    if torch_index:
        assert first == [f".venv/bin/pip install --progress-bar on --index-url {torch_index} "
                         "torch torchvision"]
        assert pips.index(first[0]) < pips.index(install[0])
    else:
        assert not first


def test_the_readme_says_how_to_reach_scaleprobe_before_its_first_command():
    """Bug caught: after `make demo` every README command (`scaleprobe ...`) answered "command
    not found": make installs into .venv, and nothing said to activate it. The activation
    comes before the first `scaleprobe` command of the README, and `make demo` ends with it."""
    text = (ROOT / "README.md").read_text()
    first = re.search(r"^scaleprobe ", text, re.MULTILINE)
    activate = text.find(". .venv/bin/activate")
    assert first and 0 <= activate < first.start()
    assert ".venv/bin/scaleprobe" in text[:first.start()]
    demo = (ROOT / "Makefile").read_text().split("\ndemo:")[1].split("\n\n")[0]
    assert "bin/activate" in demo
