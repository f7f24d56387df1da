"""How sweep points start: forked from a server that imported torch and the engine once
(the default on a machine without a GPU), or as fresh interpreters (SCALEPROBE_POINT_START
=exec); both record how they started, and the server ends with the sweep."""

from __future__ import annotations

import os
import time

import psutil
import pytest

from scaleprobe.core import results as res
from scaleprobe.core.errors import ConfigError
from scaleprobe.experiments import procs
from scaleprobe.experiments.point import PointPayload
from scaleprobe.experiments.sweep import run_sweep

DOC = {"base": {"model": "linear", "loader": "naive", "steps": 2, "warmup_steps": 1},
       "grid": {"batch_size": [8, 16]}, "sweep": {"repeats": 1}}


def _servers() -> list[psutil.Process]:
    out = []
    for c in psutil.Process().children(recursive=True):
        try:
            if ("multiprocessing.forkserver" in " ".join(c.cmdline())
                    or c.name() == procs.SERVER_NAME) and c.is_running() \
                    and c.status() != psutil.STATUS_ZOMBIE:
                out.append(c)
        except psutil.Error:
            pass
    return out


def test_the_start_is_chosen_by_the_environment(monkeypatch):
    monkeypatch.setenv(procs.START_ENV, "exec")
    assert not procs.fork_points()
    monkeypatch.setenv(procs.START_ENV, "Fork")
    assert procs.fork_points()
    monkeypatch.setenv(procs.START_ENV, "vfork")
    with pytest.raises(ConfigError, match="SCALEPROBE_POINT_START='vfork': expected fork or exec"):
        procs.fork_points()


def _sweep(monkeypatch, out, how, sizes) -> dict[int, dict]:
    monkeypatch.setenv(procs.START_ENV, how)
    # the server a fresh `scaleprobe sweep` starts: a fresh interpreter (a scaleprobe command
    # that imported what it preloads and runs no thread forks it: test_a_server_forked_from...)
    monkeypatch.setattr(procs, "_can_fork_server", lambda: False)
    t0 = time.monotonic()
    doc = {**DOC, "grid": {"batch_size": list(sizes)}}
    recs = [r.to_dict() for r in run_sweep(doc, out, progress=False, repeats=1)]
    print(f"{how}: {len(sizes)} points in {time.monotonic() - t0:.1f} s")
    runs = [r for r in recs if r["kind"] == "run"]
    assert [r["status"] for r in runs] == ["ok"] * len(sizes)
    assert {r["experiment"]["start"] for r in runs} == {how}
    on_disk = [r for r in res.read_jsonl(out / "results.jsonl") if r["kind"] == "run"]
    assert {r["experiment"]["start"] for r in on_disk} == {how}
    # the point's own output went to its log, as with a fresh interpreter
    logs = sorted((out / "points").glob("*.log"))
    assert len(logs) == len(sizes) and all("point {'batch_size'" in p.read_text() for p in logs)
    assert not _servers(), "the forkserver outlived the sweep"
    return {r["experiment"]["point"]["batch_size"]: r["metrics"]["peak_mem_bytes"] for r in runs}


def test_forked_and_fresh_points_record_their_start_and_agree_on_net_memory(monkeypatch,
                                                                            tmp_path):
    """The same sweep with each start: both record how they started, leave no server, and
    measure the same net host memory. Bug caught: the net figure counted the library code a
    run first touched, about 40 MiB in a fresh interpreter and 70-100 MiB in a forked one
    (measured 2026-11-25), so the batch table's memory growth depended on the start. One
    batch size: a fresh point costs a fresh interpreter's imports."""
    fresh = _sweep(monkeypatch, tmp_path / "exec", "exec", (16,))
    forked = _sweep(monkeypatch, tmp_path / "fork", "fork", (16,))
    f, x = forked[16], fresh[16]
    assert f["host"] < x["host"]  # a forked point's total counts only what it touched
    assert f["host_file_growth"] > x["host_file_growth"] > 0
    assert abs(f["host_net"] - x["host_net"]) < 16 * 2**20, (f, x)


def test_a_forked_point_killed_by_a_signal_reads_as_killed(monkeypatch, tmp_path):
    """The forked point's exit status is read as a process's would be: SIGKILL is -9, and
    the record written for it names the signal."""
    monkeypatch.setenv(procs.START_ENV, "fork")
    from scaleprobe.experiments.spec import load_spec, points

    sp = load_spec({**DOC, "base": {**DOC["base"], "steps": 100_000}})
    cfg = sp.config(points(sp)[0], str(tmp_path / "out"))
    exp = procs.point_experiment("k", "sweep", {"batch_size": 8})
    ps = procs.ProcessSet()
    try:
        proc = ps.start(PointPayload(cfg, exp), tmp_path / "points", "k")
        time.sleep(1.0)  # setting up or training: forked, it needs no imports
        assert proc.popen.poll() is None
        psutil.Process(proc.pid).kill()
        rc = ps.wait(proc)
        assert rc == -9
        rec = procs.collect_record(proc, rc)
        assert rec.status == "failed" and "killed by SIGKILL" in (rec.error or "")
    finally:
        ps.stop_all()
        ps.close()
    assert not _servers()


WORKER_MODEL = """
import os, torch
class M(torch.nn.Module):
    def __init__(self):
        super().__init__(); self.l = torch.nn.Linear(3 * 8 * 8, 10); self.seen = False
    def forward(self, x):
        if not self.seen:  # the loader's workers are running by the first forward
            import psutil
            me = psutil.Process()
            kids = [p.name() for p in me.children()]
            with open(__file__ + ".kids", "w") as fh:
                fh.write(",".join(kids))
            self.seen = True
        return self.l(x.flatten(1))
def build():
    return M()
"""


def test_a_forked_points_loader_workers_are_its_own(monkeypatch, tmp_path):
    """A point forked from the server inherits "forkserver" as its default start method; its
    DataLoader would then have the server start the workers, outside the point's process tree:
    its CPU and memory figures would miss them and count them as load from outside the run.
    The point starts them itself, as a fresh interpreter would (fork on Linux)."""
    monkeypatch.setenv(procs.START_ENV, "fork")
    model = tmp_path / "m.py"
    model.write_text(WORKER_MODEL)
    doc = {"base": {"model": f"{model}:build", "dataset": "synthetic-loader", "image_size": 8,
                    "num_samples": 256, "loader": "pipelined", "workers": 2, "steps": 4,
                    "warmup_steps": 1},
           "grid": {"batch_size": [16]}, "sweep": {"repeats": 1}}
    (rec,) = [r.to_dict() for r in run_sweep(doc, tmp_path / "out", progress=False,
                                             repeats=1)]
    assert rec["status"] == "ok", rec.get("error")
    assert rec["experiment"]["start"] == "fork"
    kids = (tmp_path / "m.py.kids").read_text().split(",")
    assert kids.count("pt_data_worker") == 2, kids


def test_point_sets_inside_one_server_leave_it_to_the_block(monkeypatch):
    """A set's close ends the server unless a ``one_server`` block holds it (the demo's two
    sweeps pay torch's import once); the block's end, the outermost of nested ones, ends it,
    after an error too."""
    ended = []
    monkeypatch.setattr(procs, "stop_server", lambda: ended.append(1))
    procs.ProcessSet().close()
    assert len(ended) == 1
    with pytest.raises(KeyboardInterrupt), procs.one_server():
        with procs.one_server():
            procs.ProcessSet().close()
            procs.ProcessSet().close()
        assert len(ended) == 1  # the inner block's end leaves it to the outer one
        raise KeyboardInterrupt
    assert len(ended) == 2
    assert procs._held == 0


FORKED_SERVER = """
import json, sys, time
from multiprocessing import forkserver
import psutil
from scaleprobe import launch
from scaleprobe.experiments import procs
for m in procs._PRELOAD:
    __import__(m)
assert not procs._can_fork_server(), "a caller's own process runs a fresh server"
launch.fresh_launcher()  # as the command line's entry says: scaleprobe's own process
out = sys.argv[1]
assert procs._can_fork_server(), "nothing runs here but the main thread"
procs.start_server()
server = psutil.Process(forkserver._forkserver._forkserver_pid)
for _ in range(100):  # the server names itself as it starts
    if server.name() == procs.SERVER_NAME:
        break
    time.sleep(0.05)
seen = {"name": server.name(), "cmdline": server.cmdline() == psutil.Process().cmdline()}
from scaleprobe.experiments.sweep import run_sweep
recs = [r.to_dict() for r in run_sweep(json.loads(sys.argv[2]), out, progress=False)]
seen["status"] = [r["status"] for r in recs if r["kind"] == "run"]
seen["start"] = sorted({r["experiment"]["start"] for r in recs if r["kind"] == "run"})
seen["server_left"] = server.is_running() and server.status() != psutil.STATUS_ZOMBIE
print(json.dumps(seen))
"""


def test_a_server_forked_from_its_caller_runs_points_as_a_fresh_one_does(tmp_path):
    """A scaleprobe command that imported what the server preloads and runs no thread yet
    (the suite's CLI processes, forked from tests/cliserver.py) forks the server instead of
    starting an interpreter that imports torch again; a Python session's own process does
    not. Checked: the server is that fork, its points run, log and record as forked points,
    carry the caller's process name (not the server's), and the server ends with the sweep."""
    import json
    import subprocess
    import sys

    out = tmp_path / "out"
    model = tmp_path / "named.py"  # each point writes the name its process runs under
    model.write_text("import torch\ndef build():\n    with open(__file__ + '.names', 'a') as f:\n"
                     "        f.write(open('/proc/self/comm').read())\n"
                     "    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 10))\n")
    doc = json.dumps({**DOC, "base": {**DOC["base"], "model": f"{model}:build",
                                      "dataset": "synthetic", "image_size": 8},
                      "sweep": {"repeats": 1, "id": "f"}})
    p = subprocess.run([sys.executable, "-c", FORKED_SERVER, str(out), doc],
                       capture_output=True, text=True, timeout=240,
                       env={**os.environ, procs.START_ENV: "fork"})
    assert p.returncode == 0, p.stderr[-3000:]
    seen = json.loads(p.stdout.strip().splitlines()[-1])
    assert seen["name"] == procs.SERVER_NAME and seen["cmdline"], seen
    assert seen["status"] == ["ok", "ok"] and seen["start"] == ["fork"], seen
    assert not seen["server_left"], "the forked server outlived the sweep"
    logs = sorted((out / "points").glob("*.log"))
    assert len(logs) == 2 and all("point {'batch_size'" in f.read_text() for f in logs)
    # each point is named as its caller is (the interpreter's name), not as the server
    names = (tmp_path / "named.py.names").read_text().split()
    assert len(names) == 2 and procs.SERVER_NAME not in names, names
