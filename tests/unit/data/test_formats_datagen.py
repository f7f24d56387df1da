import argparse
import hashlib
from pathlib import Path

import pytest

from scaleprobe.commands import datagen
from scaleprobe.core.errors import ConfigError
from scaleprobe.data.formats import FORMATS, generate


def _run(*argv: str) -> int:
    p = argparse.ArgumentParser()
    datagen.add_arguments(p)
    return datagen.run(p.parse_args(list(argv)))


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(root).as_posix().encode() + p.read_bytes())
    return h.hexdigest()


def test_command_writes_and_reports(tmp_path, capsys):
    assert _run("imagefolder", "--out", str(tmp_path / "d"), "--count", "20", "--size",
                "40x30") == 0
    out = capsys.readouterr().out
    assert "wrote imagefolder: 20 images of 40x30" in out
    assert "red_circle/" in out and "files" in out
    assert len(list((tmp_path / "d").rglob("*.jpg"))) == 20


def test_many_folders_are_summarised(tmp_path, capsys):
    _run("lfw", "--out", str(tmp_path / "f"), "--count", "80", "--size", "48")
    out = capsys.readouterr().out
    assert "lfw-py/lfw_funneled/*/" in out and "80 files" in out


def test_unknown_format_suggests_the_close_one(tmp_path, capsys):
    from scaleprobe.cli import main

    assert main(["datagen", "cifar", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "unknown dataset format 'cifar'; did you mean cifar10?" in err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("text,want", [("64x48", (64, 48)), ("32", (32, 32)),
                                       ("32X16", (32, 16)), (None, None)])
def test_size_parsing(text, want):
    assert datagen.parse_size(text) == want


@pytest.mark.parametrize("text", ["64x", "axb", "1x2x3", "0x5"])
def test_bad_sizes(text):
    with pytest.raises(ConfigError, match="--size"):
        datagen.parse_size(text)


def test_refuses_a_folder_that_is_not_empty_unless_forced(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not empty.*--force"):
        _run("mnist", "--out", str(tmp_path), "--count", "8")
    assert _run("mnist", "--out", str(tmp_path), "--count", "8", "--force") == 0
    assert (tmp_path / "keep.txt").read_text() == "mine"
    with pytest.raises(ConfigError, match="--count must be positive"):
        _run("mnist", "--out", str(tmp_path / "n"), "--count", "0")


# text has no seed (the standard library is what it is): tests/unit/data/test_token_windows.py
@pytest.mark.parametrize("fmt", sorted(f for f in FORMATS if f != "text"))
def test_every_format_is_deterministic_for_a_seed(tmp_path, fmt):
    small = {"cifar10": None, "mnist": None, "imagefolder": (32, 32), "voc": (64, 48),
             "lfw": (40, 40)}[fmt]
    a = generate(fmt, tmp_path / "a", count=30, size=small, seed=4)
    b = generate(fmt, tmp_path / "b", count=30, size=small, seed=4)
    c = generate(fmt, tmp_path / "c", count=30, size=small, seed=5)
    assert a.count == 30 and sum(1 for _ in a.root.rglob("*")) > 0
    assert _digest(a.root) == _digest(b.root) != _digest(c.root)
