"""Communication measured in the step: median and interval over the steps, "not resolved"
when the interval reaches 0, the calibration only as a cross-check (measure/comm/instep.py)."""

from __future__ import annotations

import pytest

from scaleprobe.core.rank_record import RankRecord
from scaleprobe.core.run_parts import Comm
from scaleprobe.measure.comm.instep import cross_check, fill_in_step, per_step_figures, text


def test_a_figure_is_resolved_only_when_its_interval_excludes_zero():
    waits = [0.010, 0.012, 0.011, 0.013, 0.009, 0.010, 0.012, 0.011]
    f = per_step_figures(waits)
    assert f["median_s"] == pytest.approx(0.0110) and f["steps"] == 8
    lo, hi = f["interval_s"]
    assert 0.009 <= lo <= 0.011 <= hi <= 0.013 and f["resolved"] is True
    zeros = per_step_figures([0.0, 0.0, 0.0, 0.004, 0.0, 0.0, 0.003, 0.0])
    assert zeros["interval_s"][0] == 0.0 and zeros["resolved"] is False
    assert text(zeros, lambda s: f"{s * 1e3:.1f} ms").endswith("not resolved from noise")
    assert per_step_figures([])["median_s"] is None


def test_the_cross_check_pairs_alternating_samples_and_drops_the_first_pair():
    cal = {"sync_step_s": 0.3, "no_sync_step_s": 0.2,
           "samples": {"sync": [5.0, 0.30, 0.25, 0.32, 0.27, 0.31, 0.22],
                       "no_sync": [0.1, 0.28, 0.27, 0.29, 0.26, 0.30, 0.24]}}
    cc = cross_check(cal)
    assert cc["pairs"] == 6  # 5.0 - 0.1 (the switch between modes) is dropped
    assert cc["difference_s"] == pytest.approx(0.01)  # median of 0.02 -0.02 0.03 0.01 0.01 -0.02
    assert cc["interval_s"][0] < 0 < cc["interval_s"][1] and cc["resolved"] is False
    assert cross_check(None) is None


def _rank(comm_steps, unseen=None):
    return RankRecord.from_dict({"phase_times_s": {"comm": comm_steps},
                                 "phases_unseen": unseen or {}})


def test_the_run_record_gets_the_interval_or_the_reason():
    why: dict[str, str] = {}
    c = Comm.from_dict({"cross_check": None})
    fill_in_step(c, _rank([0.02] * 6), 2, why)
    assert c.exposed_per_step["median_s"] == pytest.approx(0.02)
    assert "dist.calibrate_comm" in why["comm.cross_check"]
    why = {}
    c = Comm.from_dict({"cross_check": {"difference_s": 0.0}})
    fill_in_step(c, _rank([], {"comm": "not measured on CUDA: ..."}), 2, why)
    assert c.exposed_per_step is None and why["comm.exposed_s"].startswith("not measured on CUDA")
    why = {}
    c = Comm.from_dict({"cross_check": {"difference_s": 0.0}})
    fill_in_step(c, _rank([0.0] * 6), 1, why)
    assert c.exposed_per_step is None and c.cross_check is None
    assert why["comm.exposed_per_step"] == "world size 1: no communication"
