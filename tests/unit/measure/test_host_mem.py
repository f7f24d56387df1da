"""The host-memory fields a rank records: the file-backed growth since the baseline counts
the library pages the run touched even when the kernel took them back before the end."""

from __future__ import annotations

import pytest

from scaleprobe.measure import monitor


@pytest.fixture
def file_rss(monkeypatch):
    reading = {"now": 0}
    monkeypatch.setattr(monitor, "process_file_rss_bytes", lambda: reading["now"])
    monkeypatch.setattr(monitor, "process_rss_bytes", lambda: 500)
    monkeypatch.setattr(monitor, "process_peak_rss_bytes", lambda: 900)
    monkeypatch.setattr(monitor, "_FILE_RSS_HIGH", [])
    return reading


def test_growth_is_read_at_the_end_when_nothing_was_noted(file_rss):
    file_rss["now"] = 100
    base = monitor.host_mem_baseline()
    file_rss["now"] = 140
    assert monitor.host_mem_record(base) == {"host_peak_rss": 900, "host_baseline_rss": 500,
                                             "host_file_growth": 40}


def test_pages_reclaimed_after_the_first_step_still_count(file_rss):
    """Bug: read only at the end, library pages the kernel reclaimed under memory pressure
    made the growth 0 while the peak had counted them (CI, 2026-11-26: a forked and a fresh
    point then differed by 89 MiB in host_net)."""
    file_rss["now"] = 100
    base = monitor.host_mem_baseline()
    file_rss["now"] = 170
    monitor.note_file_rss()  # after the first full step
    file_rss["now"] = 60  # reclaimed: below the baseline
    monitor.note_file_rss()  # a later, lower note keeps the high one
    assert monitor.host_mem_record(base)["host_file_growth"] == 70
    file_rss["now"] = 190  # the end reads higher still: that counts
    assert monitor.host_mem_record(base)["host_file_growth"] == 90


def test_no_reading_is_none_not_zero(file_rss, monkeypatch):
    monkeypatch.setattr(monitor, "process_file_rss_bytes", lambda: None)
    monitor.note_file_rss()
    assert monitor.host_mem_record({"rss": 500, "file_rss": None})["host_file_growth"] is None
