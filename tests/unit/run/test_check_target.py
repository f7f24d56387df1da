"""wrap's check of its target before any rank starts."""

import sys

import pytest

from scaleprobe.core.errors import ConfigError
from scaleprobe.run.script import check_target


def test_a_module_in_the_working_directory_is_found_as_python_m_finds_it(tmp_path,
                                                                         monkeypatch):
    """Bug caught: `scaleprobe wrap -- -m pkg.train` from the folder holding pkg/ said "no
    module named 'pkg.train'": the `scaleprobe` command's path starts at its own folder,
    where `python -m` puts the working directory. The package imported to look is dropped
    again, so a rank forked from this process runs its __init__ itself."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert check_target(["-m", "pkg.train"]) == "train"
    assert "pkg" not in sys.modules and str(tmp_path) not in sys.path
    with pytest.raises(ConfigError, match="no module named 'pkg.nope'"):
        check_target(["-m", "pkg.nope"])
