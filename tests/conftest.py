import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def pytest_configure(config):
    os.environ.setdefault("SCALEPROBE_TEST", "1")


@pytest.fixture
def out_dir(tmp_path):
    return tmp_path / "out"


def run_cli(*argv, timeout=240, env=None, cwd=None):
    """Run `python -m scaleprobe ...` in a fresh process; returns CompletedProcess."""
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "scaleprobe", *map(str, argv)],
                          capture_output=True, text=True, timeout=timeout, env=e, cwd=cwd)


@pytest.fixture
def cli():
    return run_cli
