"""A run measured under load says so: in the runs table, the findings and the experiment
sections of the report."""

from __future__ import annotations

import pytest

from scaleprobe.core.thresholds import Thresholds
from scaleprobe.report import build_report
from scaleprobe.report.findings.diagnose import diagnose_run as _diagnose_run
from scaleprobe.report.reading import machine_load as _load
from tests.unit.report.factory import (
    colocate_record,
    run,
    scale_point,
    sweep_point,
    typed_api,
    write_results,
)

diagnose_run = typed_api(_diagnose_run)
run_load = typed_api(_load.run_load)
under_load_line = typed_api(_load.under_load_line)


def loaded(rec: dict, cores: float, machine: int = 2) -> dict:
    """``rec`` with the outside-load figures a run records (flag as judged at run time)."""
    rec["metrics"]["outside_cpu_cores"] = cores
    rec["metrics"]["outside_cpu_s"] = cores * 10.0
    flag, reason = Thresholds().under_load(cores, machine)
    rec["load"] = {"flag": flag, "reason": reason, "outside_cpu_cores": cores,
                   "machine_cores": machine, "limit_cores": 0.25, "window_s": 10.0,
                   "gpu_processes": None}
    return rec


def test_runs_table_and_findings_show_the_load(tmp_path):
    """Catches a run measured beside other work that the report presents as clean."""
    busy = loaded(run("busy"), 1.7)
    quiet = loaded(run("quiet"), 0.05)
    write_results(tmp_path, [busy, quiet])
    md = build_report(tmp_path)[0].read_text()
    assert "| under load (1.70 cores) |" in md and "| 0.05 cores |" in md
    assert "under load: processes outside the run's own process tree kept more" in md
    assert "Thresholds." not in md  # an internal name means nothing to the reader
    f = [x for x in diagnose_run(busy) if x.verdict == "measured under load"]
    assert f and "1.70 cores on average (of 2; limit 0.25)" in f[0].evidence
    assert f[0].severity == "warning"
    assert "measured under load" not in {x.verdict for x in diagnose_run(quiet)}
    # the caveat does not hide what limits the run
    assert "compute-bound" in {x.verdict for x in diagnose_run(busy)}


def test_experiment_sections_list_the_points_measured_under_load(tmp_path):
    """Catches sweep and scaling tables built from points measured under load without a
    word about which ones."""
    recs = [loaded(run(f"bs{b}", batch=b, experiment=sweep_point("sw", batch_size=b)), c)
            for b, c in ((16, 0.05), (32, 1.2))]
    recs += [loaded(run(f"n{n}", nproc=n, strategy="ddp", sps=100.0 * n,
                        experiment=scale_point("sc", n)), c) for n, c in ((1, 0.9), (2, 0.1))]
    write_results(tmp_path, recs)
    md = build_report(tmp_path)[0].read_text()
    assert "Measured under load (1 of 2 points): batch_size=32 (1.20 cores outside)" in md
    assert "Measured under load (1 of 2 points): nproc=1 (0.90 cores outside)" in md


def test_the_report_judges_with_its_own_thresholds():
    """Catches a report that trusts a flag set under another threshold (so one rule applies
    to every run shown), and one that drops a flag recorded without figures."""
    rec = loaded(run("r"), 0.5)
    assert run_load(rec)[0] is True
    assert run_load(rec, Thresholds(load_cores=1.0))[0] is False
    old = run("old")
    old["load"] = {"flag": True, "reason": "recorded"}
    assert run_load(old) == (True, "recorded")
    assert run_load(run("never"))[0] is None
    assert under_load_line([run("never")]) is None


def test_a_foreign_gpu_process_is_load():
    """Catches another program's compute process on the run's GPU left out of the flag."""
    rec = loaded(run("gpu"), 0.0)
    rec["load"]["gpu_processes"] = [{"device": 0, "pid": 4242, "name": "python",
                                     "used_memory_bytes": 1 << 30}]
    rec["metrics"]["outside_gpu_processes"] = 1
    flag, reason = run_load(rec)
    assert flag is True and "python 4242 on GPU 0" in reason
    assert "1 other GPU process(es)" in under_load_line([rec])


def _together(job: str, repeat: int, outside: float, cpu_pct: float,
              window: tuple[float, float] = (100.0, 101.0), cores: int = 2,
              machine: int = 2, status: str = "ok") -> dict:
    rec = loaded(run(f"{job}-t{repeat}", cpu=cpu_pct, cores=cores), outside, machine)
    rec["status"] = status
    rec["experiment"] = {"id": "quick", "kind": "colocate", "repeat": repeat,
                         "point": {"job": job, "phase": "together"}}
    rec["metrics"]["window_clock"] = list(window)
    return rec


def test_a_colocated_jobs_own_cpu_is_not_outside_load(tmp_path):
    """Two jobs together on 2 cores: each one's outside figure is the other job (1.02 and
    0.96 cores, the other's 51% and 47% of the machine), not load to measure again on a
    quiet machine (bug caught: colocate_quick's 6 together runs called 'measured under load'
    with 'measure again on a quiet machine'). A third process's core still counts."""
    from scaleprobe.report.reading import records as R

    recs = [_together("cnn", 0, 0.96, 47.0), _together("linear", 0, 1.02, 51.0),
            _together("cnn", 1, 1.96, 47.0), _together("linear", 1, 2.02, 51.0),
            _together("cnn", 2, 1.0, 47.0, (200.0, 201.0)),  # its partner ran at another time
            _together("linear", 2, 1.0, 51.0, (300.0, 301.0))]
    write_results(tmp_path, recs)
    got = {(r.point["job"], r.repeat): r for r in R.runs(R.load_records(tmp_path))}
    flag, reason = run_load(got[("cnn", 0)])
    assert flag is False and "net of the 1.02 cores its co-located job(s) linear" in reason
    assert run_load(got[("linear", 0)])[0] is False
    assert run_load(got[("cnn", 1)])[0] is True  # 1.96 - 1.02: a core of someone else's
    assert run_load(got[("cnn", 2)])[0] is True  # windows apart: nothing to take off
    md = build_report(tmp_path)[0].read_text()
    assert "0.00 cores net of co-located jobs" in md
    assert "under load (0.94 cores net of co-located jobs)" in md


def test_a_partners_cpu_is_counted_on_its_own_cores_once_over_the_shared_window(tmp_path):
    """cpu_util_pct is a share of the cores a run may use (its affinity): two pinned jobs of
    4 cores on 8, each at 87.5%, plus a third process's 2 cores: the net is 2.0, flagged
    (bug caught: 87.5% of all 8 cores subtracted, 7.0, and the load hidden). A failed
    attempt of the partner and a partner window covering a tenth of the run's are not
    subtracted in full (bugs caught: 'b' counted twice after a rerun; 8 cores subtracted for
    1 s of a 10 s window)."""
    from scaleprobe.report.reading import records as R

    recs = [_together("a", 0, 5.5, 87.5, cores=4, machine=8),
            _together("b", 0, 5.5, 87.5, cores=4, machine=8),
            _together("a", 1, 4.0, 50.0, (0.0, 10.0), cores=8, machine=8),
            _together("b", 1, 4.0, 100.0, (9.0, 10.0), cores=8, machine=8),
            _together("b", 1, 4.0, 90.0, (0.0, 10.0), cores=8, machine=8, status="failed")]
    write_results(tmp_path, recs)
    got = R.runs(R.load_records(tmp_path))
    a0 = next(r for r in got if r.name == "a-t0")
    assert a0.load.colocated_cores == pytest.approx(3.5)
    assert run_load(a0)[0] is True and "2.00 cores" in run_load(a0)[1]
    a1 = next(r for r in got if r.name == "a-t1")
    assert a1.load.colocated_jobs == ["b"]
    assert a1.load.colocated_cores == pytest.approx(0.8)  # 8 cores x 1 s of 10 s
    assert run_load(a1)[0] is True


def test_the_load_caveat_rides_on_the_claims_it_concerns(tmp_path):
    """Bug caught: scale.md, colocate.md and the report did not say which runs were
    measured under load on the figures they concern. The speedup line of 2 processes carries
    the caveat of its baseline's run; job a's co-location reading carries its alone run's."""
    recs = [loaded(run(f"n{n}", nproc=n, strategy="ddp", sps=100.0 * n,
                       experiment=scale_point("sc", n)), c) for n, c in ((1, 0.9), (2, 0.1))]
    for job, cores in (("a", 1.4), ("b", 0.05)):
        recs.append(loaded(run(f"{job}-alone", experiment={
            "id": "co-1", "kind": "colocate", "point": {"job": job, "phase": "alone"},
            "repeat": 0}), cores))
    recs.append(colocate_record())
    write_results(tmp_path, recs)
    md = build_report(tmp_path)[0].read_text()
    assert ("measured under load: nproc=1: 0.90 cores outside (1 of 2 source runs); the "
            "figure may be slower than the machine allows") in md
    assert "| slower together, under load |" in md
    assert ("a: slowdown alone / together: 1.80x [1.70, 1.90], 3 repeats: slower together; "
            "measured under load: job=a, phase=alone (repeat 1): 1.40 cores outside (1 of 1 "
            "source runs)") in md
    assert "b: slowdown alone / together" not in md


def test_a_batch_step_over_a_loaded_point_says_so():
    """The batch rule's step 16 -> 32 stands on both points' runs: 32's load rides on it,
    and on the fastest batch size's line."""
    from scaleprobe.report.tables import batch_rule as _br

    recs = [loaded(run(f"bs{b}", batch=b, experiment=sweep_point("sw", batch_size=b)), c)
            for b, c in ((16, 0.05), (32, 1.2))]
    rec = _br.recommend_batch(typed_api(lambda x: x)(recs))
    (step,) = rec["steps"]
    caveat = ("measured under load: batch_size=32: 1.20 cores outside (1 of 2 source runs); "
              "the figure may be slower than the machine allows")
    assert step["text"].endswith(caveat)
    # the rankings stand on the same runs
    fastest = next(x for x in rec["text"].splitlines() if x.startswith("Fastest"))
    assert fastest.endswith(caveat + ".")
