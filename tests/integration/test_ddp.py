"""DDP with gloo, 2 processes on this host, started through PyTorch's elastic launcher."""

import json

import psutil
import pytest

from scaleprobe.results import read_jsonl

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]


def _result(out_dir):
    recs = read_jsonl(out_dir / "results.jsonl")
    assert len(recs) == 1
    return recs[0]


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    from tests.conftest import run_cli

    out = tmp_path_factory.mktemp("ddp")
    p = run_cli("run", "--strategy", "ddp", "--nproc", 2, "--epochs", 2, "--batch-size", 32,
                "--loader", "naive", "--eval", "--out", out, "--no-progress")
    return p, out


def test_ddp_run_records_every_rank(ddp_run):
    p, out = ddp_run
    assert p.returncode == 0, p.stderr[-2000:]
    rec = _result(out)
    assert rec["status"] == "ok"
    assert [r["rank"] for r in rec["ranks"]] == [0, 1]
    assert rec["batch"] == {"per_device": 32, "per_process": 32, "global": 64, "world_size": 2,
                            "training_ranks": 2}
    assert rec["env"]["world_size"] == 2
    # the threads a training rank used (cores / 2), not the launching process's
    assert rec["env"]["threads"] == max(1, len(psutil.Process().cpu_affinity()) // 2)
    steps = rec["ranks"][0]["steps_done"]
    assert steps == 2 * ((1438 // 2) // 32)
    assert all(r["steps_done"] == steps for r in rec["ranks"])
    # every step of both ranks ends in the same all-reduce, so in lockstep their median steps
    # agree: measured slowest/median 1.015 and 1.02 under load (2026-11-24). Bug caught: a
    # rank's steps timed over other steps (its warm-up, its calibration) than the other's.
    meds = {r["rank"]: r["step_time_s"]["median"] for r in rec["ranks"]}
    assert rec["straggler"]["slowest_rank"] == max(meds, key=meds.get)
    assert rec["straggler"]["slowest_vs_median"] < 1.1, rec["straggler"]["line"]
    assert "straggler" in p.stdout


def test_ddp_exposed_communication_is_measured(ddp_run):
    rec = _result(ddp_run[1])
    comm = rec["comm"]
    assert comm["sync_step_s"] > 0 and comm["no_sync_step_s"] > 0
    assert comm["exposed_s"] == pytest.approx(max(0, comm["sync_step_s"] - comm["no_sync_step_s"]))
    assert rec["metrics"]["breakdown_s"]["comm"] == pytest.approx(comm["exposed_s"], rel=1e-6) or \
        rec["metrics"]["breakdown_s"]["backward"] == 0
    assert 0 <= rec["metrics"]["comm_fraction"] < 1


def test_ddp_shard_audit_passes_and_accuracy_holds(ddp_run):
    rec = _result(ddp_run[1])
    a = rec["audit"]
    assert a["ok"] is True and a["duplicate_samples"] == 0 and a["missing_samples"] == 0
    assert a["same_order_across_epochs"] is False
    assert rec["metrics"]["accuracy"] >= 0.85


@pytest.mark.parametrize("fault,field", [("same_batch", "duplicate_samples"),
                                         ("no_set_epoch", "same_order_across_epochs")])
def test_shard_audit_catches_broken_samplers(cli, out_dir, fault, field):
    p = cli("run", "--strategy", "ddp", "--nproc", 2, "--epochs", 2, "--batch-size", 64,
            "--model", "linear", "--loader", "naive", "--warmup-steps", 1,
            "--set", f"dist.sampler={fault}", "--out", out_dir, "--no-progress")
    assert p.returncode == 0, p.stderr[-2000:]
    rec = _result(out_dir)
    a = rec["audit"]
    assert a["ok"] is False and a[field]
    assert "shard audit: FAILED" in p.stdout


def test_global_batch_splits_and_linear_lr_scaling(cli, out_dir):
    p = cli("run", "--strategy", "ddp", "--nproc", 2, "--global-batch", 64, "--steps", 3,
            "--warmup-steps", 1, "--model", "linear", "--loader", "naive", "--lr", 0.1,
            "--lr-scaling", "linear", "--out", out_dir, "--no-progress")
    assert p.returncode == 0, p.stderr[-2000:]
    rec = _result(out_dir)
    assert rec["batch"]["per_device"] == 32 and rec["batch"]["global"] == 64
    assert rec["metrics"]["lr_effective"] == 0.1  # strong scaling: the global batch is unchanged


def test_no_process_left_behind(ddp_run):
    me = psutil.Process()
    assert not [c for c in me.children(recursive=True) if "scaleprobe" in " ".join(c.cmdline())]


def test_worker_entry_under_torchrun(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        "--nproc-per-node", "2", "-m", "scaleprobe", "worker", "--steps", "3",
                        "--warmup-steps", "1", "--model", "linear", "--loader", "naive",
                        "--out", str(out), "--no-progress"],
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-2000:]
    rec = _result(out)
    assert rec["config"]["dist"]["strategy"] == "ddp" and rec["batch"]["world_size"] == 2
    assert json.loads((out / rec["run_id"] / "result.json").read_text())["status"] == "ok"


def test_accuracy_parity_one_vs_two_processes(cli, out_dir):
    p = cli("run", "--strategy", "ddp", "--nproc", 2, "--parity", "--epochs", 3,
            "--batch-size", 32, "--loader", "naive", "--out", out_dir, "--no-progress")
    assert p.returncode == 0, p.stderr[-2000:] + p.stdout[-2000:]
    recs = read_jsonl(out_dir / "results.jsonl")
    par = [r for r in recs if r["kind"] == "parity"][0]
    runs = [r for r in recs if r["kind"] == "run"]
    assert {r["batch"]["global"] for r in runs} == {64}
    assert {r["batch"]["world_size"] for r in runs} == {1, 2}
    assert par["samples_seen"][0] == par["samples_seen"][1]
    assert par["accuracy_1"] >= 0.9 and par["accuracy_n"] >= 0.9
    assert abs(par["difference"]) <= 0.03 and par["within_tolerance"] is True
    assert "parity holds" in p.stdout
