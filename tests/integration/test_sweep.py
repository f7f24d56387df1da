"""Real sweeps: every point in its own process; resume; a crashing point; out of memory."""

import shutil

import pytest

from scaleprobe.core.results import read_jsonl
from scaleprobe.run.failure import is_oom
from tests.conftest import run_cli

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

CRASH_MODEL = """
import os, signal, torch
class M(torch.nn.Module):
    def __init__(self):
        super().__init__(); self.l = torch.nn.Linear(64, 10)
    def forward(self, x):
        os.kill(os.getpid(), signal.SIGKILL)   # dies without a word, as a segfault would
def build():
    return M()
"""


def _runs(out):
    return [r for r in read_jsonl(out / "results.jsonl") if r["kind"] == "run"]


def test_quickstart_example_runs_fully_then_resumes_without_running(cli, tmp_path,
                                                                    quickstart_sweep):
    spec, first, p = quickstart_sweep
    assert p.returncode == 0, p.stderr[-2000:]
    out_dir = tmp_path / "out"
    shutil.copytree(first, out_dir)  # the resume below writes; the session's copy stays
    runs = _runs(out_dir)
    assert [r["status"] for r in runs] == ["ok"] * 4
    # every point once per repeat, the repeats one after the other
    assert [(r["experiment"]["repeat"], r["experiment"]["point"]) for r in runs] == [
        (k, {"batch_size": b}) for k in (0, 1) for b in (16, 64)]
    assert all(r["experiment"]["kind"] == "sweep" for r in runs)
    assert all(r["config"]["measure"]["progress"] is False for r in runs)
    md = (out_dir / "sweep.md").read_text()
    assert "| Batch size | Devices | Peak memory | Growth | Epoch time | Growth |" in md
    # the verdicts themselves (decided or inconclusive) are report/tables/batch.py's, tested there
    assert "- Fastest: " in md and "- Most efficient: " in md and md in p.stdout
    assert (out_dir / "sweep.csv").read_text().startswith("group,batch_size,devices,status")
    dirs = {d.name for d in out_dir.iterdir() if d.is_dir()}

    again = cli("sweep", spec, "--out", out_dir, "--repeats", 2)  # resume: every point is done
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stderr.count("done before, not rerun") == 4, again.stderr[-2000:]
    assert len(_runs(out_dir)) == 4
    assert {d.name for d in out_dir.iterdir() if d.is_dir()} == dirs
    assert "- Fastest: " in again.stdout


def test_crashing_point_is_recorded_failed_and_the_sweep_goes_on(cli, tmp_path, out_dir):
    model = tmp_path / "crash.py"
    model.write_text(CRASH_MODEL)
    spec = tmp_path / "s.toml"
    spec.write_text(f'[base]\nloader = "naive"\nsteps = 2\nwarmup_steps = 1\nbatch_size = 16\n'
                    f'[grid]\nmodel = ["{model}:build", "linear"]\n')
    p = cli("sweep", spec, "--out", out_dir, "--no-progress", "--repeats", 1)
    assert p.returncode == 0, p.stderr[-2000:]
    crash, ok = _runs(out_dir)
    assert crash["status"] == "failed" and "killed by SIGKILL" in crash["error"]
    assert crash["experiment"]["point"] == {"model": f"{model}:build"}
    assert ok["status"] == "ok"  # the sweep went on
    assert "failed" in (out_dir / "sweep.md").read_text()


def test_memory_limit_makes_a_large_batch_oom_and_skips_larger(cli, tmp_path, out_dir):
    # resnet18 at 64 px peaks at ~1.8 GB of host memory at batch 512 (too near a 2 GiB limit
    # to fail every time) and ~3.3 GB at 1024: 1024 runs out, 2048 is never tried
    spec = tmp_path / "oom.toml"
    spec.write_text('[base]\nmodel = "resnet18"\ndataset = "synthetic"\nimage_size = 64\n'
                    'num_samples = 1400\nloader = "naive"\nsteps = 1\nwarmup_steps = 1\n'
                    '[grid]\nbatch_size = [8, 1024, 2048]\n')
    p = cli("sweep", spec, "--out", out_dir, "--memory-limit", "2GiB", "--no-progress",
            "--repeats", 1)
    assert p.returncode == 0, p.stderr[-2000:]
    runs = _runs(out_dir)
    assert len(runs) == 2, [(r["experiment"]["point"], r["status"], r["error"]) for r in runs]
    small, big = runs
    assert small["status"] == "ok" and small["config"]["measure"]["memory_limit"] == "2GiB"
    # the allocator's words, or oneDNN's "could not create a primitive" when the failed
    # allocation was its workspace: both are out of memory only because a limit is in force
    assert big["status"] == "oom" and is_oom(big["error"], memory_limited=True)
    sweep = [r for r in read_jsonl(out_dir / "results.jsonl") if r["kind"] == "sweep"][0]
    assert sweep["skipped"][0]["point"] == {"batch_size": 2048}
    md = (out_dir / "sweep.md").read_text()
    assert md.count("out of memory") == 2  # 1024 ran out, 2048 was not tried


# 16 MiB of activations per sample: under a 2 GiB memory limit batch 32 (512 MiB) and 64
# (1 GiB) fit beside torch, batch 128 (2 GiB) cannot
HUNGRY_MODEL = """
import torch
class M(torch.nn.Module):
    def __init__(self):
        super().__init__(); self.l = torch.nn.Linear(3 * 8 * 8, 10)
    def forward(self, x):
        held = torch.ones(x.shape[0], 4 << 20)
        return self.l(x.flatten(1)) + 0 * held[:, :1]
def build():
    return M()
"""


def _sweep_record(out):
    return [r for r in read_jsonl(out / "results.jsonl") if r["kind"] == "sweep"][-1]


def test_auto_batch_search_resumes_without_running_a_probe_again(cli, tmp_path, out_dir):
    """A second `scaleprobe sweep` of a batch_size = "auto" spec into the same folder finds
    every probe done and starts no process. Bug caught: a resume that probes again (each
    probe is a whole run; searching a real model takes minutes), or one that loses the out-of-
    memory probe and searches past it."""
    model = tmp_path / "hungry.py"
    model.write_text(HUNGRY_MODEL)
    spec = tmp_path / "auto.toml"
    spec.write_text('[sweep]\nbatch_start = 32\nbatch_max = 512\nbatch_round = 32\n'
                    'max_probes = 3\nrepeats = 1\n'
                    f'[base]\nmodel = "{model}:build"\ndataset = "synthetic"\nimage_size = 8\n'
                    'num_samples = 512\nloader = "naive"\nsteps = 1\nwarmup_steps = 1\n'
                    '[grid]\nbatch_size = "auto"\n')
    argv = ("sweep", spec, "--out", out_dir, "--memory-limit", "2GiB", "--no-progress")
    p = cli(*argv)
    assert p.returncode == 0, p.stderr[-2000:]
    first = _sweep_record(out_dir)
    assert first["searches"][0]["probes"] == [[32, "ok"], [64, "ok"], [128, "oom"]]
    assert first["points_run"] == 3
    assert first["spec_path"] == str(spec.resolve())  # the report's rerun command names it
    runs = _runs(out_dir)

    again = cli(*argv)
    assert again.returncode == 0, again.stderr[-2000:]
    second = _sweep_record(out_dir)
    assert second["points_run"] == 0
    assert second["searches"][0]["probes"] == first["searches"][0]["probes"]
    assert second["searches"][0]["largest_fit"] == 64
    assert _runs(out_dir) == runs  # no new run record
    assert len(list((out_dir / "points").glob("*.log"))) == 3  # no new point process


def test_resume_reruns_failed_and_interrupted_points_only(tmp_path):
    """Of three points already in results.jsonl (ok, failed, interrupted), a resumed sweep
    runs exactly the failed and the interrupted ones again. Bug caught: a resume that reuses
    a failed or interrupted record as if it were measured, or reruns a finished point."""
    from scaleprobe.core import results as res
    from scaleprobe.experiments.spec import load_spec, points

    spec = tmp_path / "resume.toml"
    spec.write_text('[sweep]\nid = "resume"\nrepeats = 1\n[base]\nmodel = "linear"\n'
                    'loader = "naive"\nsteps = 2\nwarmup_steps = 1\n[grid]\n'
                    'batch_size = [8, 16, 24]\n')
    out = tmp_path / "out"
    out.mkdir()
    sp = load_spec(spec)
    before = {}
    for pt, status in zip(points(sp), ("ok", "failed", "interrupted"), strict=True):
        cfg = sp.config(pt, str(out))
        rec = res.new_run_record(cfg.to_dict(), f"old-{status}", status, cfg.key())
        rec["status"] = status
        rec["experiment"] = {"id": sp.sweep_id, "kind": "sweep", "point": dict(pt.axes),
                             "repeat": 0}  # this sweep's own runs, from before it stopped
        res.append_jsonl(out / "results.jsonl", rec)
        before[pt.axes["batch_size"]] = rec["run_id"]
    p = run_cli("sweep", spec, "--out", out, "--no-progress")  # its points fork from there
    assert p.returncode == 0, p.stderr[-2000:]
    pts = _sweep_record(out)["points"]
    assert [q["point"]["batch_size"] for q in pts] == [8, 16, 24]
    assert [q["status"] for q in pts] == ["ok", "ok", "ok"]
    assert pts[0]["run_id"] == before[8]
    assert pts[1]["run_id"] != before[16] and pts[2]["run_id"] != before[24]
    new = [r for r in _runs(out) if not r["run_id"].startswith("old-")]
    assert sorted(r["experiment"]["point"]["batch_size"] for r in new) == [16, 24]
    assert _sweep_record(out)["points_run"] == 2
