"""A rank that dies or hangs leaves the steps every rank timed until then: the record holds
them (status failed, ``partial`` with its reason), steps.csv has a row per step, and the step
logs they came from are what each rank wrote as it trained (``measure/steplog.py``).

Each fault happens at a known step: the rank sleeps 1.5 s first (three heartbeats, each of
which writes the steps ended since the last), so the steps before it are all on disk and the
count kept is exact. Without the sleep, up to the last half second of steps can be lost."""

import csv
import textwrap
from pathlib import Path

import pytest

from scaleprobe.core.results import read_jsonl

from .test_rank_failures import run_job, run_with_failing_rank

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

AT_CALL = 12  # the fault comes in the 12th forward: 11 steps done, 10 timed (1 warm-up)
SLEEP = "time.sleep(1.5); "


def _steps_csv_rows(rec):
    with open(Path(rec["paths"]["dir"]) / "steps.csv") as fh:
        return list(csv.reader(fh))[1:]


def check_kept(rec, timed=AT_CALL - 2, ranks_timed=None):
    assert rec["status"] == "failed", rec["error"]
    assert rec["partial"] is True, rec
    assert "step log" in rec["null_reasons"]["partial"], rec["null_reasons"]["partial"]
    m = rec["metrics"]
    assert m["steps_timed"] == timed, m["steps_timed"]
    assert m["step_time_s"]["n"] == timed and m["step_time_s"]["median"] > 0
    assert m["samples_per_s"] > 0
    assert len(_steps_csv_rows(rec)) == timed
    got = {r["steps_timed"] for r in rec["ranks"]}
    assert timed in got and got <= (ranks_timed or {timed}), rec["ranks"]


@pytest.mark.parametrize("rank", [0, 1])
def test_sigkilled_rank_keeps_every_ranks_steps(tmp_path, out_dir, rank):
    """Bug caught: 0 timed steps and no steps.csv after a rank was killed, though both ranks
    had timed 10 steps (SIGTERM and Ctrl+C kept theirs; a kill left nothing)."""
    _, _, rec = run_with_failing_rank(tmp_path, out_dir, "ddp", 2,
                                      SLEEP + "os.kill(os.getpid(), signal.SIGKILL)", 1,
                                      rank=rank, at_call=AT_CALL)
    assert rec["error"].startswith(f"rank {rank}: killed by signal 9"), rec["error"]
    check_kept(rec)
    assert rec["audit"] is None and "lost" in rec["null_reasons"]["audit"]


def test_killed_loader_worker_keeps_every_ranks_steps(tmp_path, out_dir):
    """A loader worker of rank 1 killed: rank 1 raises, the job ends; the steps are kept."""
    kill_worker = (SLEEP + "[os.kill(c.pid, signal.SIGKILL) for c in "
                   "psutil.Process().children()]")
    _, _, rec = run_with_failing_rank(tmp_path, out_dir, "ddp", 2, kill_worker, 1,
                                      at_call=AT_CALL,
                                      extra=("--loader", "pipelined", "--workers", 1))
    assert rec["error"].startswith("rank 1:") and "DataLoader worker" in rec["error"]
    # the worker's death reaches rank 1 as a signal (SIGCHLD) or at its next batch: after
    # its part of the step's all-reduce, so either rank may have closed and logged one step
    # more than the other (rank 1 had its 12th batch in hand: seen 11 against rank 0's 10,
    # rank 0 ended by the launcher before it wrote its 12th)
    timed = rec["metrics"]["steps_timed"]
    assert timed in (AT_CALL - 2, AT_CALL - 1)
    check_kept(rec, timed, {AT_CALL - 2, AT_CALL - 1})


DDP_SCRIPT = """
import os, signal, time, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler
dist.init_process_group("gloo")
data = TensorDataset(torch.randn(4096, 64))
loader = DataLoader(data, batch_size=16, sampler=DistributedSampler(data))
model = DDP(torch.nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step, (x,) in enumerate(loader, 1):
    if dist.get_rank() == 1 and step == {at}:
        time.sleep(1.5)
        os.kill(os.getpid(), signal.SIGKILL)
    loss = model(x).sum()
    opt.zero_grad(); loss.backward(); opt.step()
"""


def test_sigkilled_rank_of_a_wrapped_script_keeps_the_steps(tmp_path, out_dir):
    """The same under `wrap`: the ranks of a user's script write their steps as they go."""
    script = tmp_path / "ddp.py"
    script.write_text(textwrap.dedent(DDP_SCRIPT.format(at=AT_CALL)))
    job = run_job(["wrap", "--nproc", 2, "--warmup-steps", 1, "--out", out_dir, "--", script],
                  tmp_path)
    assert job.returncode == 1, job.stderr[-2000:]
    assert not job.left_behind()
    (rec,) = read_jsonl(out_dir / "results.jsonl")
    assert rec["error"].startswith("rank 1: killed by signal 9"), rec["error"]
    check_kept(rec)
