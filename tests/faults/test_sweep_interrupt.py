"""Ctrl+C stops a sweep within seconds, leaves no process behind, keeps finished points;
a torn last line in results.jsonl is skipped with a warning, never lost or fatal."""

import json
import signal
import time

import psutil
import pytest

from scaleprobe.core import results as res
from scaleprobe.experiments.procs import GRACE_S
from scaleprobe.experiments.spec import load_spec, points
from scaleprobe.experiments.sweep import run_sweep
from scaleprobe.report.render.sweep_tables import write_tables
from tests.conftest import start_cli, wait_for

pytestmark = pytest.mark.timeout(180)

# From SIGINT to the sweep's exit: the sweep SIGINTs the running point, waits up to GRACE_S
# (3 s) for it to record itself, SIGKILLs what is left, writes the partial tables and exits.
# Measured 2026-11-24: 0.6-0.7 s on a quiet machine, 2.5-2.7 s with six busy processes beside
# it (load average 4-6), 3.5-4.1 s with ten (load average 6-10); the point recorded itself
# every time. GRACE_S + 5 s holds the longest wait for a point plus twice the worst teardown
# measured; a sweep that waits for its point to finish never stops (the point would train for
# many minutes) and fails on the 30 s limit of communicate().
STOP_MARGIN_S = 5.0

SPEC = """
[base]
model = "linear"
loader = "naive"
warmup_steps = 1
[grid]
steps = [2, 1000000]   # the first point finishes at once, the second would run for many minutes
"""


def _alive(procs):
    return [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def _sweep_training_its_second_point(tmp_path, out_dir):
    """SPEC's sweep, started; returned (its handle, its stderr's file, its results file) once
    its first point is recorded and its second is training (its progress file counts its
    steps timed). The caller ends the sweep."""
    spec = tmp_path / "s.toml"
    spec.write_text(SPEC)
    sweep, _, err_f = start_cli(tmp_path, "sweep", spec, "--out", out_dir, "--no-progress",
                                "--repeats", "1")
    results = out_dir / "results.jsonl"
    try:
        assert wait_for(lambda: len(res.read_jsonl(results, warn=False)) == 1, 120)
        assert wait_for(lambda: any("of 1000000 steps timed" in f.read_text(errors="replace")
                                    for f in (out_dir / "points").glob("*.progress")), 60)
    except BaseException:
        sweep.kill()
        raise
    return sweep, err_f, results


@pytest.mark.slow
def test_sigint_stops_the_sweep_and_every_child(tmp_path, out_dir):
    sweep, err_f, results = _sweep_training_its_second_point(tmp_path, out_dir)
    try:
        family = psutil.Process(sweep.pid).children(recursive=True)
        t0 = time.time()
        sweep.send_signal(signal.SIGINT)
        sweep.wait(timeout=30)
    finally:
        if sweep.poll() is None:
            sweep.kill()
    stop_s = time.time() - t0
    err = err_f.read_text(errors="replace")
    assert sweep.returncode == 130, err[-2000:]
    _, alive = psutil.wait_procs(family, timeout=3)
    assert not _alive(alive), f"left behind: {[p.cmdline() for p in _alive(alive)]}"
    runs = [r for r in res.read_jsonl(results) if r["kind"] == "run"]
    assert runs[0]["status"] == "ok" and runs[0]["experiment"]["point"] == {"steps": 2}
    # the second point records itself interrupted, unless it was still starting when the
    # sweep's grace ran out and SIGKILL ended it without a record; never "failed"
    assert [r["status"] for r in runs[1:]] in ([], ["interrupted"]), runs[1:]
    assert "Interrupted" in (out_dir / "sweep.md").read_text()
    print(f"stopped {stop_s:.1f} s after SIGINT; second point recorded: {len(runs) > 1}")
    assert stop_s < GRACE_S + STOP_MARGIN_S, f"the sweep took {stop_s:.1f} s to stop"


def test_torn_last_line_is_skipped_and_done_points_are_not_rerun(tmp_path, capsys):
    doc = {"base": {"model": "linear", "loader": "naive", "steps": 2, "warmup_steps": 1},
           "grid": {"batch_size": [8]}, "sweep": {"repeats": 1}}
    out = tmp_path / "out"
    out.mkdir()
    sp = load_spec(doc)
    cfg = sp.config(points(sp)[0], str(out))
    done = res.new_run_record(cfg.to_dict(), "r1", "done", cfg.key())
    done["status"] = "ok"
    done["experiment"] = {"id": sp.sweep_id, "kind": "sweep", "point": {"batch_size": 8},
                          "repeat": 0}  # this sweep's own point, finished before it stopped
    path = out / "results.jsonl"
    res.append_jsonl(path, done)
    with path.open("a") as fh:
        fh.write(json.dumps({"kind": "run", "status": "ok"})[:20])  # a writer killed mid-line
    recs = run_sweep(doc, out, progress=False, repeats=1, tables=write_tables)
    assert not (out / "points").exists()  # no point process was started
    assert [r.run_id for r in recs] == ["r1"]
    assert "torn or corrupt line" in capsys.readouterr().err
    lines = res.read_jsonl(path, warn=False)
    assert [r["kind"] for r in lines] == ["run", "sweep"]  # the torn line stays torn, alone
    assert lines[-1]["points_run"] == 0
    assert (out / "sweep.md").exists()


@pytest.mark.slow
def test_sigkill_of_the_sweep_ends_its_training_point_recorded(tmp_path, out_dir):
    """`kill -9` of a sweep while its point trains. Bug caught: the point, forked from the
    points' server, trained on for as long as its steps asked (32 minutes at 118% CPU before
    it was found): the server lives while any point it forked lives (each holds its alive
    pipe), so the point's parent-death signal never came. Each forked point now ends with
    the sweep that asked for it: SIGTERM, the steps so far recorded, nothing left."""
    sweep, _, results = _sweep_training_its_second_point(tmp_path, out_dir)
    try:
        family = psutil.Process(sweep.pid).children(recursive=True)
        assert family
        sweep.send_signal(signal.SIGKILL)
        sweep.wait(timeout=30)
    finally:
        if sweep.poll() is None:
            sweep.kill()
    _, alive = psutil.wait_procs(family, timeout=STOP_MARGIN_S + GRACE_S)
    assert not _alive(alive), f"left behind: {[p.cmdline() for p in _alive(alive)]}"
    runs = [r for r in res.read_jsonl(results) if r["kind"] == "run"]
    assert [r["status"] for r in runs] == ["ok", "interrupted"], runs
    assert runs[1]["metrics"]["steps_timed"] > 0  # the steps it timed, kept


def test_sigterm_stops_the_demo_as_ctrl_c_does(tmp_path, monkeypatch, capsys):
    """Bug: `kill` (SIGTERM) of the demo ended it at once without a word: no runs named, no
    resume command (sweep and scale already took SIGTERM as Ctrl+C)."""
    import argparse
    import os

    from scaleprobe.commands import demo

    def terminated(*a, **k):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends
        raise AssertionError("SIGTERM did not stop the demo")

    def unhandled(signum, frame):  # what stands in for "the process ends without a word"
        raise AssertionError("the demo left SIGTERM to end the process")

    monkeypatch.setattr("scaleprobe.experiments.run_sweep", terminated)
    prev = signal.signal(signal.SIGTERM, unhandled)
    try:
        code = demo.run(argparse.Namespace(out=str(tmp_path / "d"), quick=True, repeats=None))
    finally:
        signal.signal(signal.SIGTERM, prev)
    err = capsys.readouterr().err
    assert code == 130
    assert f"Kept 0 finished runs in {tmp_path / 'd'}" in err
    assert f"Running `scaleprobe demo --quick --out {tmp_path / 'd'}` again resumes" in err



def test_ctrl_c_in_colocate_says_what_was_kept_and_that_it_measures_anew(tmp_path, monkeypatch,
                                                                         capsys):
    """Bug: Ctrl+C in `colocate` printed a bare "scaleprobe: interrupted": nothing on the
    runs kept, nor that running it again measures every phase anew (colocate compares runs
    alone and together only within one sitting, so it does not resume)."""
    from pathlib import Path

    from scaleprobe import cli
    from scaleprobe.commands import colocate
    from scaleprobe.config import runconfig as C
    from scaleprobe.core import results as res

    out = tmp_path / "c"
    spec = Path(__file__).parents[2] / "examples" / "colocate_three_mobilenets.toml"

    def interrupted(spec, out_dir, *a, **k):  # two of its runs ended, then Ctrl+C
        cfg = C.build({})
        for i, exp_id in enumerate(("three-mobilenet_v2", "three-mobilenet_v2", "other")):
            rec = res.new_run_record(cfg.to_dict(), f"r{i}", "job1", cfg.key())
            rec["status"] = "ok"
            rec["experiment"] = {"id": exp_id, "kind": "colocate",
                                 "point": {"job": "job1", "phase": "alone"}, "repeat": 0}
            res.append_jsonl(Path(out_dir) / "results.jsonl", rec)
        raise KeyboardInterrupt

    monkeypatch.setattr("scaleprobe.experiments.colocate.run_colocate", interrupted)
    out.mkdir()
    code = colocate.run(cli.build_parser().parse_args(["colocate", str(spec), "--out", str(out)]))
    err = capsys.readouterr().err
    assert code == 130
    assert f"Kept 2 finished runs in {out} (three-mobilenet_v2: 2)" in err, err
    assert "measures every phase anew" in err and "resumes" not in err, err
