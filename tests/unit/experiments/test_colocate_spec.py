"""Colocate specs: jobs, timing, placement, and the user's mistakes."""

import pytest

from scaleprobe.core.errors import ConfigError
from scaleprobe.core.result_model import RunResult
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


def _timed(name: str, sps: float, start: float, end: float) -> RunResult:
    from tests.unit.report.factory import run

    rec = run(name, sps=sps)
    rec["metrics"]["window_clock"] = [start, end]
    return RunResult.from_dict(rec)


def test_window_shares_are_each_job_s_own_window_shared():
    from scaleprobe.experiments.colocate import window_shares

    assert window_shares([_timed("a", 1, 100.0, 102.0), _timed("b", 1, 100.0, 102.0)]) == [
        1.0, 1.0]
    # b opened 1 s late: half of each window shared
    assert window_shares([_timed("a", 1, 100.0, 102.0),
                          _timed("b", 1, 101.0, 103.0)]) == pytest.approx([0.5, 0.5])
    # a slow step overshot b's time box: a's window wholly shared, b's 82%
    assert window_shares([_timed("a", 1, 0.0, 2.01),
                          _timed("b", 1, 0.0, 2.45)]) == pytest.approx([1.0, 2.01 / 2.45])
    assert window_shares([_timed("a", 1, 100.0, 101.0), _timed("b", 1, 102.0, 103.0)]) == [
        0.0, 0.0]
    no_clock = _timed("b", 1, 0, 0)
    no_clock.metrics.window_clock = None
    assert window_shares([_timed("a", 1, 100.0, 102.0), no_clock]) is None


def test_a_job_that_ran_partly_alone_feeds_no_figure_for_that_repeat():
    """Repeat 1: b's window opened 1.2 s late, so only 40% of each window had both jobs
    running, and a read 100 samples/s "together"; repeat 2: b ran 2.5 s past a's 2 s box
    (45% of b's window shared, all of a's). Bugs caught: a repeat paired as if measured
    together (hiding the 2x slowdown the other repeats show), and a whole repeat thrown away
    for every job when only one job's window was not shared. A last step past the box (82%
    shared) keeps its figure: samples/s comes from the median step."""
    from scaleprobe.experiments.colocate import (
        MIN_WINDOW_OVERLAP,
        ColocateSpec,
        Place,
        _Machine,
        _record,
    )

    assert MIN_WINDOW_OVERLAP == 0.6
    cs = load_colocate_spec(doc(seconds=2))
    cs = ColocateSpec(cs.colocate_id, cs.placement, cs.jobs, 4)
    alone = [[_timed("a", 100.0, 0, 2), _timed("b", 100.0, 3, 5)] for _ in range(4)]
    together = [[_timed("a", 50.0, 10, 12), _timed("b", 50.0, 10, 12)],
                [_timed("a", 100.0, 20, 22), _timed("b", 100.0, 21.2, 23.2)],
                [_timed("a", 50.0, 30, 32.0), _timed("b", 70.0, 30, 34.5)],
                [_timed("a", 50.0, 40, 42.01), _timed("b", 50.0, 40, 42.45)]]
    machine = [_Machine(100.0, None, 2.0)] * 4
    rec = _record(cs, [Place(), Place()], "shared", 2, alone, together, machine)
    assert rec.window_overlap_repeats == pytest.approx([1.0, 0.4, 2.0 / 4.5, 2.01 / 2.45])
    assert [(x["repeat"], x["job"]) for x in rec.repeats_left_out or []] == [
        (1, "a"), (1, "b"), (2, "b")]
    a, b = rec.jobs
    assert a["together_samples_per_s_repeats"] == [50.0, None, 50.0, 50.0]
    assert b["together_samples_per_s_repeats"] == [50.0, None, None, 50.0]
    assert a["slowdown"] == pytest.approx(2.0) and b["slowdown"] == pytest.approx(2.0)
    assert ("a repeat 2 left out: only 40% of its timed window had every job running "
            "(below 60%)") in (rec.evidence or ""), rec.evidence
    # fixed steps: a fast job ends first by design, nothing is left out
    steps = load_colocate_spec(doc(steps=5))
    steps = ColocateSpec(steps.colocate_id, steps.placement, steps.jobs, 4)
    rec = _record(steps, [Place(), Place()], "shared", 2, alone, together, machine)
    assert rec.repeats_left_out == [] and rec.window_overlap_repeats == [None] * 4


def _point(job: str, phase: str, repeat: int, sps: float, outside: float,
           window: tuple[float, float]) -> RunResult:
    """Job ``job``'s run in ``phase`` of ``repeat`` on a 4-core machine, each job at 50% of
    it (2 cores), with ``outside`` cores used outside its process tree (its partner's
    included when together)."""
    from tests.unit.report.factory import run

    rec = run(f"{job}-{phase}-r{repeat}", sps=sps, cpu=50.0, cores=4)
    rec["experiment"] = {"id": "co", "kind": "colocate", "repeat": repeat,
                         "point": {"job": job, "phase": phase}}
    rec["metrics"]["outside_cpu_cores"] = outside
    rec["metrics"]["window_clock"] = list(window)
    return RunResult.from_dict(rec)


def test_load_only_while_together_rides_on_the_reading_as_the_report_says_it():
    """Bug caught: colocate.md and the terminal built a job's sources from its runs alone,
    while the report also judges its runs together (net of the partner's own CPU use): a
    third process beside job a's run together in repeat 2 (1.50 cores past b's 2.00) gave
    "slower together" with no caveat in colocate.md and ", under load" in the report. Both
    now call one function; a partner's own 2 cores are not load."""
    from scaleprobe.core import claim as CL
    from scaleprobe.core.experiment_records import ColocateRecord
    from scaleprobe.experiments.colocate import ColocateSpec, Place, _Machine, _record
    from scaleprobe.report.render.colocate import render_colocate
    from scaleprobe.report.render.sections_exp import job_claims

    cs = load_colocate_spec(doc(seconds=2))
    cs = ColocateSpec(cs.colocate_id, cs.placement, cs.jobs, 3)
    alone = [[_point(j, "alone", i, 100.0, 0.0, (10 * i + k, 10 * i + k + 1))
              for k, j in enumerate("ab")] for i in range(3)]
    together = [[_point(j, "together", i, 50.0, 3.5 if (j, i) == ("a", 1) else 2.05,
                        (10 * i + 5, 10 * i + 7)) for j in "ab"] for i in range(3)]
    rec = _record(cs, [Place(), Place()], "shared", 4, alone, together,
                  [_Machine(100.0, None, 2.0)] * 3)
    a, b = rec.jobs
    caveat = ("measured under load: job=a, phase=together (repeat 2): 1.50 cores outside "
              "(1 of 6 source runs)")
    assert a["reading"] == "slower together" and a["under_load"] is True
    assert a["load_caveat"].startswith(caveat), a["load_caveat"]
    assert b["under_load"] is False and b["load_caveat"] is None  # b's partner is not load
    md = render_colocate(ColocateRecord.from_dict(rec.to_dict()))
    assert "| slower together, under load |" in md and md.count("under load |") == 1
    assert f"- a: {caveat}" in md
    # the report, from the same runs read back: the same sources, the same words
    runs = [r for i in range(3) for r in (*alone[i], *together[i])]
    claims = job_claims(ColocateRecord.from_dict(rec.to_dict()), runs)
    assert [c.under_load for c in claims] == [True, False]
    assert CL.load_caveat(claims[0].sources) == a["load_caveat"]
