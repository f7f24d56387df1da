"""SIGTERM to the launcher (what a scheduler sends on pre-emption) and Ctrl+C keep what was
measured: status "interrupted", steps.csv with the steps so far, a summary marked partial,
no process left; in one process and with two DDP ranks, alone and as a sweep point."""

import csv
import os
import signal
import time

import pytest

from scaleprobe.config.runconfig import build
from scaleprobe.core.result_model import Experiment
from scaleprobe.experiments.point import PointPayload
from scaleprobe.experiments.procs import grace_for
from scaleprobe.experiments.sweep import completed_runs
from scaleprobe.launch.rankwatch import INTERRUPT_GRACE_S

from .test_rank_failures import run_job, valid_jsonl

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

# rank 0 (or the single process) writes the marker at this forward: the run is training, with
# timed steps, when the signal is sent
MARK_AT_CALL = 30
WARMUP = 2
MODEL = """
import os, time, torch
class M(torch.nn.Module):
    def __init__(self):
        super().__init__(); self.l = torch.nn.Linear(3 * 32 * 32, 10); self.n = 0
    def forward(self, x):
        self.n += 1
        if self.n == {at} and os.environ.get("RANK", "0") == "0":
            with open(__file__ + ".reached", "w") as fh:
                fh.write(repr(time.time()))
        return self.l(x.flatten(1))
def build():
    return M()
"""
# From SIGTERM to the end of `scaleprobe run`, measured 2026-11-23 on this 2-core machine with
# other jobs beside it (load average 4-7): one process 1.4-4.2 s (the loop stops after the step
# under way; summarising and writing take the rest); two DDP ranks 5.0-8.2 s (they finish at
# most two steps, agree, hand over their records, then the same). One process: 20 s holds four
# times the worst measured. DDP: the ranks must be done before the launcher's grace
# (INTERRUPT_GRACE_S) kills them, which the records kept also show; a rank left waiting
# for the launcher to read its return value (the bug this bound catches) is killed only then.
SINGLE_STOP_S = 20.0


def _model(tmp_path):
    f = tmp_path / "m.py"
    f.write_text(MODEL.format(at=MARK_AT_CALL))
    return f


def _signal_when_training(model_file, sig, group=False):
    """A ``during`` callback: send ``sig`` once the marker exists; remembers when."""
    marker = model_file.parent / (model_file.name + ".reached")
    sent = {}

    def during(p):
        if not sent and marker.exists():
            sent["at"] = time.time()
            os.killpg(p.pid, sig) if group else p.send_signal(sig)

    return during, sent


def _check_partial(out_dir, job, signame):
    """The one run recorded interrupted, with the steps timed so far in steps.csv and in a
    summary marked partial; every results line whole; nothing left running."""
    try:
        assert job.returncode == 130, job.stderr[-2000:]
        left = job.left_behind()
        assert not left, f"left running: {[p.pid for p in left]}"
    finally:
        job.kill_left()
    recs = [r for r in valid_jsonl(out_dir / "results.jsonl") if r["kind"] == "run"]
    assert len(recs) == 1, recs
    rec = recs[0]
    assert rec["status"] == "interrupted" and signame in rec["error"], rec["error"]
    assert rec["partial"] is True and "interrupted after" in rec["null_reasons"]["partial"]
    timed = rec["metrics"]["steps_timed"]
    # the signal came after forward MARK_AT_CALL: every step before it was timed
    assert timed >= MARK_AT_CALL - WARMUP - 1, timed
    assert rec["metrics"]["step_time_s"]["n"] == timed
    with open(rec["paths"]["steps_csv"]) as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == timed
    assert all(float(r["step_time_s"]) > 0 for r in rows)
    return rec


def _run_args(model_file, out_dir, *extra):
    return ["run", "--model", f"{model_file}:build", "--loader", "pipelined", "--workers", 1,
            "--steps", 10**6, "--warmup-steps", WARMUP, "--timeout", 300, "--out", out_dir,
            "--no-progress", *extra]


def test_sigterm_to_a_single_process_run_keeps_the_steps_so_far(tmp_path, out_dir):
    """Bugs caught: SIGTERM ending the run without any record (Python's default), or with
    status interrupted but no steps.csv and an empty summary (what Ctrl+C kept before)."""
    f = _model(tmp_path)
    during, sent = _signal_when_training(f, signal.SIGTERM)
    job = run_job(_run_args(f, out_dir), tmp_path, during=during)
    took = job.ended_at - sent["at"]
    rec = _check_partial(out_dir, job, "SIGTERM")
    print(f"single: {rec['metrics']['steps_timed']} steps kept, ended {took:.1f} s after SIGTERM")
    assert took < SINGLE_STOP_S


def test_sigterm_to_the_launcher_of_two_ddp_ranks_keeps_the_steps_so_far(tmp_path, out_dir):
    """Bugs caught: an interrupted DDP run recorded "failed" (the launcher's own signal
    exception), the ranks' records lost (the launcher no longer collects return values), a
    rank left waiting in a collective for a peer that stopped a step earlier, or waiting for
    the launcher to read its return value until it is killed."""
    f = _model(tmp_path)
    during, sent = _signal_when_training(f, signal.SIGTERM)
    job = run_job(_run_args(f, out_dir, "--strategy", "ddp", "--nproc", 2), tmp_path,
                  during=during)
    took = job.ended_at - sent["at"]
    rec = _check_partial(out_dir, job, "SIGTERM")
    # both ranks stopped at the same step
    assert len({r["steps_done"] for r in rec["ranks"]}) == 1, rec["ranks"]
    assert rec["audit"] is not None
    print(f"ddp: {rec['metrics']['steps_timed']} steps kept, ended {took:.1f} s after SIGTERM")
    assert took < INTERRUPT_GRACE_S


def test_sigterm_to_one_fsdp_rank_stops_every_rank_and_names_it(tmp_path, out_dir):
    """SIGTERM to rank 1's pid alone (a scheduler or a person signalling one process), not to
    the launcher. Bug caught: rank 1 stopped alone and waited in a collective its peer never
    joined; the job ended 28.4 s later, named by gloo's "Connection closed by peer", SIGTERM
    nowhere. Now the peer reads the signal from rank 1's heartbeat at its next step's end,
    both stop at the step they agree on, and the error names the signal and the rank."""
    from scaleprobe.measure.heartbeat import read_beats

    f = _model(tmp_path)
    marker = f.parent / (f.name + ".reached")
    sent = {}

    def during(p):
        if sent or not marker.exists():
            return
        beats = [b for d in out_dir.glob("*/") for b in read_beats(d).values()]
        sent["at"] = time.time()
        os.kill(next(b.pid for b in beats if b.rank == 1), signal.SIGTERM)

    job = run_job(_run_args(f, out_dir, "--strategy", "fsdp", "--nproc", 2), tmp_path,
                  during=during)
    took = job.ended_at - sent["at"]
    rec = _check_partial(out_dir, job, "SIGTERM")
    assert "SIGTERM sent to rank 1 alone" in rec["error"], rec["error"]
    assert len({r["steps_done"] for r in rec["ranks"]}) == 1, rec["ranks"]
    assert "Connection closed" not in job.stderr and "Traceback" not in job.stderr
    print(f"fsdp: SIGTERM to rank 1, {rec['metrics']['steps_timed']} steps kept, ended "
          f"{took:.1f} s after it")
    assert took < INTERRUPT_GRACE_S


def test_ctrl_c_in_a_sweep_records_the_ddp_point_interrupted_and_reruns_it(tmp_path, out_dir):
    """Ctrl+C reaches the sweep (the terminal's process group; points run in sessions of their
    own). Bugs caught: the DDP point recorded "failed" (today's behaviour), or killed after
    the sweep's 3 s grace before it could record what its ranks measured; the point counted
    as done on resume."""
    f = _model(tmp_path)
    spec = tmp_path / "s.toml"
    spec.write_text(f'[base]\nmodel = "{f}:build"\nloader = "naive"\nwarmup_steps = {WARMUP}\n'
                    '[base.dist]\nstrategy = "ddp"\nnproc = 2\n[grid]\nsteps = [1000000]\n')
    during, sent = _signal_when_training(f, signal.SIGINT)
    job = run_job(["sweep", spec, "--out", out_dir, "--no-progress", "--repeats", 1], tmp_path,
                  during=during)
    took = job.ended_at - sent["at"]
    rec = _check_partial(out_dir, job, "Ctrl+C")
    assert rec["experiment"]["point"] == {"steps": 1000000}
    assert rec["key"] not in completed_runs(out_dir / "results.jsonl")  # rerun on resume
    print(f"sweep: the point kept {rec['metrics']['steps_timed']} steps, the sweep ended "
          f"{took:.1f} s after Ctrl+C")
    ddp = PointPayload(build({"strategy": "ddp", "nproc": 2}), Experiment())
    assert took < grace_for(ddp) + 5


STUCK_MODEL = """
import time, torch
class M(torch.nn.Module):
    def __init__(self):
        super().__init__(); self.l = torch.nn.Linear(3 * 32 * 32, 10); self.n = 0
    def forward(self, x):
        self.n += 1
        if self.n == {at}:
            with open(__file__ + ".reached", "w") as fh:
                fh.write(repr(time.time()))
            time.sleep(120)  # a step that will not end soon: only a second Ctrl+C stops it
        return self.l(x.flatten(1))
def build():
    return M()
"""
# From the second Ctrl+C to the end of `scaleprobe run`: raising out of the stuck step, then
# recording the result (environment, summary, files): a few seconds on this machine under load;
# 30 s is far below the stuck step's 120 s, which a second Ctrl+C that is ignored would wait out.
SECOND_STOP_S = 30.0


def test_a_second_ctrl_c_stops_a_stuck_single_process_run_at_once(tmp_path, out_dir):
    """The first Ctrl+C asks the loop to stop after the step under way; when that step is
    stuck (here 120 s in forward), a second Ctrl+C must end the run at once. Bugs caught: the
    second Ctrl+C ignored (the user must kill -9 and loses the record), or the run ending
    without a results line or with its loader worker left running."""
    f = tmp_path / "m.py"
    f.write_text(STUCK_MODEL.format(at=MARK_AT_CALL))
    marker = tmp_path / "m.py.reached"
    sent: list[float] = []

    def during(p):
        if marker.exists() and len(sent) < 2 and (not sent or time.time() - sent[0] > 1.0):
            sent.append(time.time())
            p.send_signal(signal.SIGINT)

    job = run_job(_run_args(f, out_dir), tmp_path, during=during, timeout=150)
    try:
        assert len(sent) == 2, job.stderr[-2000:]
        took = job.ended_at - sent[1]
        assert job.returncode == 130, job.stderr[-2000:]
        assert took < SECOND_STOP_S, f"ended {took:.1f} s after the second Ctrl+C"
        left = job.left_behind()
        assert not left, f"left running: {[p.pid for p in left]}"
    finally:
        job.kill_left()
    (rec,) = [r for r in valid_jsonl(out_dir / "results.jsonl") if r["kind"] == "run"]
    assert rec["status"] == "interrupted", rec.get("error")
    assert "Ctrl+C" in rec["error"]
    # the steps timed before the stuck one are kept, as after a single Ctrl+C
    assert rec["metrics"]["steps_timed"] >= MARK_AT_CALL - WARMUP - 1
    print(f"second Ctrl+C: ended {took:.1f} s after it; {rec['metrics']['steps_timed']} "
          "steps kept")


# From SIGKILL of the launcher to the last rank and loader worker gone: 8.3 s measured on this
# machine under load (the ranks get SIGINT from the parent-death signal torch's spawn sets,
# stop as on Ctrl+C, and end when they cannot reach the job's store in the dead launcher).
ORPHAN_GONE_S = 45.0


def test_sigkill_of_the_launcher_leaves_no_rank_running(tmp_path, out_dir):
    """SIGKILL (the OOM killer, `kill -9`) cannot be caught: nothing can be recorded, but the
    ranks and their loader workers must not run on without it. Bug caught: ranks reparented
    to init that train on for hours (here --steps 10**6) holding the CPU, the GPU and the port."""
    f = _model(tmp_path)
    marker = f.parent / (f.name + ".reached")

    def during(p):
        if marker.exists():
            p.kill()

    job = run_job(_run_args(f, out_dir, "--strategy", "ddp", "--nproc", 2), tmp_path,
                  during=during)
    try:
        assert job.returncode == -signal.SIGKILL, job.stderr[-2000:]
        # the ranks were seen: forked from the launcher they carry its command line (the
        # tests' CLI server's, where the launcher was forked from it), spawned they are
        # multiprocessing's; their loader workers are named pt_data_worker
        assert sum("pt_data_worker" in c or "multiprocessing" in c or "spawn" in c
                   or "-m scaleprobe run" in c or "tests.cliserver" in c
                   for c in job.cmdlines) >= 2, job.cmdlines
        left = job.left_behind(grace_s=ORPHAN_GONE_S)
        assert not left, f"still running {ORPHAN_GONE_S} s after: {[p.pid for p in left]}"
    finally:
        job.kill_left()


def test_ctrl_c_under_an_external_torchrun_keeps_the_steps_so_far(tmp_path, out_dir):
    """A terminal's Ctrl+C reaches torchrun, which sends SIGINT to each rank's process group,
    loader workers included. Bug caught: the workers died on it, the rank's fetch under way
    failed ("DataLoader worker exited unexpectedly") and the run was lost without a record;
    now the workers ignore it, the ranks stop together after a step and rank 0 records the
    run interrupted with its steps."""
    import subprocess
    import sys

    f = _model(tmp_path)
    marker = f.parent / (f.name + ".reached")
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
            "2", "-m", "scaleprobe", "worker", *map(str, _run_args(f, out_dir)[1:])]
    with (tmp_path / "job.err").open("w") as err:
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err,
                             start_new_session=True)  # its own group, as a terminal's job
        try:
            deadline = time.time() + 200
            while not marker.exists() and p.poll() is None and time.time() < deadline:
                time.sleep(0.1)
            assert marker.exists(), (tmp_path / "job.err").read_text()[-2000:]
            sent = time.time()
            os.killpg(p.pid, signal.SIGINT)  # what Ctrl+C does: the whole foreground group
            p.wait(timeout=INTERRUPT_GRACE_S + 40)
            took = time.time() - sent
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    (rec,) = [r for r in valid_jsonl(out_dir / "results.jsonl") if r["kind"] == "run"]
    assert rec["status"] == "interrupted" and "Ctrl+C" in rec["error"], rec.get("error")
    assert rec["partial"] is True
    assert rec["metrics"]["steps_timed"] >= MARK_AT_CALL - WARMUP - 1
    assert len({r["steps_done"] for r in rec["ranks"]}) == 1, rec["ranks"]
    print(f"torchrun: ended {took:.1f} s after Ctrl+C, {rec['metrics']['steps_timed']} steps")
