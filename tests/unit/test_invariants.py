"""The invariants every run result is checked against (scaleprobe.invariants)."""

from scaleprobe.invariants import check_run, window_samples_per_s
from tests.unit.report.factory import run


def _names(rec):
    return [v["name"] for v in check_run(rec)]


def _good():
    rec = run("ok", batch=32, step_s=0.1)  # 320 samples/s
    rec["metrics"].update(steps_timed=50, window_s=5.0)  # 32 x 50 / 5 = 320
    rec["batch"]["training_ranks"] = 1
    return rec


def test_a_consistent_run_breaks_nothing():
    assert check_run(_good()) == []


def test_shares_outside_0_to_100_percent():
    rec = _good()
    rec["metrics"]["comm_fraction"] = 1.3
    assert _names(rec) == ["shares"]
    rec = _good()
    rec["metrics"]["breakdown_s"]["data"] = -0.01
    assert "negative phase time: data" in check_run(rec)[0]["detail"]


def test_communication_at_world_size_one():
    """DDP on one process reported 217 ms of 'communication' (its wrapper's own cost)."""
    rec = _good()
    rec["metrics"]["breakdown_s"]["comm"] = 0.02
    assert _names(rec) == ["no comm at 1"]
    rec["batch"]["training_ranks"] = 2
    assert "no comm at 1" not in _names(rec)


def test_median_samples_per_s_must_agree_with_the_window():
    """1,016 samples/s beside an epoch that ran at about 410/s: a median that flatters."""
    rec = _good()
    assert window_samples_per_s(rec) == 320.0
    rec["metrics"]["window_s"] = 5.0 * 1.3  # 246 samples/s over the window: 1.30x apart
    assert _names(rec) == ["window"] and "1.30x" in check_run(rec)[0]["detail"]
    rec["metrics"]["window_s"] = 5.0 * 1.2  # within 25%
    assert _names(rec) == []


def test_failed_audit_needs_unique_samples_per_s():
    rec = _good()
    rec["audit"] = {"ok": False, "unique_fraction": 0.5}
    assert _names(rec) == ["unique data"]
    rec["metrics"]["unique_samples_per_s"] = 160.0
    assert _names(rec) == []


def test_runs_that_did_not_finish_are_not_checked():
    assert check_run(run("x", status="failed")) == []
