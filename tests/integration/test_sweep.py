"""Real sweeps: every point in its own process; resume; a crashing point; out of memory."""

import shutil

import pytest

from scaleprobe.results import read_jsonl

from ..conftest import ROOT

pytestmark = pytest.mark.timeout(240)

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


def test_quickstart_example_runs_fully_then_resumes_without_running(cli, tmp_path, out_dir):
    spec = tmp_path / "quick.toml"
    shutil.copy(ROOT / "examples" / "sweep_quickstart.toml", spec)
    p = cli("sweep", spec, "--out", out_dir, "--repeats", 1)
    assert p.returncode == 0, p.stderr[-2000:]
    runs = _runs(out_dir)
    assert [r["status"] for r in runs] == ["ok", "ok"]
    assert [r["experiment"]["point"] for r in runs] == [{"batch_size": 16}, {"batch_size": 64}]
    assert all(r["experiment"]["kind"] == "sweep" for r in runs)
    assert all(r["config"]["measure"]["progress"] is False for r in runs)
    md = (out_dir / "sweep.md").read_text()
    assert "| Batch size | Devices | Peak memory | Growth | Epoch time | Growth |" in md
    assert "Fastest: batch" in md and "Most efficient: batch" in md and md in p.stdout
    assert (out_dir / "sweep.csv").read_text().startswith("group,batch_size,devices,status")
    dirs = {d.name for d in out_dir.iterdir() if d.is_dir()}

    again = cli("sweep", spec, "--out", out_dir, "--repeats", 1)  # resume: every point is done
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stderr.count("done before, not rerun") == 2, again.stderr[-2000:]
    assert len(_runs(out_dir)) == 2
    assert {d.name for d in out_dir.iterdir() if d.is_dir()} == dirs
    assert "Fastest: batch" in again.stdout


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
    spec = tmp_path / "oom.toml"
    spec.write_text('[base]\nmodel = "resnet18"\ndataset = "synthetic"\nimage_size = 64\n'
                    'num_samples = 1400\nloader = "naive"\nsteps = 1\nwarmup_steps = 1\n'
                    '[grid]\nbatch_size = [8, 512, 1024]\n')
    p = cli("sweep", spec, "--out", out_dir, "--memory-limit", "2GiB", "--no-progress",
            "--repeats", 1)
    assert p.returncode == 0, p.stderr[-2000:]
    small, big = _runs(out_dir)
    assert small["status"] == "ok" and small["config"]["measure"]["memory_limit"] == "2GiB"
    assert big["status"] == "oom" and "allocate" in big["error"].lower()
    sweep = [r for r in read_jsonl(out_dir / "results.jsonl") if r["kind"] == "sweep"][0]
    assert sweep["skipped"][0]["point"] == {"batch_size": 1024}
    md = (out_dir / "sweep.md").read_text()
    assert md.count("out of memory") == 2  # 512 ran out, 1024 was not tried
