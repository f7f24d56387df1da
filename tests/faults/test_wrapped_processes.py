"""Wrapped scripts that start processes of their own, hang before their first step, or
compile for longer than --timeout: each ends (or runs) as it should, named, with nothing left
running."""

import json
import time

import psutil
import pytest

from scaleprobe.core.results import read_jsonl
from scaleprobe.measure.heartbeat import read_beats

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


def _gone(pids, within_s=5.0):
    """Every pid has ended (a zombie counts as ended) within ``within_s``."""
    deadline = time.time() + within_s
    alive = list(pids)
    while alive and time.time() < deadline:
        alive = [p for p in alive if _running(p)]
        time.sleep(0.1)
    return not alive


def _running(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _rank_pids(out_dir):
    return [b.pid for d in out_dir.glob("*/") for b in read_beats(d).values()]

OWN_RANKS = """
import os
import torch.distributed as dist
import torch.multiprocessing as mp

def rank(r, world):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", "29517"
    dist.init_process_group("gloo", rank=r, world_size=world)

if __name__ == "__main__":
    print("starting", flush=True)
    mp.spawn(rank, args=(2,), nprocs=2, join=True)
"""


def test_a_script_that_starts_its_own_ranks_is_refused_in_one_line(tmp_path, out_dir, cli):
    """torch.multiprocessing.spawn of 2 DDP ranks inside a wrapped script. Bug caught: no
    answer in 300 s (the children inherited the launcher's store settings and waited for a
    store no one served) and, once the launcher was killed, the children and their resource
    tracker ran on."""
    script = tmp_path / "own_ranks.py"
    script.write_text(OWN_RANKS)
    p = cli("wrap", "--out", out_dir, "--timeout", 5, "--", script, timeout=120)
    assert p.returncode == 2, p.stderr[-2000:]
    assert "starting" in p.stdout  # the script ran up to its spawn
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and "torch.multiprocessing.spawn()" in err[0], p.stderr
    assert "--nproc N" in err[0] and "Traceback" not in p.stderr
    (rec,) = read_jsonl(out_dir / "results.jsonl")
    assert rec["status"] == "failed" and "--nproc N" in rec["error"]
    assert _gone(_rank_pids(out_dir))


HANG_FIRST = """
import multiprocessing as mp, os, time

def child():
    time.sleep(10**6)

if __name__ == "__main__":
    p = mp.get_context("spawn").Process(target=child)
    p.start()
    with open(__file__ + ".child", "w") as fh:
        fh.write(str(p.pid))
    time.sleep(10**6)  # waits for what never comes, before any batch, forward or step
"""
TIMEOUT_S = 3


def test_a_script_that_hangs_before_its_first_step_is_ended_as_stalled(tmp_path, out_dir,
                                                                       cli):
    """Bug caught: the stall watch began at the first progress, so a script that waited
    before its first step ran forever; its own child process outlived it."""
    script = tmp_path / "hang_first.py"
    script.write_text(HANG_FIRST)
    p = cli("wrap", "--out", out_dir, "--timeout", TIMEOUT_S, "--", script, timeout=120)
    assert p.returncode == 1, p.stderr[-2000:]
    child = int((tmp_path / "hang_first.py.child").read_text())
    ranks = _rank_pids(out_dir)
    assert ranks and _gone([child, *ranks]), "the script's child or its rank runs on"
    (rec,) = read_jsonl(out_dir / "results.jsonl")
    assert rec["status"] == "failed"
    assert rec["error"].startswith("rank 0: stalled before the first step: for "), rec["error"]
    assert f"--timeout {TIMEOUT_S})" in rec["error"]


ONE_RANK_HANGS = """
import os, time, torch
import torch.distributed as dist
if os.environ["RANK"] == "1":
    time.sleep(10**6)  # its own setup waits for what never comes, before it joins
dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2))
"""


def test_the_rank_that_never_joined_is_named_not_the_one_that_waited(tmp_path, out_dir, cli):
    """Two ranks; rank 1 waits forever before `init_process_group`, rank 0 waits for it there.
    Both beat and neither uses the CPU. Bug caught: the job named rank 0 (idle first: it got
    to the rendezvous first), not rank 1, which never joined."""
    script = tmp_path / "one_rank_hangs.py"
    script.write_text(ONE_RANK_HANGS)
    p = cli("wrap", "--nproc", 2, "--out", out_dir, "--timeout", TIMEOUT_S, "--", script,
            timeout=120)
    assert p.returncode == 1, p.stderr[-2000:]
    (rec,) = read_jsonl(out_dir / "results.jsonl")
    assert rec["error"].startswith("rank 1: stalled before the first step: "), rec["error"]
    assert "; this rank was behind the others, before joining the process group (" \
        in rec["error"], rec["error"]
    assert _gone(_rank_pids(out_dir))


SLOW_COMPILE = """
import time, torch

def slow_backend(gm, example_inputs):  # a compiler that takes longer than --timeout
    time.sleep({sleep})
    return gm.forward

model = torch.compile(torch.nn.Linear(8, 2), backend=slow_backend)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.utils.data.TensorDataset(torch.randn(24, 8))
for (x,) in torch.utils.data.DataLoader(data, batch_size=4):  # a batch taken, then compiled
    loss = model(x).sum()
    opt.zero_grad(); loss.backward(); opt.step()
"""
COMPILE_S = 2 * TIMEOUT_S  # twice the stall limit: a stall would be called half-way


def test_a_compile_longer_than_the_timeout_is_progress_not_a_stall(tmp_path, out_dir, cli):
    """Bug caught: `wrap --timeout 10` of a script whose torch.compile warm-up took longer
    was killed as "stalled: no progress for 10.0 s at step 0"."""
    script = tmp_path / "slow_compile.py"
    script.write_text(SLOW_COMPILE.format(sleep=COMPILE_S))
    p = cli("wrap", "--out", out_dir, "--timeout", TIMEOUT_S, "--warmup-steps", 1, "--",
            script, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    (rec,) = read_jsonl(out_dir / "results.jsonl")
    assert rec["status"] == "ok" and rec["metrics"]["steps_timed"] == 5
    assert rec["metrics"]["compile_time_s"] >= COMPILE_S, json.dumps(rec["metrics"])[:800]
