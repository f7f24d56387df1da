"""Experiments through `--executor slurm` on a real (one-node) Slurm cluster: each point one
job, the records written by the submitting process, resume, and a job the scheduler ended."""

import subprocess
import time

import pytest

from scaleprobe.core import results as res

pytestmark = [pytest.mark.slow, pytest.mark.root, pytest.mark.timeout(600)]

SWEEP = """
[sweep]
id = "{id}"
repeats = 1
[base]
model = "linear"
loader = "naive"
warmup_steps = 1
[grid]
{grid}
"""


def _spec(tmp_path, sid, grid):
    f = tmp_path / f"{sid}.toml"
    f.write_text(SWEEP.format(id=sid, grid=grid))
    return f


def _hostname():
    import socket

    return socket.gethostname().split(".")[0]


def _records(out, kind="run"):
    return [r for r in res.read_jsonl(out / "results.jsonl") if r["kind"] == kind]


def test_a_sweep_runs_each_point_as_a_job_and_resumes_without_submitting(
        slurm_cluster, cli, tmp_path, out_dir):
    """Bugs caught: points run here instead of as jobs (no job ids), a job's record lost or
    written twice (jobs appending to results.jsonl themselves, or the submitter appending a
    record the job also wrote), a resume that submits finished points again."""
    spec = _spec(tmp_path, "two", "batch_size = [16, 32]\nsteps = [3]")
    p = cli("sweep", spec, "--out", out_dir, "--executor", "slurm", "--no-progress",
            "--time", "10", timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    runs = _records(out_dir)
    assert [r["status"] for r in runs] == ["ok", "ok"]
    jobs = [r["slurm"]["job_id"] for r in runs]
    assert len(set(jobs)) == 2 and all(r["slurm"]["state"] == "COMPLETED" for r in runs)
    assert sorted(r["experiment"]["point"]["batch_size"] for r in runs) == [16, 32]
    # each job wrote its record to its own file, never to the experiment's results.jsonl
    own = sorted((out_dir / "points").glob("*.jsonl"))
    assert len(own) == 2
    assert all(len(res.read_jsonl(f)) == 1 for f in own)
    ids = [r["run_id"] for r in runs]
    assert len(set(ids)) == 2  # one line per run

    again = cli("sweep", spec, "--out", out_dir, "--executor", "slurm", "--no-progress",
                timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert [r["run_id"] for r in _records(out_dir)] == ids
    assert _records(out_dir, "sweep")[-1]["points_run"] == 0
    assert len(list((out_dir / "points").glob("*.jsonl"))) == 2  # nothing submitted


def _running_job(out_dir, timeout_s=120):
    """The id of the sweep in OUT_DIR's job, once the cluster runs it, waited for (the
    submitter's folder per job, ``slurm/<id>``; not the first job squeue lists: the last
    test's job may still be ending)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        ids = [d.name for d in out_dir.glob("slurm/*") if d.name.isdigit()]
        if ids:
            q = subprocess.run(["squeue", "-h", "-t", "RUNNING", "-j", ids[0], "-o", "%i"],
                               capture_output=True, text=True)
            if q.stdout.split():
                return ids[0]
        time.sleep(0.5)
    return None


def _a_step_timed(out_dir, timeout_s=180):
    """Whether a point of the sweep in OUT_DIR has timed a step (its progress file, "N of M
    steps timed", written by the job), waited for."""
    import re

    deadline = time.time() + timeout_s
    while time.time() < deadline:
        for f in out_dir.glob("points/*.progress"):
            m = re.match(r"(\d+) of \d+ steps timed", f.read_text(errors="replace"))
            if m and int(m.group(1)) >= 1:
                return True
        time.sleep(0.2)
    return False


@pytest.fixture(scope="module")
def stopped_points(slurm_cluster, tmp_path_factory):
    """Two one-point sweeps of a long run, each point a Slurm job, side by side: once each
    job has timed a step, one job is `scancel`ed (what a pre-emption or an admin does) and
    the other's sweep gets Ctrl+C. ``{"cancel" | "ctrlc": (its output folder, its job id,
    the sweep's exit code, its stderr)}``."""
    import signal

    from tests.conftest import start_cli

    started = {}
    for sid in ("cancel", "ctrlc"):
        d = tmp_path_factory.mktemp(sid)
        spec = _spec(d, sid, "steps = [1000000]")
        proc, _, err_f = start_cli(d, "sweep", spec, "--out", d / "out", "--executor", "slurm",
                                   "--no-progress")
        started[sid] = (d / "out", proc, err_f)
    try:
        jobs = {}
        for sid, (out, _, _) in started.items():
            jobs[sid] = _running_job(out)
            assert jobs[sid] is not None, f"{sid}: the point never ran as a job"
            # stopped before its first timed step, a run has no steps to keep (a fixed 10 s
            # was not always enough under load)
            assert _a_step_timed(out), f"{sid}: the point's job never timed a step"
        subprocess.run(["scancel", jobs["cancel"]], check=True)
        started["ctrlc"][1].send_signal(signal.SIGINT)
        return {sid: (out, jobs[sid], proc.wait(timeout=120), err_f.read_text())
                for sid, (out, proc, err_f) in started.items()}
    finally:
        for _, proc, _ in started.values():
            if proc.poll() is None:
                proc.kill()


def test_a_cancelled_job_is_an_interrupted_point_with_the_schedulers_reason(stopped_points):
    """`scancel` of a running point (what a pre-emption or an admin does). Bugs caught: the
    sweep waiting forever for a job that will never return (submitit asks sacct, which a
    cluster without accounting refuses), the point recorded ok or failed, the scheduler's
    verdict missing from its error, the steps timed before the cancel lost."""
    out_dir, job, _, _ = stopped_points["cancel"]
    (run,) = _records(out_dir)
    assert run["status"] == "interrupted", run.get("error")
    assert run["error"].startswith(f"Slurm job {job} ended CANCELLED"), run["error"]
    assert run["slurm"] == {"job_id": job, "state": "CANCELLED", "nodes": [_hostname()]}
    assert run["metrics"]["steps_timed"] > 0  # the job stopped as on SIGTERM, steps kept


def test_ctrl_c_in_the_submitter_cancels_its_jobs_and_keeps_their_steps(stopped_points):
    """Ctrl+C in `scaleprobe sweep --executor slurm` while a point trains as a job. Bugs
    caught: the job left running on the cluster after the sweep is gone (it would hold its
    nodes until its time limit), the sweep not ending 130, the point not recorded (or
    recorded ok, or without the steps the job timed before it was cancelled), the reason not
    saying who cancelled it."""
    out_dir, job, rc, err = stopped_points["ctrlc"]
    assert rc == 130, err[-2000:]
    deadline = time.time() + 60  # scancel'ed: the job leaves the queue
    while time.time() < deadline:
        q = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True,
                           text=True)
        if not q.stdout.strip():
            break
        time.sleep(1)
    assert not q.stdout.strip(), f"job {job} still {q.stdout.strip()} after the sweep ended"
    (run,) = _records(out_dir)
    assert run["status"] == "interrupted", run.get("error")
    assert run["error"].startswith(f"Slurm job {job} ended CANCELLED (cancelled by scaleprobe "
                                   "(Ctrl+C in the submitting process))"), run["error"]
    assert run["slurm"]["job_id"] == job and run["slurm"]["state"] == "CANCELLED"
    assert run["metrics"]["steps_timed"] > 0  # the job's own record, handed over


def test_a_job_slurm_refuses_is_a_one_line_error(slurm_cluster, cli, tmp_path, out_dir):
    """GPUs asked of a cluster without any. Bug caught: submitit's traceback instead of the
    scheduler's reason in one line (exit 2), or a point recorded as if it had run."""
    spec = _spec(tmp_path, "gpu", "steps = [2]")
    p = cli("sweep", spec, "--out", out_dir, "--executor", "slurm", "--gpus-per-node", 1,
            "--no-progress", timeout=120)
    assert p.returncode == 2, p.stderr[-2000:]
    assert "scaleprobe: error: Slurm refused the job: sbatch: error:" in p.stderr
    assert "Traceback" not in p.stderr
    assert not (out_dir / "results.jsonl").exists() or not _records(out_dir)


def test_scale_across_two_nodes_crosses_the_network(slurm_two_nodes, out_dir):
    """`scale --nnodes 1,2 --nproc 2 --executor slurm` on two Slurm nodes in network
    namespaces: 2 processes on one node against 2 on each of two. Bugs caught: a multi-node
    point that is not one job over both nodes (one world of 4 ranks on two hosts), ranks that
    cannot meet (the rendezvous not on the job's first node, a name that does not resolve
    there), a node that starts one rank instead of --nproc, node 1 writing a second record
    of the point, and a table that does not tell 4 processes on 2 nodes from 2 on one."""
    import sys

    p = slurm_two_nodes([sys.executable, "-m", "scaleprobe", "scale", "--nproc", "2",
                         "--nnodes", "1,2", "--model", "linear", "--loader", "naive",
                         "--steps", 5, "--warmup-steps", 1, "--repeats", 1,
                         "--executor", "slurm", "--out", out_dir, "--no-progress"], 500)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    runs = _records(out_dir)
    first = {r["experiment"]["point"]["nnodes"]: r for r in reversed(runs)}
    assert set(first) == {1, 2} and all(r["status"] == "ok" for r in runs)
    two = first[2]
    assert first[1]["batch"]["world_size"] == 2 and first[1]["slurm"]["nodes"] == ["sp-node0"]
    assert two["batch"]["world_size"] == 4 and two["env"]["nnodes"] == 2
    assert len(two["ranks"]) == 4 and two["audit"]["ok"], two["audit"]
    assert two["config"]["dist"]["rdzv_endpoint"] == "sp-node0:29400"
    assert first[1]["config"]["dist"]["rdzv_endpoint"] is None
    assert two["slurm"]["nodes"] == ["sp-node0", "sp-node1"]
    assert len(runs) == len({r["run_id"] for r in runs})  # one record per run, node 0's
    assert "| 2 |" in p.stdout and "| 4 (2 nodes x 2) |" in p.stdout, p.stdout


def test_comm_across_two_nodes_as_one_job_feeds_predict(slurm_two_nodes, out_dir):
    """`comm --nnodes 2 --executor slurm`, then `predict --nnodes 2 --link results.jsonl`.
    Bugs caught: the benchmark run on the login node instead of across the job's nodes, the
    record written by a job instead of the submitter, or lost; predict taking the link from a
    measurement within one host."""
    import sys

    p = slurm_two_nodes([sys.executable, "-m", "scaleprobe", "comm", "--nproc", 1, "--nnodes",
                         2, "--ops", "all_reduce", "--sizes", "1K,1M,8M", "--iters", 3,
                         "--executor", "slurm", "--out", out_dir], 300)
    assert p.returncode == 0, p.stderr[-3000:]
    (rec,) = [r for r in res.read_jsonl(out_dir / "results.jsonl") if r["kind"] == "comm"]
    assert rec["world_size"] == 2 and rec["nnodes"] == 2
    assert rec["slurm"]["nodes"] == ["sp-node0", "sp-node1"]
    assert rec["fit"]["all_reduce"]["beta_s_per_byte"] > 0
    pred = slurm_two_nodes([sys.executable, "-m", "scaleprobe", "predict", "--params", 1e6,
                            "--nproc", 1, "--nnodes", 2, "--compute-time", 0.1, "--link",
                            out_dir / "results.jsonl"], 120)
    assert pred.returncode == 0, pred.stderr[-2000:]
    assert "measured (gloo, 2 ranks on 2 nodes)" in " ".join(pred.stdout.split())


def test_scale_over_a_users_script_as_jobs(slurm_cluster, cli, out_dir):
    """`scale --executor slurm -- SCRIPT.py`: the user's script at 1 and 2 processes, each
    point one job running it under wrap (the 1-vs-2-process scale on the cluster; the
    built-in loop's scale runs as jobs in test_scale_across_two_nodes_crosses_the_network).
    Bugs caught: the script's points run here (no job ids), a multi-process point that cannot
    start its ranks inside a job (too few CPUs asked for, the launcher's rendezvous
    unreachable), the script's arguments lost on the way into the job, a 2-process point
    without its ranks' shard audit, a scale table without the 2-process row."""
    from tests.conftest import ROOT

    p = cli("scale", "--nproc", "1,2", "--repeats", 1, "--steps", 5, "--warmup-steps", 2,
            "--executor", "slurm", "--out", out_dir, "--no-progress", "--",
            ROOT / "examples" / "scripts" / "train_ddp.py", "--epochs", 1, "--samples", 512,
            timeout=400)
    assert p.returncode == 0, p.stderr[-3000:]
    runs = _records(out_dir)
    assert {r["experiment"]["point"]["nproc"] for r in runs} == {1, 2}
    assert all(r["status"] == "ok" and r["slurm"]["state"] == "COMPLETED" for r in runs)
    assert all(r["script"]["target"][1:] == ["--epochs", "1", "--samples", "512"]
               for r in runs)
    assert all(r["audit"]["ok"] for r in runs if r["batch"]["world_size"] == 2)
    # (an implausible speedup measures both counts once more: more runs, the same two counts)
    assert {r["batch"]["world_size"] for r in runs} == {1, 2}
    assert "| 2 |" in p.stdout
