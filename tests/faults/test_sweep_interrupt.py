"""Ctrl+C stops a sweep within seconds, leaves no process behind, keeps finished points;
a torn last line in results.jsonl is skipped with a warning, never lost or fatal."""

import json
import signal
import subprocess
import sys
import time

import psutil
import pytest

from scaleprobe import results as res
from scaleprobe.experiments.spec import load_spec, points
from scaleprobe.experiments.sweep import run_sweep

pytestmark = pytest.mark.timeout(180)

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


def _wait_for(cond, timeout_s):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.2)
    return False


def test_sigint_stops_the_sweep_and_every_child(tmp_path, out_dir):
    spec = tmp_path / "s.toml"
    spec.write_text(SPEC)
    sweep = subprocess.Popen([sys.executable, "-m", "scaleprobe", "sweep", str(spec), "--out",
                              str(out_dir), "--no-progress", "--repeats", "1"],
                             stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    results = out_dir / "results.jsonl"
    try:
        assert _wait_for(lambda: len(res.read_jsonl(results, warn=False)) == 1, 120)
        assert _wait_for(lambda: len(psutil.Process(sweep.pid).children()) == 1, 30)
        time.sleep(3)  # the second point is importing or training
        family = psutil.Process(sweep.pid).children(recursive=True)
        t0 = time.time()
        sweep.send_signal(signal.SIGINT)
        _, err = sweep.communicate(timeout=30)
    finally:
        if sweep.poll() is None:
            sweep.kill()
    assert time.time() - t0 < 8, "the sweep took too long to stop"
    assert sweep.returncode == 130, err[-2000:]
    _, alive = psutil.wait_procs(family, timeout=3)
    assert not _alive(alive), f"left behind: {[p.cmdline() for p in _alive(alive)]}"
    runs = [r for r in res.read_jsonl(results) if r["kind"] == "run"]
    assert runs[0]["status"] == "ok" and runs[0]["experiment"]["point"] == {"steps": 2}
    assert all(r["status"] == "interrupted" for r in runs[1:])
    assert "Interrupted" in (out_dir / "sweep.md").read_text()


def test_torn_last_line_is_skipped_and_done_points_are_not_rerun(tmp_path, capsys):
    doc = {"base": {"model": "linear", "loader": "naive", "steps": 2, "warmup_steps": 1},
           "grid": {"batch_size": [8]}}
    out = tmp_path / "out"
    out.mkdir()
    sp = load_spec(doc)
    cfg = sp.config(points(sp)[0], str(out))
    done = res.new_run_record(cfg.to_dict(), "r1", "done", cfg.key())
    done["status"] = "ok"
    path = out / "results.jsonl"
    res.append_jsonl(path, done)
    with path.open("a") as fh:
        fh.write(json.dumps({"kind": "run", "status": "ok"})[:20])  # a writer killed mid-line
    t0 = time.time()
    recs = run_sweep(doc, out, progress=False, repeats=1)
    assert time.time() - t0 < 20  # no point process: nothing to import torch for
    assert [r["run_id"] for r in recs] == ["r1"]
    assert "torn or corrupt line" in capsys.readouterr().err
    lines = res.read_jsonl(path, warn=False)
    assert [r["kind"] for r in lines] == ["run", "sweep"]  # the torn line stays torn, alone
    assert (out / "sweep.md").exists()
