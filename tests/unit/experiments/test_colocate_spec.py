"""Colocate specs: jobs, timing, placement, and the user's mistakes."""

import pytest

from scaleprobe.errors import ConfigError
from scaleprobe.experiments.colocate import load_colocate_spec

JOBS = [{"name": "a", "model": "digits_cnn", "batch_size": 16},
        {"name": "b", "model": "linear", "batch_size": 32}]


def doc(**colocate):
    return {"colocate": colocate, "base": {"loader": "naive"}, "job": [dict(j) for j in JOBS]}


def test_jobs_get_the_base_and_a_time_boxed_window():
    cs = load_colocate_spec(doc(seconds=4, warmup_steps=1), {"data.dataset": "synthetic"})
    assert cs.placement == "shared" and [n for n, _ in cs.jobs] == ["a", "b"]
    a = cs.jobs[0][1]
    assert a.model.name == "digits_cnn" and a.train.batch_size == 16 and a.name == "a"
    assert a.data.loader == "naive" and a.data.dataset == "synthetic"
    assert a.train.steps == "auto" and a.train.max_seconds == 4 and a.train.warmup_steps == 1
    assert a.measure.stable_rel_ci == 0.0 and not a.measure.progress


def test_fixed_steps_and_placement_override():
    cs = load_colocate_spec(doc(steps=7, placement="shared"), placement="pinned")
    assert cs.placement == "pinned" and all(c.train.steps == 7 for _, c in cs.jobs)


def test_repeats_default_spec_and_override():
    """Catches: --repeats ignored, or the spec's repeats lost when --placement overrides."""
    assert load_colocate_spec(doc()).repeats == 3
    assert load_colocate_spec(doc(repeats=5), placement="pinned").repeats == 5
    assert load_colocate_spec(doc(repeats=5), repeats=2).repeats == 2


def test_unnamed_jobs_are_numbered():
    d = doc()
    for j in d["job"]:
        del j["name"]
    assert [n for n, _ in load_colocate_spec(d).jobs] == ["job1", "job2"]


@pytest.mark.parametrize("bad,needle", [
    ({"colocate": {"placment": "shared"}}, "unknown \\[colocate\\] option 'placment'"),
    ({"colocate": {"placement": "spread"}}, "placement must be 'shared' or 'pinned'"),
    ({"colocate": {"seconds": 2, "steps": 3}}, "seconds or steps, not both"),
    ({"colocate": {"steps": "many"}}, "wrong type"),
    ({"colocate": {"seconds": -1}}, "seconds must be positive"),
    ({"colocate": {"repeats": 0}}, "repeats must be at least 1"),
    ({"colocate": {"repeats": 2.5}}, "repeats has the wrong type"),
    ({"job": [JOBS[0]]}, "at least two \\[\\[job\\]\\]"),
    ({"job": [JOBS[0], JOBS[0]]}, "job names must differ"),
    ({"job": [JOBS[0], {"name": "x", "batch_sise": 3}]}, "did you mean batch_size"),
    ({"job": [JOBS[0], {"name": "x", "batch_size": 0}]}, "job 'x': train.batch_size: expected a whole number >= 1, got 0"),
    ({"jobs": []}, "unknown table\\(s\\) jobs"),
])
def test_spec_errors(bad, needle):
    d = {**doc(), **bad}
    with pytest.raises(ConfigError, match=needle) as e:
        load_colocate_spec(d)
    assert "\n" not in str(e.value)


def _timed(name: str, sps: float, start: float, end: float) -> dict:
    from tests.unit.report.factory import run

    rec = run(name, sps=sps)
    rec["metrics"]["window_clock"] = [start, end]
    return rec


def test_window_overlap_is_the_shared_time_over_the_longest_window():
    from scaleprobe.experiments.colocate import window_overlap

    assert window_overlap([_timed("a", 1, 100.0, 102.0), _timed("b", 1, 100.0, 102.0)]) == 1.0
    # b opened 1 s late: 1 s of a's 2 s shared
    assert window_overlap([_timed("a", 1, 100.0, 102.0),
                           _timed("b", 1, 101.0, 103.0)]) == pytest.approx(0.5)
    assert window_overlap([_timed("a", 1, 100.0, 101.0), _timed("b", 1, 102.0, 103.0)]) == 0.0
    no_clock = _timed("b", 1, 0, 0)
    no_clock["metrics"]["window_clock"] = None
    assert window_overlap([_timed("a", 1, 100.0, 102.0), no_clock]) is None


def test_a_repeat_whose_windows_did_not_overlap_feeds_no_figure():
    """Repeat 1's windows were open together for 40% of the longest: b ran mostly alone and
    read 100 samples/s "together". Bug caught: that repeat paired as if measured together,
    hiding the slowdown the other two repeats show (2x)."""
    from scaleprobe.experiments.colocate import ColocateSpec, _record

    cs = load_colocate_spec(doc(seconds=2))
    cs = ColocateSpec(cs.colocate_id, cs.placement, cs.jobs, 3)
    alone = [[_timed("a", 100.0, 0, 2), _timed("b", 100.0, 3, 5)] for _ in range(3)]
    together = [[_timed("a", 50.0, 10, 12), _timed("b", 50.0, 10, 12)],
                [_timed("a", 100.0, 20, 22), _timed("b", 100.0, 21.2, 23.2)],
                [_timed("a", 50.0, 30, 32), _timed("b", 50.0, 30.01, 32.02)]]
    machine = [{"cpu_util_pct": 100.0, "gpu_util_pct": None, "overlap_s": 2.0}] * 3
    rec = _record(cs, [{}, {}], "shared", 2, alone, together, machine)
    assert rec["window_overlap_repeats"][1] == pytest.approx(0.4)
    assert rec["repeats_left_out"] == [{"repeat": 1, "window_overlap": pytest.approx(0.4)}]
    for j in rec["jobs"]:
        assert j["together_samples_per_s_repeats"][1] is None
        assert j["slowdown"] == pytest.approx(2.0)
    assert "repeat 2 left out: the jobs' timed windows overlapped 40% (below 90%)" \
        in rec["evidence"]
