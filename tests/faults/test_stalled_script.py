"""A wrapped script that hangs inside a step (a deadlock, a wait that never returns) is ended
once it has made no progress for --timeout: named as stalled, with the rank the others waited
for, the steps before it kept, nothing left running."""

import textwrap
import time

import pytest

from scaleprobe.core.results import read_jsonl

from .test_rank_failures import run_job

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

TIMEOUT_S = 5
HANG_AT = 8  # the script hangs in its 8th step: 7 steps done, 6 timed (1 warm-up)
# From the hang to the end of `scaleprobe wrap`: the timeout, then the kill (at the watch's
# next look) and the record; 20 s of margin on top for a loaded 2-core machine
END_WITHIN_S = TIMEOUT_S + 20

SCRIPT = """
import os, time, torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset
world = int(os.environ["WORLD_SIZE"])
if world > 1:
    dist.init_process_group("gloo")
    from torch.nn.parallel import DistributedDataParallel as DDP
model = torch.nn.Linear(32, 4)
model = DDP(model) if world > 1 else model
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = TensorDataset(torch.randn(4096, 32))
for step, (x,) in enumerate(DataLoader(data, batch_size=16), 1):
    if step == {hang} and int(os.environ["RANK"]) == world - 1:
        with open(__file__ + ".hung", "w") as fh:
            fh.write(repr(time.time()))
        time.sleep(10**6)  # inside the step: its batch taken, no forward, no optimizer step
    loss = model(x).sum()
    opt.zero_grad(); loss.backward(); opt.step()
"""


@pytest.mark.parametrize("nproc", [1, 2])
def test_a_script_stuck_in_a_step_is_ended_as_stalled(tmp_path, out_dir, nproc):
    """Bug caught: the run went on forever (the heartbeats showed no progress, nothing read
    them for a script). With 2 ranks the stuck one is named, not the one waiting for it."""
    script = tmp_path / "stuck.py"
    script.write_text(textwrap.dedent(SCRIPT.format(hang=HANG_AT)))
    job = run_job(["wrap", "--nproc", nproc, "--warmup-steps", 1, "--timeout", TIMEOUT_S,
                   "--out", out_dir, "--", script], tmp_path, timeout=200)
    hung_at = float((tmp_path / "stuck.py.hung").read_text())
    took = job.ended_at - hung_at
    print(f"nproc {nproc}: ended {took:.1f} s after the hang")
    assert job.returncode == 1, job.stderr[-2000:]
    assert not job.left_behind()
    (rec,) = read_jsonl(out_dir / "results.jsonl")
    assert rec["status"] == "failed"
    assert rec["error"].startswith(f"rank {nproc - 1}: stalled: no progress for "), rec["error"]
    assert f"at step {HANG_AT - 1} " in rec["error"] and f"--timeout {TIMEOUT_S})" in rec["error"]
    assert rec["partial"] is True and rec["metrics"]["steps_timed"] == HANG_AT - 2
    assert rec["metrics"]["stop_reason"] == "failed"
    assert rec["script"]["exit_code"] == 137  # killed with SIGKILL by the watch (was 1)
    assert TIMEOUT_S <= took < END_WITHIN_S
    assert time.time() - job.ended_at < 60
