"""The executor layer's parts that need no cluster: Slurm's variables to the elastic
launcher's settings, the options, and how a job the scheduler ended becomes a record."""

import argparse
import json

import pytest

from scaleprobe.core import results as res
from scaleprobe.core.errors import ConfigError
from scaleprobe.core.result_model import Experiment
from scaleprobe.experiments import executor as X


def test_each_task_of_a_two_node_job_gets_its_node_rank_and_the_first_node_as_rendezvous():
    """Bug caught: every node believing it is node 0 (two rendezvous hosts, a hang), or the
    rendezvous on the task's own host instead of the job's first."""
    env = {"SLURM_NODEID": "1", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "gpu[07-08]"}
    got = X.launcher_env(env, nodelist=["gpu07", "gpu08"])
    assert got == {"node_rank": "1", "nnodes": "2", "rdzv_endpoint": f"gpu07:{X.RDZV_PORT}"}
    got0 = X.launcher_env({**env, "SLURM_NODEID": "0"}, nodelist=["gpu07", "gpu08"])
    assert got0["node_rank"] == "0" and got0["rdzv_endpoint"] == got["rdzv_endpoint"]
    # older Slurm: SLURM_NNODES and SLURM_NODELIST; a plain comma list needs no scontrol
    old = X.launcher_env({"SLURM_NODEID": "0", "SLURM_NNODES": "2", "SLURM_NODELIST": "a,b"})
    assert old["rdzv_endpoint"].startswith("a:")


@pytest.mark.parametrize("env, words", [
    ({"SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "a,b"}, "SLURM_NODEID"),
    ({"SLURM_NODEID": "2", "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "a,b"},
     "do not agree"),
])
def test_outside_a_job_step_or_with_inconsistent_variables_it_says_so(env, words):
    with pytest.raises(ConfigError, match=words):
        X.launcher_env(env)


@pytest.mark.parametrize("text, minutes", [("90", 90), ("1:30:00", 90), ("2-00:00:00", 2880),
                                           ("30:00", 30), ("0:00:30", 1)])
def test_slurm_time_forms(text, minutes):
    assert X.parse_time(text) == minutes


@pytest.mark.parametrize("text", ["soon", "0", "1:2:3:4"])
def test_bad_time_is_a_one_line_error(text):
    with pytest.raises(ConfigError, match="--time"):
        X.parse_time(text)


def _args(**kw):
    base = dict(executor="local", partition=None, time=None, gpus_per_node=None,
                cpus_per_task=None, account=None, slurm_arg=None)
    return argparse.Namespace(**{**base, **kw})


def test_slurm_options_without_the_slurm_executor_are_refused():
    """Bug caught: `--partition gpu` silently ignored, the sweep running here instead."""
    with pytest.raises(ConfigError, match="--partition is a Slurm option: add --executor slurm"):
        X.from_args(_args(partition="gpu"))
    assert X.from_args(_args()) is X.LOCAL


def test_slurm_options_are_passed_through():
    ex = X.from_args(_args(executor="slurm", partition="gpu", time="1:00:00", gpus_per_node=4,
                           slurm_arg=["qos=high", "--constraint=a100"]))
    assert ex.kind == "slurm" and ex.slurm.partition == "gpu" and ex.slurm.time_min == 60
    assert ex.slurm.gpus_per_node == 4
    assert ex.slurm.extra == {"qos": "high", "constraint": "a100"}
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        X.from_args(_args(executor="slurm", slurm_arg=["qos"]))


class _Job:
    def __init__(self, job_id, folder):
        self.job_id = job_id
        self.paths = argparse.Namespace(result_pickle=folder / "none.pkl",
                                        stderr=folder / "err")


def _point(tmp_path, own_record=None):
    from scaleprobe.config.runconfig import build
    from scaleprobe.experiments.point import PointPayload

    cfg = build({"out": str(tmp_path / "out")})
    exp = {"id": "s", "kind": "sweep", "point": {"steps": 9}, "attempt": "a1"}
    own = tmp_path / "own.jsonl"
    if own_record is not None:
        res.append_jsonl(own, {**own_record, "experiment": exp})
    return X.SlurmPoint(_Job("42", tmp_path), "a1", tmp_path / "err", 0.0,
                        PointPayload(cfg, Experiment.from_dict(exp)), own)


@pytest.mark.parametrize("state, status", [("TIMEOUT", "interrupted"), ("NODE_FAIL", "failed"),
                                           ("PREEMPTED", "interrupted"), ("OUT_OF_MEMORY", "oom")])
def test_a_job_the_scheduler_ended_before_it_recorded_is_recorded_with_the_reason(
        tmp_path, state, status, monkeypatch):
    """Bug caught: a timed-out or node-failed job leaving no record (the point lost, or
    recorded ok from a stale line), or recorded without the scheduler's verdict and the
    nodes it ran on."""
    monkeypatch.setattr(X, "job_nodes", lambda job_id: ["gpu07"] if job_id == "42" else None)
    p = _point(tmp_path)
    p.ended = (state, "some reason")
    X.SlurmProcessSet._hand_over(None, p)  # type: ignore[arg-type]
    (rec,) = res.read_jsonl(tmp_path / "out" / "results.jsonl")
    assert rec["status"] == status
    assert rec["error"] == f"Slurm job 42 ended {state} (some reason)"
    assert rec["slurm"] == {"job_id": "42", "state": state, "nodes": ["gpu07"]}
    assert rec["experiment"]["attempt"] == "a1"


def test_the_jobs_own_record_is_handed_over_once_with_the_schedulers_verdict(tmp_path):
    """A job cancelled while training records itself interrupted (SIGTERM) in its own file;
    the submitter appends that record, with the scheduler's state, to results.jsonl."""
    p = _point(tmp_path, {"kind": "run", "run_id": "r1", "status": "interrupted",
                          "error": "interrupted by SIGTERM"})
    p.ended = ("CANCELLED", "None")
    X.SlurmProcessSet._hand_over(None, p)  # type: ignore[arg-type]
    lines = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    assert len(lines) == 1
    rec = json.loads(lines[0])
    assert rec["run_id"] == "r1" and rec["status"] == "interrupted"
    assert rec["error"] == "Slurm job 42 ended CANCELLED; interrupted by SIGTERM"


def _stopping_set(tmp_path, monkeypatch, points):
    """A SlurmProcessSet holding ``points`` as live jobs, scancel recorded instead of run."""
    cancelled = []
    monkeypatch.setattr(X.subprocess, "run", lambda argv, **kw: cancelled.append(argv))
    monkeypatch.setattr(X, "job_nodes", lambda job_id: ["n0"])
    ps = X.SlurmProcessSet.__new__(X.SlurmProcessSet)
    ps.live = {p.pid: p for p in points}
    return ps, cancelled


def test_ctrl_c_cancels_the_jobs_and_hands_over_the_record_they_leave(tmp_path, monkeypatch):
    """Ctrl+C in the submitter: every live job is scancel'ed and the record the job writes
    as it stops (SIGTERM: the steps so far) is waited for and handed over. Bugs caught: jobs
    left on the cluster, the point recorded from the scheduler alone although the job was
    about to leave its steps, a record handed over twice."""
    import threading

    p = _point(tmp_path)
    ps, cancelled = _stopping_set(tmp_path, monkeypatch, [p])
    own = {"kind": "run", "run_id": "r1", "status": "interrupted",
           "error": "interrupted by SIGTERM", "experiment": p.payload.experiment.to_dict(),
           "metrics": {"steps_timed": 17}}
    late = threading.Timer(1.0, res.append_jsonl, (p.results_file, own))
    late.start()
    ps.stop_all(grace_s=20)
    late.join()
    assert cancelled == [["scancel", "42"]] and ps.live == {}
    (rec,) = res.read_jsonl(tmp_path / "out" / "results.jsonl")
    assert rec["run_id"] == "r1" and rec["metrics"]["steps_timed"] == 17
    assert rec["error"] == ("Slurm job 42 ended CANCELLED (cancelled by scaleprobe (Ctrl+C in "
                            "the submitting process)); interrupted by SIGTERM")


def test_ctrl_c_records_a_job_that_leaves_nothing_within_the_grace(tmp_path, monkeypatch):
    """Bug caught: the submitter waiting forever for a job killed before it could write (or a
    point lost): after the grace the scheduler's record stands for it."""
    import time

    p = _point(tmp_path)
    ps, cancelled = _stopping_set(tmp_path, monkeypatch, [p])
    t0 = time.monotonic()
    ps.stop_all(grace_s=1.0)
    assert 1.0 <= time.monotonic() - t0 < 10
    (rec,) = res.read_jsonl(tmp_path / "out" / "results.jsonl")
    assert rec["status"] == "interrupted" and rec["slurm"]["state"] == "CANCELLED"
    assert rec["error"].startswith("Slurm job 42 ended CANCELLED (cancelled by scaleprobe")


def _scale_args(*argv):
    from scaleprobe.commands import scale as S

    p = argparse.ArgumentParser()
    p.add_argument("config", nargs="?")
    S.add_arguments(p)
    return S, p.parse_args([str(a) for a in argv])


def test_scale_over_nodes_is_a_grid_of_nodes_with_the_rendezvous_left_to_slurm():
    """Bugs caught: `--nnodes 1,2` taken as one count (or refused as not a number), the
    multi-node points given no rendezvous (their config invalid before anything runs), the
    1-node points sent to the placeholder host instead of their own 127.0.0.1."""
    S, args = _scale_args("--nproc", "1,2", "--nnodes", "2,1", "--executor", "slurm")
    spec, _out, _progress = S.build_spec(args)
    assert spec["grid"] == {"nproc": [1, 2], "nnodes": [1, 2]}
    assert spec["base"]["dist.rdzv_endpoint"] == X.FIRST_NODE
    from scaleprobe.experiments.spec import check_points, load_spec

    sp = load_spec(spec)
    worlds = sorted(sp.config(p).world_size for p in check_points(sp))
    assert worlds == [1, 2, 2, 4]


@pytest.mark.parametrize("argv, words", [
    (("--nnodes", "1,2"), "add --executor slurm"),
    (("--nnodes", "2", "--executor", "slurm", "--rdzv-endpoint", "h:1"),
     "--rdzv-endpoint is chosen per job"),
    (("--nnodes", "0,1", "--executor", "slurm"), "--nnodes takes positive node counts"),
])
def test_scale_over_nodes_refuses_what_cannot_run(argv, words):
    S, args = _scale_args(*argv)
    with pytest.raises(ConfigError, match=words):
        S.build_spec(args)


def test_a_one_node_point_of_a_node_grid_drops_the_placeholder(tmp_path, monkeypatch):
    """Inside the job: a 1-node point meets on 127.0.0.1, a node other than 0 writes its
    record aside (the point's record is node 0's)."""
    seen = []
    monkeypatch.setenv("SCALEPROBE_RESULTS_FILE", "")  # job_main sets it: restored after
    monkeypatch.setattr("scaleprobe.experiments.point.run_point",
                        lambda payload: seen.append(payload.config.dist) or 0)
    spec = tmp_path / "p.json"
    spec.write_text(json.dumps({"config": {"dist": {"nnodes": 1,
                                                    "rdzv_endpoint": X.FIRST_NODE}},
                                "experiment": {"attempt": "a1"}}))
    X.job_main(str(spec), str(tmp_path / "r.jsonl"))
    assert seen[-1].rdzv_endpoint is None
    monkeypatch.setattr(X, "expand_nodelist", lambda text: ["n0", "n1"])
    monkeypatch.setenv("SLURM_NODEID", "1")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "n[0-1]")
    spec.write_text(json.dumps({"config": {"out": str(tmp_path), "dist": {
        "nnodes": 2, "strategy": "ddp", "rdzv_endpoint": X.FIRST_NODE}},
        "experiment": {"attempt": "a1"}}))
    X.job_main(str(spec), str(tmp_path / "r.jsonl"))
    assert seen[-1].rdzv_endpoint == f"n0:{X.RDZV_PORT}" and seen[-1].node_rank == 1
    import os

    assert os.environ["SCALEPROBE_RESULTS_FILE"] == str(tmp_path / "r.jsonl") + ".node1"


def test_a_job_runs_with_the_points_own_variables(tmp_path, monkeypatch):
    """The sweep hands a point its progress file through the environment; a Slurm job used to
    drop it, so the bar and the Slurm tests could not see a job's steps."""
    import os

    from scaleprobe.measure.progress import PROGRESS_ENV

    seen = []
    monkeypatch.setenv("SCALEPROBE_RESULTS_FILE", "")
    monkeypatch.setenv(PROGRESS_ENV, "")  # restored after
    monkeypatch.setattr("scaleprobe.experiments.point.run_point",
                        lambda payload: seen.append(os.environ[PROGRESS_ENV]) or 0)
    spec = tmp_path / "p.json"
    spec.write_text(json.dumps({"config": {"dist": {"nnodes": 1}}, "experiment": {}}))
    X.job_main(str(spec), str(tmp_path / "r.jsonl"), {PROGRESS_ENV: str(tmp_path / "p.prog")})
    assert seen == [str(tmp_path / "p.prog")]
