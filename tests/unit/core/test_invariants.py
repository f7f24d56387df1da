"""The invariants every run result is checked against (scaleprobe.core.invariants)."""

from scaleprobe.core.invariants import (
    WINDOW_CHECK_REL,
    check_run,
    uneven_steps,
    window_samples_per_s,
    window_tolerance,
)
from tests.unit.report.factory import loaded, run


def _names(rec):
    return [v["name"] for v in check_run(loaded(rec))]


def _good():
    rec = run("ok", batch=32, step_s=0.1)  # 320 samples/s
    rec["metrics"].update(steps_timed=50, window_s=5.0,  # 32 x 50 / 5 = 320
                          samples_per_s_median_step=320.0)
    rec["batch"]["training_ranks"] = 1
    return rec


def test_a_consistent_run_breaks_nothing():
    assert check_run(loaded(_good())) == []


def test_shares_outside_0_to_100_percent():
    rec = _good()
    rec["metrics"]["comm_fraction"] = 1.3
    assert _names(rec) == ["shares"]
    rec = _good()
    rec["metrics"]["breakdown_s"]["data"] = -0.01
    assert "negative phase time: data" in check_run(loaded(rec))[0]["detail"]


def test_communication_at_world_size_one():
    """DDP on one process reported 217 ms of 'communication' (its wrapper's own cost)."""
    rec = _good()
    rec["metrics"]["breakdown_s"]["comm"] = 0.02
    assert _names(rec) == ["no comm at 1"]
    rec["batch"]["world_size"] = 2
    assert "no comm at 1" not in _names(rec)


def test_a_parameter_server_with_one_worker_communicates():
    """Bug caught (audit item 8): the invariant counted training ranks, so it fired on every
    parameter-server run with one worker, whose push / pull is real communication."""
    rec = _good()
    rec["metrics"]["breakdown_s"]["comm"] = 0.02
    rec["batch"].update(world_size=2, training_ranks=1)
    assert _names(rec) == []


def test_samples_per_s_is_the_windows_throughput():
    """samples/s must be global batch x timed steps / timed window (bug caught: a headline
    from the median step, 1,016 samples/s beside an epoch that ran at about 410/s)."""
    rec = _good()
    assert window_samples_per_s(loaded(rec)) == 320.0
    rec["metrics"]["window_s"] = 5.0 * 1.1  # 291 samples/s over the window, 320 claimed
    assert _names(rec) == ["window"] and "(290.9)" in check_run(loaded(rec))[0]["detail"]
    rec["metrics"]["window_s"] = 5.0 * 1.04  # within 5%: the ranks' windows differ that much
    assert _names(rec) == []
    rec["metrics"]["window_s"] = 5.0 * 0.9  # 356 over the window, 320 claimed: too low
    assert _names(rec) == ["window"]  # the check is two-sided


def test_a_median_step_far_from_the_window_is_uneven_steps_not_a_broken_invariant():
    rec = _good()
    rec["metrics"].update(samples_per_s=246.0, window_s=6.5,  # 32 x 50 / 6.5 = 246
                          samples_per_s_median_step=320.0)  # 1.30x the window's
    assert _names(rec) == []
    assert uneven_steps(loaded(rec)) == (320.0, 32 * 50 / 6.5)
    rec["metrics"]["samples_per_s_median_step"] = 246.0 * 1.2  # within 25%
    assert uneven_steps(loaded(rec)) is None
    old = _good()  # written before: its samples/s was the median step's
    old["metrics"].update(window_s=6.5, samples_per_s_median_step=None)
    assert uneven_steps(loaded(old))[0] == 320.0 and _names(old) == []


def test_failed_audit_needs_unique_samples_per_s():
    rec = _good()
    rec["audit"] = {"ok": False, "unique_fraction": 0.5}
    assert _names(rec) == ["unique data"]
    rec["metrics"]["unique_samples_per_s"] = 160.0
    assert _names(rec) == []


def test_runs_that_did_not_finish_are_not_checked():
    assert check_run(loaded(run("x", status="failed"))) == []


def test_ranks_that_never_communicated_have_no_common_window():
    """Bug caught: a wrapped script with two ranks and no process group broke the window
    invariant, as its samples/s sums two free-running ranks' rates and the window is rank
    0's."""
    rec = _good()
    rec["batch"].update(world_size=2, training_ranks=2, **{"global": 64})
    rec["metrics"]["window_s"] = 5.0 * 1.5
    rec["comm"] = None
    assert window_samples_per_s(loaded(rec)) is None and _names(rec) == []
    rec["comm"] = {"exposed_s": 0.01}  # ranks that communicate move together: checked
    assert "window" in _names(rec)


def test_two_ranks_windows_may_differ_by_their_longest_step():
    """A 3-step 2-rank run under load broke the window invariant though its figures were
    right: rank 1 started its window late, rank 0's first step waited for it, and over 3 steps
    that skew is far above 5%. The tolerance is the longest step any rank took."""
    rec = _good()
    rec["batch"].update(world_size=2, training_ranks=2, **{"global": 64})
    rec["comm"] = {"exposed_s": 0.01}
    rec["metrics"].update(steps_timed=3, window_s=0.3, samples_per_s=64 * 3 / 0.25,
                          samples_per_s_median_step=768.0)  # rank 1's window: 50 ms shorter
    rank = {"rank": 0, "step_time_s": {"median": 0.08, "max": 0.13}}
    rec["ranks"] = [rank, dict(rank, rank=1, step_time_s={"median": 0.08, "max": 0.08})]
    r = loaded(rec)
    assert abs(window_tolerance(r) - 0.13 / 0.17) < 1e-9 and _names(rec) == []
    for x in rec["ranks"]:  # no step longer than 30 ms: windows cannot differ by 50 ms
        x["step_time_s"] = {"median": 0.03, "max": 0.03}
    assert _names(rec) == ["window"]
    rec["ranks"] = rec["ranks"][:1]  # one rank: its own window, 5%
    assert window_tolerance(loaded(rec)) == WINDOW_CHECK_REL
