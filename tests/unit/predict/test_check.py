"""``predict --check`` (predict/check.py): which one-rank runs a measured run is predicted from,
and the figures set beside it; link specs (comm/links.py) and per-rank cables
(netlab/ranknet.py); the straggler a parameter server names (measure/aggregate.py)."""

import math
import re
from dataclasses import replace

import pytest

from scaleprobe.core.errors import ConfigError
from scaleprobe.core.result_model import RunResult
from scaleprobe.core.run_metrics import MemoryFacts, StepTime
from scaleprobe.core.run_parts import Load, RankSummary
from scaleprobe.features import links
from scaleprobe.features.links import parse_spec, resolve_link
from scaleprobe.measure.aggregate import straggler
from scaleprobe.predict import check as C
from scaleprobe.predict import sample as S
from scaleprobe.predict import stepmodel as M
from scaleprobe.predict.timeline import Unit
from tests.unit.predict.test_stepmodel import THIRDS, one_rank_run


def measured(name, started, strategy="ddp", link="slow=0.4,0", step=0.085, threads=1,
             comm=0.04):
    return RunResult.from_dict({
        "kind": "run", "run_id": name, "name": name, "status": "ok", "started_at": started,
        "config": {"model": {"name": "m"}, "dist": {"strategy": strategy, "nproc": 1,
                                                    "nnodes": 2, "link": link}},
        "env": {"threads": threads, "cpu_model": "cpu"},
        "batch": {"per_device": 32, "world_size": 2},
        "metrics": {"step_time_s": {"median": step, "rel_ci": 0.05},
                    "breakdown_s": {"forward": 0.01, "backward": 0.03, "optimizer": 0.005,
                                    "comm": comm}},
        "comm": {"measured_link": {"name": link}}})


def _t(minute, second=0):
    return f"2026-11-26T08:{minute:02d}:{second:02d}+00:00"


def test_matching_takes_the_nearest_before_and_after_and_their_side_by_side_runs(tmp_path):
    rows = [(0.01, 0.03, 0.005)] * 4
    early = one_rank_run(tmp_path, rows, THIRDS, started=_t(0), name="early")
    pair = [one_rank_run(tmp_path, rows, THIRDS, started=_t(5, s), name=f"p{s}")
            for s in (0, 10)]
    after = one_rank_run(tmp_path, rows, THIRDS, started=_t(8), name="after")
    late = one_rank_run(tmp_path, rows, THIRDS, started=_t(40), name="late")  # > 15 min on
    other_threads = one_rank_run(tmp_path, rows, THIRDS, started=_t(6), name="t2", threads=2)
    single = one_rank_run(tmp_path, rows, strategy="single", started=_t(6), name="single")
    run = measured("m2", _t(6, 30))
    pool = [early, *pair, after, late, other_threads, single, run]
    assert {r.run_id for r in C.matching(run, pool)} == {"p0", "p10", "after"}
    # a parameter server is predicted from a run without DDP when there is one
    assert [r.run_id for r in C.matching(measured("ps", _t(6, 30), "ps"), pool)] == ["single"]
    assert C.matching(measured("x", _t(6, 30), threads=4), pool) == []


def test_check_sets_each_measured_run_beside_its_prediction(tmp_path):
    """The hand-computed 85 ms step (test_stepmodel) against measured 85 ms and 100 ms."""
    rows = [(0.01, 0.03, 0.005)] * 8
    base = one_rank_run(tmp_path, rows, THIRDS, started=_t(0))
    exact, slow = measured("a", _t(1)), measured("b", _t(2), step=0.100, comm=0.055)
    second_host = RunResult.from_dict({**measured("c", _t(1)).to_dict(),
                                       "metrics": {}, "batch": {}})  # node 1's empty record
    cfg = second_host.config
    second_host.config = replace(cfg, dist=replace(cfg.dist, node_rank=1))
    points = C.check([base, exact, slow, second_host])
    assert [p.run.run_id for p in points] == ["a", "b"]
    a, b = points
    assert a.ratio == pytest.approx(1.0) and b.ratio == pytest.approx(0.85)
    # predicted 85 (no spread, the model's own error only) over measured 100 +- 5%
    lo, hi = b.ratio_interval
    assert lo == pytest.approx(85 * math.exp(-M.MODEL_SHORTER) / 105)
    assert hi == pytest.approx(85 * math.exp(M.MODEL_LONGER) / 95)
    assert a.causes() == [] and any("communication measured 55 ms" in c for c in b.causes())
    summ = C.summary(points)
    assert summ.points == 2 and summ.median_abs_error == pytest.approx(0.075)
    assert summ.within_median_goal == 1 and summ.within_every_goal == 2
    assert summ.goal_met  # the median point within 10% (7.5%), every point within 20%
    worse = C.check([base, exact, slow, measured("c", _t(3), step=0.120)])
    assert not C.summary(worse).goal_met  # 85 / 120: 29% off
    nothing = C.check([measured("alone", _t(1))])
    assert nothing[0].prediction is None and "no matching 1-rank run" in nothing[0].reason


def test_link_specs():
    assert parse_spec("1gbit,rank2=100mbit").per_rank == {2: "100mbit"}
    assert parse_spec("rank2=100mbit").base is None
    assert parse_spec("ib=200,2").base == "ib=200,2"  # the comma of NAME=GBIT,US stays
    ib = resolve_link("ib=200,2")
    assert (ib.name, ib.bandwidth_gbit_s, ib.alpha_s) == ("ib", 200.0, 2e-6)
    slow = resolve_link("1gbit,rank2=100mbit")
    assert slow.bandwidth_gbit_s == pytest.approx(0.1) and "slowest" in slow.source
    assert resolve_link("nvlink").bandwidth_gbit_s == 3600.0
    with pytest.raises(ConfigError, match="no comm results"):
        resolve_link("measured:/nonexistent/dir")
    with pytest.raises(ConfigError, match="unknown link '1gbit,2gbit'"):
        resolve_link("1gbit,2gbit,rank1=10gbit")


def test_per_rank_cables():
    assert links.rates_mbit("rank2=100mbit", 3) == [None, None, 100.0]
    assert links.rates_mbit("1gbit,rank0=100mbit", 2) == [100.0, 1000.0]
    assert links.rates_mbit("1gbit", 3) is None  # no per-rank item: no namespaces
    with pytest.raises(ConfigError, match="ranks 0..2"):
        links.rates_mbit("rank3=100mbit", 3)
    with pytest.raises(ConfigError, match="give a rate"):
        links.rates_mbit("rank1=measured:/x", 3)
    with pytest.raises(ConfigError, match="across real hosts"):
        links.rates_mbit("rank1=100mbit", 1, nnodes=2)


def _rank(r, median):
    return RankSummary(rank=r, step_time_s=StepTime(median=median), steps_done=10)


def test_a_parameter_server_names_the_worker_it_waits_for():
    """Workers of a synchronous server take equal steps (lockstep), so the longest median
    step is chance (here rank 1 by 0.1 ms); the worker whose gradients come in last is the
    one the others wait for."""
    ranks = [_rank(1, 0.7521), _rank(2, 0.7520)]
    assert straggler(ranks)["slowest_rank"] == 1
    got = straggler(ranks, {"1": 0.0, "2": 0.9})
    assert got["slowest_rank"] == 2 and "900.0 ms after the first worker" in got["line"]
    assert straggler(ranks, {"1": None, "2": None})["slowest_rank"] == 1  # none recorded


def test_check_on_the_command_line(tmp_path, capsys, monkeypatch):
    import json

    monkeypatch.setenv("COLUMNS", "80")

    from scaleprobe.cli import main

    base = one_rank_run(tmp_path, [(0.01, 0.03, 0.005)] * 8, THIRDS, started=_t(0))
    lines = [json.dumps(r.to_dict()) for r in (base, measured("a", _t(1), step=0.1))]
    (tmp_path / "results.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["predict", "--check", str(tmp_path), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    (pt,) = got["points"]
    assert pt["ratio"] == pytest.approx(0.85) and pt["bases"] == ["r"]
    assert got["summary"]["points"] == 1 and got["summary"]["goal_met"] is False  # 15% off
    assert main(["predict", "--check", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "0.85" in out and "goal (median within +-10%" in out
    # bugs caught: one unit named in the title, nothing cut in 80 columns, no name or
    # heading folded mid-word ("digits_cn" over "n", "predicte" over "d")
    assert re.search(r"\(ms, 95%\s+intervals", out) and "…" not in out
    head = next(ln for ln in out.splitlines() if ln.startswith("model"))
    assert head.split() == ["model", "link", "ranks", "measured", "predicted", "ratio", "comm"]
    assert re.search(r"^\S+\s+\S+\s+ddp x2\s", out, re.M), out
    assert max(len(line) for line in out.splitlines()) <= 80
    (tmp_path / "results.jsonl").write_text(lines[0] + "\n")
    assert main(["predict", "--check", str(tmp_path)]) == 2
    assert "no measured multi-rank run" in capsys.readouterr().err


def test_a_time_and_its_interval_share_one_unit():
    from scaleprobe.commands.predict_steps import _time_fig

    assert _time_fig(0.3421, 0.3326, 0.3514) == "342.1 [332.6, 351.4]"
    # 10.23 s with a low end under 10 s: seconds for all three, not "9850.1" beside "10.49 s"
    assert _time_fig(10.23, 9.8501, 10.49) == "10.23 [9.85, 10.49] s"
    assert _time_fig(None, None, None) == "n/a"


def test_the_goals_edges_are_inclusive():
    """``predict --check``'s goal: the median point within +-10% and every point within
    +-20%, edges included. Catches the counts written with ``<`` for ``<=``: a point exactly
    10% or 20% off (as printed) must count within."""
    from types import SimpleNamespace as P

    edge = C.summary([P(ratio=1.1), P(ratio=0.9), P(ratio=1.2), P(ratio=0.8), P(ratio=1.0)])
    # errors 0.10, 0.10, 0.20, 0.20, 0.00: sorted 0, .1, .1, .2, .2 -> median 0.10
    assert edge.points == 5
    assert edge.within_median_goal == 3  # 0.0, and the two exactly 10% off
    assert edge.within_every_goal == 5  # the two exactly 20% off count
    assert edge.median_abs_error == 0.1 and edge.goal_met
    past = C.summary([P(ratio=1.2001), P(ratio=1.1001), P(ratio=1.0)])
    assert past.within_median_goal == 1 and past.within_every_goal == 2
    assert not past.goal_met  # one point past 20%
    assert C.summary([P(ratio=1.1001), P(ratio=1.1001), P(ratio=1.0)]).median_abs_error \
        == pytest.approx(0.1001)
    assert not C.summary([P(ratio=1.1001), P(ratio=1.1001), P(ratio=1.0)]).goal_met


def test_mean_median_and_p90_in_the_papers_form():
    """Errors 0, .02, .04, ..., .18 (ten points): mean 9%, median 9% (the mean of .08 and
    .10), p90 the 9th smallest (nearest rank): 16%. Catches p90 taken as the worst, or one
    rank off, and the mean of the signed errors (0 for 1 +- x)."""
    from types import SimpleNamespace as P

    pts = [P(ratio=1 + (0.02 * i if i % 2 else -0.02 * i)) for i in range(10)]
    s = C.summary(pts)
    assert s.mean_abs_error == pytest.approx(0.09) and s.median_abs_error == pytest.approx(0.09)
    assert s.p90_abs_error == pytest.approx(0.16) and not s.papers_goal_met
    good = C.summary([P(ratio=r) for r in (1.0, 1.02, 0.97, 1.04, 0.95, 1.09, 1.01, 0.99,
                                            1.03, 0.98)])
    # errors 0, .02, .03, .04, .05, .09, .01, .01, .03, .02: mean 3%, median 2.5%, p90 5%
    assert good.p90_abs_error == pytest.approx(0.05) and good.papers_goal_met
    assert not C.summary([P(ratio=1.0)] * 9 + [P(ratio=1.6)]).papers_goal_met  # mean 6%


def test_the_summary_counts_the_measured_steps_inside_their_intervals():
    """The predicted interval is a claim: the summary says how many measured steps it held
    (the 27-point grids held 12-22 of 27: the model's own error is not in it). The edges
    count as inside; a point without an interval is not counted either way."""
    from types import SimpleNamespace as P

    def pt(lo, hi, measured, value=1.0):
        return P(ratio=value / measured, measured_s=measured,
                 prediction=P(step_s=P(value=value, lo=lo, hi=hi)))

    s = C.summary([pt(0.9, 1.1, 1.0), pt(0.9, 1.1, 1.1), pt(0.9, 1.1, 1.2),
                   pt(0.95, 1.05, 0.8), pt(None, None, 1.0)])
    assert (s.with_interval, s.inside_interval) == (4, 2) and s.points == 5


def test_pairs_of_one_setting_that_differ_by_more_than_15_percent_keep_their_order():
    from types import SimpleNamespace as P

    def pt(name, measured_s, predicted_s, model="m"):
        run = measured(name, _t(1), step=measured_s)
        run.config = replace(run.config, model=replace(run.config.model, name=model))
        return C.Point(run, prediction=P(step_s=P(value=predicted_s)))

    a, b, c = pt("a", 0.100, 0.100), pt("b", 0.110, 0.090), pt("c", 0.130, 0.095)
    other = pt("o", 0.5, 0.05, model="other")  # another setting: never paired
    pairs = C.order_pairs([a, b, c, other])
    # a-b differ by 10% (not checked); a-c by 30%, b-c by 18%: both checked
    got = {(x.fast.run.run_id, x.slow.run.run_id): x for x in pairs}
    assert set(got) == {("a", "c"), ("b", "c")}
    assert got[("a", "c")].measured_ratio == pytest.approx(1.3)
    assert got[("a", "c")].predicted_ratio == pytest.approx(0.95) and got[("a", "c")].misordered
    assert not got[("b", "c")].misordered  # 95 / 90: in order
    tie = C.order_pairs([pt("x", 0.1, 0.1), pt("y", 0.2, 0.1)])
    assert tie[0].misordered  # a tie does not order them


def test_the_interval_holds_the_drift_between_pooled_runs(tmp_path, monkeypatch):
    """Two one-rank runs whose steps agree within each run but sit 20% apart: pooled, the
    two-level bootstrap's interval spans both runs' levels (drawing one run twice is half the
    resamples); steps resampled across the pool only would average them away. One run: its
    interval is its own spread (none here) and the model's error, and the prediction says the
    drift is not in it."""
    from scaleprobe.predict import whatif as W

    fast = one_rank_run(tmp_path, [(0.01, 0.03, 0.005)] * 12, THIRDS, name="fast")
    slow = one_rank_run(tmp_path, [(0.012, 0.036, 0.006)] * 12, THIRDS, name="slow")
    sc = W.scenario("ddp", 2, 1, "loopback")
    alone_fast = M.predict(C.pooled([fast]), sc)
    assert M.ONE_RUN_NOTE in alone_fast.notes
    assert alone_fast.step_s.hi == pytest.approx(alone_fast.step_s.value
                                                 * math.exp(M.MODEL_LONGER))
    with monkeypatch.context() as m:  # the bootstrap's part alone
        m.setattr(M, "MODEL_LONGER", 0.0)
        m.setattr(M, "MODEL_SHORTER", 0.0)
        pool = C.pooled([fast, slow])
        both = M.predict(pool, sc)
        flat = M.predict(replace(pool, groups=None), sc)  # steps drawn across the pool
    v = alone_fast.step_s.value
    assert both.step_s.lo <= v * 1.01 and both.step_s.hi >= v * 1.15
    assert flat.step_s.lo > both.step_s.lo * 1.015  # the fast run's level averaged away
    assert M.ONE_RUN_NOTE not in both.notes


def test_fsdp_is_predicted_with_a_collective_per_recorded_unit(tmp_path):
    """FSDP gathers and reduce-scatters each unit in a call of its own, and over a link with
    latency each call pays it: a run whose model has three units is predicted with three, as
    its record names them, not as one unit of all its bytes. 474 KB over a link of 1 Gbit/s
    with 1 ms per hop: one unit gives 2 all-gathers and 1 reduce-scatter per step (3 ms of
    latency), three give 5 and 3 (8 ms; the root stays gathered after forward), less the
    root's bytes not gathered again (74 KB at 125 MB/s over 2 ranks: 0.3 ms)."""
    rows = [(0.01, 0.03, 0.005)] * 8
    units = [199_936, 199_936, 74_240]
    base = one_rank_run(tmp_path, rows, strategy="fsdp", started=_t(0), params=118_528)
    base.metrics.memory_facts = MemoryFacts(unit_bytes=units)
    bare = one_rank_run(tmp_path, rows, strategy="fsdp", started=_t(0), params=118_528,
                        name="bare")
    run = measured("f2", _t(1), strategy="fsdp", link="lat=1,1000", step=0.06)
    (with_units,) = C.check([base, run])
    (one_unit,) = C.check([bare, run])
    assert S.recorded_units(base) == tuple(Unit(float(b), b / sum(units), regather=i < 2)
                                           for i, b in enumerate(units))
    assert S.recorded_units(bare) == ()
    more = with_units.prediction.step_s.value - one_unit.prediction.step_s.value
    assert more == pytest.approx(5e-3 - 74_240 / 2 / 125e6, abs=0.2e-3)


def test_the_drift_of_a_points_one_rank_runs_is_the_floor_beside_the_error(tmp_path):
    """A point's drift is |after / before - 1| of its one-rank runs' median steps, the side
    by side ones averaged (two before at 40 and 50 ms: 45; one after at 54 ms: 20%). A point
    with its one-rank runs on one side only has none. The summary takes median and p90 over
    the points that have one."""
    from types import SimpleNamespace as P

    def base(name, started, step):
        return one_rank_run(tmp_path, [(0.01, step - 0.015, 0.005)] * 4, THIRDS,
                            started=started, name=name)

    pool = [base("b0", _t(5, 0), 0.040), base("b1", _t(5, 10), 0.050),
            base("a0", _t(8), 0.054), measured("m", _t(6, 30))]
    (point,) = C.check(pool)
    assert {b.run_id for b in point.bases} == {"b0", "b1", "a0"}
    assert point.drift == pytest.approx(0.2)
    early = C.check([pool[0], pool[1], measured("m2", _t(9))])[0]  # nothing after it
    assert early.drift is None
    s = C.summary([P(ratio=1.0, drift=d) for d in (0.01, 0.02, 0.03, 0.04, 0.05, 0.06,
                                                    0.07, 0.08, 0.09, 0.30)]
                  + [P(ratio=1.0, drift=None), P(ratio=None, drift=0.9)])
    assert s.drift_points == 10 and s.median_drift == pytest.approx(0.055)
    assert s.p90_drift == pytest.approx(0.09)  # the 9th of 10, not the worst


def _loaded(run, cores, steps=40, machine_cores=1, companions=None):
    """``run`` with the outside load its monitor read over ``steps`` timed steps (40 of the
    one-rank run's 45 ms: 1.8 s, more than 3 samples at the default 0.5 s), on a machine of
    ``machine_cores`` (its one thread keeps the one core busy)."""
    run.metrics = replace(run.metrics, outside_cpu_cores=cores, steps_timed=steps)
    run.load = Load(outside_cpu_cores=cores, machine_cores=machine_cores,
                    companion_runs=companions)
    return run


def test_the_outside_load_measured_with_a_run_stretches_the_compute_it_is_predicted_with(
        tmp_path):
    """The hand-computed 85 ms step: 10 ms forward, 30 ms backward with three 1 MB buckets
    ready at its thirds, each 20 ms on the link, 5 ms optimizer. Measured while processes
    outside it used 0.2 of a core (its one-rank run: none), every compute phase takes 1.2x:
    forward 12, buckets ready at 12, 24, 36 ms of backward, done at 32, 52, 72, optimizer 6:
    90 ms. The other way (the one-rank run under that load, the measured run not), compute
    takes 1/1.2: 8.33 + 68.33 + 4.17 = 80.83 ms. Without the figure on either side: 85 ms."""
    rows = [(0.01, 0.03, 0.005)] * 8
    base = _loaded(one_rank_run(tmp_path, rows, THIRDS, started=_t(0)), 0.0)
    (pt,) = C.check([base, _loaded(measured("a", _t(1), step=0.09), 0.2)])
    assert pt.load == pytest.approx(1.2) and pt.ratio == pytest.approx(1.0)
    assert pt.prediction.step_s.value == pytest.approx(0.090)
    assert any("compute 20.0% longer" in n and "outside load" in n
               for n in pt.prediction.notes)
    base.metrics = replace(base.metrics, outside_cpu_cores=0.2)
    (pt,) = C.check([base, _loaded(measured("a", _t(1)), 0.0)])
    assert pt.load == pytest.approx(1 / 1.2)
    assert pt.prediction.step_s.value == pytest.approx(0.08083, rel=1e-3)
    base.metrics = replace(base.metrics, outside_cpu_cores=None)  # not measured: as it was
    (pt,) = C.check([base, _loaded(measured("a", _t(1)), 0.2)])
    assert pt.load == 1.0 and pt.prediction.step_s.value == pytest.approx(0.085)
    # a window too short for the monitor to read (10 steps of 45 ms: 0.45 s, under 3
    # samples of 0.5 s) is not read: one such run of two, the other's figure; both, none
    short = _loaded(one_rank_run(tmp_path, rows, THIRDS, started=_t(0, 5), name="short"),
                    1.9, steps=10)
    base.metrics = replace(base.metrics, outside_cpu_cores=0.0)
    assert not C.readable_window(short) and C.outside_cores(short) is None
    assert C.load_factor(_loaded(measured("a", _t(1)), 0.2), [base, short]) == pytest.approx(1.2)
    assert C.load_factor(_loaded(measured("a", _t(1)), 0.2), [short]) == 1.0
    assert C.load_factor(_loaded(measured("a", _t(1)), 0.2, steps=3), [base]) == 1.0
    # on 4 cores one thread leaves 3 idle for the outside work: nothing taken from it; three
    # copies started with it (companions) fill them
    assert C.load_factor(_loaded(measured("a", _t(1)), 0.2, machine_cores=4), [base]) == 1.0
    assert C.load_factor(_loaded(measured("a", _t(1)), 0.2, machine_cores=4, companions=3),
                         [base]) == pytest.approx(1.2)
    sample = S.from_run(base)
    assert S.stretched(sample, 1.0) is sample
    assert C.load_factor(measured("b", _t(1)), [base]) == 1.0


def test_the_check_prints_and_keeps_the_load_it_predicted_with(tmp_path, capsys, monkeypatch):
    import json

    from scaleprobe.cli import main

    monkeypatch.setenv("COLUMNS", "80")
    base = _loaded(one_rank_run(tmp_path, [(0.01, 0.03, 0.005)] * 8, THIRDS, started=_t(0)),
                   0.0)
    run = _loaded(measured("a", _t(1), step=0.09), 0.2)
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n"
                                                    for r in (base, run)))
    assert main(["predict", "--check", str(tmp_path), "--json"]) == 0
    (pt,) = json.loads(capsys.readouterr().out)["points"]
    assert pt["load_factor"] == pytest.approx(1.2) and pt["ratio"] == pytest.approx(1.0)
    assert main(["predict", "--check", str(tmp_path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "outside load: 1 point(s) predicted with compute +20.0% to +20.0%" in out


def test_the_mean_ratio_by_strategy_shows_where_errors_lean():
    """Absolute errors of 5% either way read alike; the mean ratio per strategy tells a
    strategy predicted short on every point (ddp here) from one right on average (ps)."""
    from types import SimpleNamespace as P

    def run(strategy):
        return P(cfg=lambda k, s=strategy: s if k == "dist.strategy" else None)

    summ = C.summary([P(ratio=0.95, run=run("ddp")), P(ratio=0.93, run=run("ddp")),
                      P(ratio=1.05, run=run("ps")), P(ratio=0.95, run=run("ps")),
                      P(ratio=None, run=run("fsdp"))])
    assert summ.ratio_by_strategy == {"ddp": (pytest.approx(0.94), 2),
                                      "ps": (pytest.approx(1.0), 2)}
    assert summ.mean_abs_error == pytest.approx(0.055)


def test_a_run_and_its_link_benchmarked_with_another_gloo_io_are_named(tmp_path):
    """A link benchmarked with gloo's socket threads at SCHED_BATCH (``comm --gloo-io
    batch``) prices the small collectives a default run pays a scheduler tick more for: the
    point says so, whatever its error; a run measured the same way does not."""
    import json

    link_dir = tmp_path / "link"
    link_dir.mkdir()
    rec = {"kind": "comm", "world_size": 2, "nnodes": 2, "backend": "gloo",
           "settings": {"gloo_io": "batch"},
           "fit": {"all_reduce": {"alpha_s": 1e-4, "beta_s_per_byte": 1e-9}}}
    (link_dir / "results.jsonl").write_text(json.dumps(rec) + "\n")
    assert resolve_link(f"measured:{link_dir}").gloo_io == "batch"
    base = one_rank_run(tmp_path, [(0.01, 0.03, 0.005)] * 8, THIRDS, started=_t(0))
    run = measured("a", _t(1), link=f"measured:{link_dir}")
    (pt,) = C.check([base, run])
    assert pt.link_gloo_io == "batch"
    assert any("measured with --gloo-io default, its link benchmarked with --gloo-io batch"
               in c for c in pt.causes())
    cfg = run.config
    run.config = replace(cfg, dist=replace(cfg.dist, gloo_io="batch"))
    (pt,) = C.check([base, run])
    assert not any("--gloo-io" in c for c in pt.causes())


def _one_busy_one_quiet(tmp_path):
    """A one-rank run, then two measured runs: "a" with 1.7 cores used outside it (under
    load), "b" quiet."""
    base = one_rank_run(tmp_path, [(0.01, 0.03, 0.005)] * 8, THIRDS, started=_t(0))
    runs = [base]
    for name, minute, cores in (("a", 1, 1.7), ("b", 2, 0.05)):
        r = measured(name, _t(minute))
        r.metrics = replace(r.metrics, outside_cpu_cores=cores)
        r.load = Load(flag=cores > 1, outside_cpu_cores=cores, machine_cores=2)
        runs.append(r)
    return runs


def test_a_measured_run_under_load_says_so_at_any_error(tmp_path):
    """Bug caught: a loaded measured run was named "under load" only when its prediction
    was more than 10% off (the causes stopped there), so a prediction that matched a loaded
    run - perhaps matching its load - looked like one that matched the machine."""
    a, b = C.check(_one_busy_one_quiet(tmp_path))
    assert a.ratio == pytest.approx(1.0, abs=0.05) and a.under_load and not b.under_load
    assert [c for c in a.causes() if c.startswith("measured under load (")] == [
        "measured under load (processes outside the run used 1.70 cores on average (of 2; "
        "limit 0.25))"]
    assert b.causes() == []


def test_the_check_table_stars_every_measured_run_under_load(tmp_path, capsys):
    """The terminal's table, as the report's: the loaded run's measured step is starred and
    a line under the table names it, however close its prediction; the quiet one is not."""
    from scaleprobe.commands.predict_steps import print_check

    points = C.check(_one_busy_one_quiet(tmp_path))
    print_check(points, C.summary(points))
    out = " ".join(capsys.readouterr().out.split())
    assert out.count("*") == 2, out  # the starred cell and the line under the table
    assert ("* measured under load (1 of 2 points): a (processes outside the run used 1.70 "
            "cores on average (of 2; limit 0.25))") in out
