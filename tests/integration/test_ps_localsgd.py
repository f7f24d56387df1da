"""Parameter server (sync and async) and local SGD on loopback gloo: batches, per-worker
updates, staleness, communication per step."""

import csv

import pytest

from scaleprobe.core.results import read_jsonl

pytestmark = pytest.mark.timeout(240)

QUICK = ("--model", "linear", "--loader", "naive", "--warmup-steps", 1, "--no-progress")


def _run(cli, out_dir, *argv, status="ok"):
    p = cli("run", *map(str, argv), *QUICK, "--out", out_dir)
    assert p.returncode == {"ok": 0, "audit_failed": 5}[status], p.stderr[-2000:]
    rec = read_jsonl(out_dir / "results.jsonl")[-1]
    assert rec["status"] == status, rec["error"]
    return rec


@pytest.mark.slow
def test_ps_sync_one_update_per_step_from_every_worker(cli, out_dir):
    rec = _run(cli, out_dir, "--strategy", "ps", "--ps-mode", "sync", "--nproc", 3,
               "--global-batch", 64, "--steps", 6, "--lr-scaling", "linear", "--lr", 0.01)
    # the server takes no batch: 64 split over the 2 workers; a fixed global batch keeps the lr
    assert rec["batch"] == {"per_device": 32, "per_process": 32, "global": 64, "world_size": 3,
                            "training_ranks": 2}
    assert rec["metrics"]["lr_effective"] == pytest.approx(0.01)
    server = rec["comm"]["server"]
    assert server["role"] == "server" and server["mode"] == "sync"
    steps = [r["steps_done"] for r in rec["ranks"][1:]]
    assert steps[0] == steps[1] == 7  # 1 warm-up + 6 timed
    assert server["updates"] == 7  # one update per step, from both workers' mean
    assert server["per_worker_updates"] == {"1": 7, "2": 7}
    assert server["staleness_max"] == 0
    assert server["per_worker_staleness"] == {"1": {"mean": 0, "max": 0},
                                              "2": {"mean": 0, "max": 0}}
    assert rec["metrics"]["breakdown_s"]["comm"] > 0
    with open(rec["paths"]["steps_csv"]) as fh:  # the steps of a worker, not the server's
        assert len(list(csv.DictReader(fh))) == 6
    assert rec["comm"]["prediction"] is not None
    audit = rec["audit"]  # over the two workers; the server reads no sample
    assert audit["ok"] is True and audit["world_size"] == 2
    c = rec["comm"]  # the worker's push + pull, split: the server pattern's own collective
    assert c["transfer_standalone"]["op"] == "ps_push_pull"
    assert c["transfer_s"] + c["sync_overhead_s"] == pytest.approx(c["exposed_s"])


@pytest.mark.slow
def test_ps_async_updates_per_worker_and_staleness(cli, out_dir):
    """Also with every worker on the first worker's shard (dist.sampler=same_batch): ps
    honours the sampler, and its audit over the workers fails. Bug: ps ignored dist.sampler
    and never ran the shard audit."""
    rec = _run(cli, out_dir, "--strategy", "ps", "--ps-mode", "async", "--nproc", 3,
               "--batch-size", 16, "--steps", 8, "--set", "dist.sampler=same_batch",
               status="audit_failed")
    audit = rec["audit"]
    assert audit["ok"] is False and audit["duplicate_samples"] > 0
    assert audit["world_size"] == 2
    server = rec["comm"]["server"]
    per = server["per_worker_updates"]
    assert set(per) == {"1", "2"} and all(v == 9 for v in per.values())
    assert server["updates"] == sum(per.values())  # one update per gradient received
    assert 0 <= server["staleness_mean"] <= server["staleness_max"] <= server["updates"]
    stale = server["per_worker_staleness"]
    assert set(stale) == {"1", "2"}
    assert max(s["max"] for s in stale.values()) == server["staleness_max"]
    assert [r["rank"] for r in rec["ranks"]] == [0, 1, 2]
    assert all(r["samples_per_s"] > 0 for r in rec["ranks"][1:])
    m = rec["metrics"]  # the headline sums the workers' own rates, each kept beside it
    assert set(m["samples_per_s_by_rank"]) == {"1", "2"} and m["step_time_rank"] == 1
    assert m["samples_per_s"] == pytest.approx(sum(m["samples_per_s_by_rank"].values()))


@pytest.mark.slow
def test_localsgd_averages_every_k_steps(cli, out_dir):
    rec = _run(cli, out_dir, "--strategy", "localsgd", "--average-every", 4, "--nproc", 2,
               "--batch-size", 16, "--steps", 8)
    assert rec["config"]["dist"]["average_every"] == 4
    assert rec["metrics"]["breakdown_s"]["comm"] > 0
    assert rec["audit"]["ok"] is True
    assert rec["comm"]["prediction"] is not None
    std = rec["comm"]["transfer_standalone"]  # one averaging's all_reduce, spread over K steps
    assert std["op"] == "all_reduce" and std["every"] == 4
    assert std["per_step_s"] == pytest.approx(std["median_s"] / 4)


@pytest.mark.parametrize("argv, message", [
    (["--backend", "nccl"], "needs --backend gloo"),
    (["--amp", "fp16"], "use --amp bf16"),
    (["--nproc", 3, "--global-batch", 63], "does not split evenly over 2 training processes"),
])
def test_ps_input_errors(cli, out_dir, argv, message):
    p = cli("run", "--strategy", "ps", "--nproc", 2, *argv, "--out", out_dir)
    assert p.returncode == 2 and message in p.stderr
