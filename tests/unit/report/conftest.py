"""The report tests' shared build: the mixed records (every kind of section) rendered once
for the session; tests read it and never write into its folder."""

from __future__ import annotations

import pytest

from scaleprobe.report import build_report
from tests.unit.report.sample import write_mixed


@pytest.fixture(scope="session")
def mixed_report(tmp_path_factory):
    """(report.md's text, report.html's text, the records' folder)."""
    folder = tmp_path_factory.mktemp("mixed")
    write_mixed(folder)
    md, html = build_report(folder)
    return md.read_text(), html.read_text(), folder
