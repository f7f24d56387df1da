"""MFU in the diagnosis, the runs table and the batch table (report/findings/diagnose.py, batch.py)."""

from scaleprobe.report.findings import diagnose as _diagnose
from scaleprobe.report.render import sections_runs as _runs
from scaleprobe.report.render.sections_runs import RUN_HEADERS
from scaleprobe.report.tables import batch as _batch
from tests.unit.report.factory import breakdown, loaded, run, sweep_point, typed_api, typed_module

B = typed_module(_batch)
diagnose_run = typed_api(_diagnose.diagnose_run)
run_cells = typed_api(_runs.run_cells)


def _with_mfu(rec, mfu, peak=1e11, measured=True):
    m = rec["metrics"]
    m["achieved_flops_per_s"] = mfu * peak
    m["mfu"] = mfu
    m["peak"] = {"flops_per_s": peak, "devices": 1, "dtype": "fp32", "measured": measured,
                 "source": "measured peak: test"}
    return rec


def _verdicts(rec):
    return {f.verdict: f for f in diagnose_run(rec)}


def test_low_mfu_says_not_compute_bound_and_names_what_the_step_waits_on():
    """Catches a step that is mostly 'compute' by the phase timer called compute-bound while
    the model's FLOPs use 8% of the device: the user would buy a faster device for nothing."""
    rec = _with_mfu(run("slow", bd=breakdown(0.1, data=0.05)), 0.08)
    v = _verdicts(rec)
    assert "not compute-bound" in v and "compute-bound" not in v
    ev = v["not compute-bound"].evidence
    assert ev.startswith("8.0% of the measured peak") and "host" in ev


def test_low_mfu_with_a_long_data_wait_names_the_input():
    """Catches the 'waits on' part naming compute when the input takes most of the step."""
    rec = _with_mfu(run("starved", bd=breakdown(0.1, data=0.6)), 0.05)
    assert "waits on input (data wait 60%" in _verdicts(rec)["not compute-bound"].evidence


def test_high_mfu_is_compute_bound_with_the_figure():
    """Catches a device at half its peak reported without the figure that proves it."""
    rec = _with_mfu(run("busy"), 0.5, peak=1e15, measured=False)
    fs = [f for f in diagnose_run(rec) if f.verdict == "compute-bound"]
    assert len(fs) == 1  # one verdict: the MFU figure and the compute share together
    assert "50% of the peak" in fs[0].evidence and "measured" not in fs[0].evidence
    assert "compute 98% of each step" in fs[0].evidence  # the factory: data 2%


def test_no_mfu_no_finding_and_an_explained_cell():
    """Catches old records (no FLOPs) read as 0% of peak."""
    rec = run("old")
    assert "not compute-bound" not in _verdicts(rec)
    cells = dict(zip(RUN_HEADERS, run_cells(rec), strict=True))
    assert cells["MFU"] == "n/a"


def test_batch_table_has_tflops_and_mfu_per_point():
    """Catches the roofline columns missing or taken from another point."""
    recs = [_with_mfu(run(f"b{b}", batch=b, experiment=sweep_point("s", batch_size=b)), m)
            for b, m in ((16, 0.1), (32, 0.2))]
    rows = B.batch_table(recs)
    cells = [dict(zip(B.BATCH_HEADERS, B.batch_cells(r), strict=True)) for r in rows]
    assert [c["MFU"] for c in cells] == ["10%", "20%"]
    assert [c["TFLOP/s"] for c in cells] == ["0.01", "0.02"]


def test_low_mfu_with_exposed_communication_names_it():
    """Catches the 'waits on' part naming the input (or compute) when exposed communication
    is the largest part of the step that is not arithmetic."""
    rec = _with_mfu(run("ddp", strategy="ddp", nproc=2, bd=breakdown(0.1, data=0.1, comm=0.5)),
                    0.04)
    assert "waits on communication (exposed 50% of the step)" in \
        _verdicts(rec)["not compute-bound"].evidence


def test_sweep_points_table_shows_each_points_own_mfu():
    """Catches the MFU column of a sweep's points table missing, shifted against its header,
    or filled from another point."""
    from scaleprobe.report.render.sweep_tables import POINT_HEADERS, points_table

    recs = [_with_mfu(run(m, model=m, experiment=sweep_point("s", model=m)), f)
            for m, f in (("linear", 0.031), ("mlp", 0.42))]
    table = points_table(loaded(recs), [], ["model"])
    assert table["headers"] == ["model", *POINT_HEADERS]
    col = table["headers"].index("MFU")
    assert [(row[0], row[col]) for row in table["rows"]] == [("linear", "3.1%"), ("mlp", "42%")]


def test_low_mfu_of_a_run_starved_of_cpu_is_not_blamed_on_the_model():
    """Bug caught: "not compute-bound: small operators, kernel launches" said of runs that
    had 6-9% of the CPU. A run whose processes used under half the cores its threads could
    is CPU-starved; with its CPU share unmeasured, a starved CPU is not ruled out."""
    # 2 ranks x 1 thread on 2 cores could use 100%; they used 8%
    rec = _with_mfu(run("hogged", strategy="ddp", nproc=2, threads=1, cores=2, cpu=8.0), 0.05)
    v = _verdicts(rec)
    assert "CPU-starved" in v and "not compute-bound" not in v
    assert "used 8% of the machine's cores, 8% of what its 1 thread(s) x 2" in \
        v["CPU-starved"].evidence
    assert "small operators" not in v["CPU-starved"].evidence
    # the same run at 60% of its cores: the model's own small operators
    ok = _with_mfu(run("quiet", strategy="ddp", nproc=2, threads=1, cores=2, cpu=60.0), 0.05)
    assert "small operators" in _verdicts(ok)["not compute-bound"].evidence
    # one thread on 4 cores could use 25%: 20% is 80% of it, not starved
    one = _with_mfu(run("one", threads=1, cores=4, cpu=20.0), 0.05)
    assert "not compute-bound" in _verdicts(one)
    unknown = _with_mfu(run("unknown", cpu=None), 0.05)
    assert "not ruled out" in _verdicts(unknown)["not compute-bound"].evidence
