"""A rank that raises or dies ends the whole job quickly, with a result naming it, and leaves
no process behind: not the other ranks, not the loader workers of the rank that died."""

import json
import socket
import time

import psutil
import pytest

from scaleprobe.core.results import read_jsonl

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

MODEL = """
import os, signal, time, torch
class M(torch.nn.Module):
    def __init__(self):
        super().__init__(); self.l = torch.nn.Linear(3 * 32 * 32, 10); self.n = 0
    def forward(self, x):
        self.n += 1
        if os.environ.get("RANK") == "{rank}" and self.n == {at_call}:
            import psutil
            with open(__file__ + ".children", "w") as fh:  # its loader workers, if any
                fh.write(" ".join(str(c.pid) for c in psutil.Process().children()))
            with open(__file__ + ".failed_at", "w") as fh:
                fh.write(repr(time.time()))
            {action}
        return self.l(x.flatten(1))
def build():
    return M()
"""
COLLECTIVE_TIMEOUT_S = 300  # --timeout: how long the other ranks would wait for the lost one
# From rank 1's failure to the end of `scaleprobe run` (the launcher stops the other ranks,
# the driver writes the result and exits), measured 2026-11-24 on this 2-core machine: 2.4-4.4 s
# quiet; 9.9-15.7 s with six busy processes beside it (load average 6-8); 15.6-48.6 s with ten
# (load average 10-13). Ranks left to wait for the collective timeout would take 300 s or
# more; 100 s is twice the worst measured and a third of the timeout.
STOP_AFTER_FAILURE_S = 100


def failed_at(model_file) -> float:
    return float((model_file.parent / (model_file.name + ".failed_at")).read_text())


class Job:
    """A finished ``scaleprobe`` process: exit code, output, when it ended, and every process
    seen in its tree while it ran (ranks, loader workers)."""

    def __init__(self, returncode, stdout, stderr, ended_at, family):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr
        self.ended_at = ended_at
        self.family = [p for p, _ in family]
        self.cmdlines = [cmd for _, cmd in family]  # as first seen

    def left_behind(self, grace_s=2.0):
        """Processes of the job still running ``grace_s`` after it ended (zombies count as
        gone). Followed by pid and start time, so a killed rank's loader workers, which the
        system reparents away from the job, are still found."""
        alive = [p for p in self.family if _running(p)]
        _, alive = psutil.wait_procs(alive, timeout=grace_s)
        return [p for p in alive if _running(p)]

    def kill_left(self):
        for p in self.left_behind(0):
            p.kill()


def _running(p):
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def run_job(argv, tmp_path, timeout=240, during=None):
    """Run ``python -m scaleprobe ARGV``, recording its process tree every 0.1 s; ``during``
    is called with the Popen on each round (to send signals). Output goes to files, so a
    chatty job never blocks on a full pipe."""
    from tests.conftest import start_cli

    family = {}
    # forked from the tests' server (no import of torch to pay), in a process group of its
    # own; a fresh interpreter with SCALEPROBE_TEST_CLI=exec
    p, out_f, err_f = start_cli(tmp_path, *argv)
    deadline = time.time() + timeout
    try:
        while p.poll() is None:
            if time.time() > deadline:
                pytest.fail(f"scaleprobe {' '.join(map(str, argv[:3]))} did not end "
                            f"within {timeout} s")
            try:
                kids = psutil.Process(p.pid).children(recursive=True)
            except psutil.Error:
                kids = []
            for c in kids:  # one child gone mid-round does not lose the others
                try:
                    key = (c.pid, c.create_time())
                    if key not in family:
                        family[key] = (c, " ".join(c.cmdline()))
                except psutil.Error:
                    pass
            if during is not None:
                during(p)
            time.sleep(0.1)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
            for c, _ in family.values():
                if _running(c):
                    c.kill()
    return Job(p.returncode, out_f.read_text(), err_f.read_text(), time.time(),
               list(family.values()))


def valid_jsonl(path):
    """Every line of a results.jsonl parses (nothing torn); returns the records."""
    lines = path.read_text().splitlines()
    return [json.loads(ln) for ln in lines]


def run_with_failing_rank(tmp_path, out_dir, strategy, nproc, action, rc, rank=1, at_call=4,
                          extra=(), timeout_s=COLLECTIVE_TIMEOUT_S):
    """Run a job whose rank ``rank`` does ``action`` in its ``at_call``-th forward; check its
    exit code, that no process of it is left, and every results line; return the job, when
    the rank failed, and the run record."""
    f = tmp_path / "m.py"
    f.write_text(MODEL.format(action=action, rank=rank, at_call=at_call))
    job = run_job(["run", "--strategy", strategy, "--nproc", nproc, "--steps", 20,
                   "--warmup-steps", 1, "--model", f"{f}:build", "--loader", "naive",
                   "--timeout", timeout_s, "--out", out_dir, "--no-progress", *extra], tmp_path)
    try:
        assert job.returncode == rc, job.stderr[-2000:]
        left = job.left_behind()
        assert not left, f"left running: {[p.cmdline()[-2:] for p in left]}"
    finally:
        job.kill_left()
    recs = valid_jsonl(out_dir / "results.jsonl")
    assert len(recs) == 1 and recs[0] == read_jsonl(out_dir / "results.jsonl")[0]
    return job, failed_at(f), recs[0]


def _run_with_failing_rank(tmp_path, out_dir, strategy, nproc, action, rc, **kw):
    """As ``run_with_failing_rank``, and the job ended within STOP_AFTER_FAILURE_S of the
    failure."""
    job, t_fail, rec = run_with_failing_rank(tmp_path, out_dir, strategy, nproc, action, rc,
                                             **kw)
    stop_s = job.ended_at - t_fail
    print(f"{strategy} {action[:20]}: ended {stop_s:.1f} s after the rank failed")
    assert stop_s < STOP_AFTER_FAILURE_S, f"ended {stop_s:.1f} s after the rank failed"
    return job, rec


@pytest.mark.parametrize("strategy,nproc,action,needle", [
    ("ddp", 2, "raise ValueError('rank one gave up')", "rank one gave up"),
    # a ddp rank's SIGKILL: test_sigkilled_rank_and_its_loader_workers_leave_nothing_running
    # a parameter-server worker (rank 1) dies: the server and the other worker do not hang
    ("ps", 3, "os.kill(os.getpid(), signal.SIGKILL)", "signal 9"),
    ("ps", 3, "raise ValueError('rank one gave up')", "rank one gave up"),
])
def test_failed_rank_ends_job_and_is_named(tmp_path, out_dir, strategy, nproc, action,
                                           needle):
    p, rec = _run_with_failing_rank(tmp_path, out_dir, strategy, nproc, action, 1)
    assert rec["status"] == "failed"
    assert rec["error"].startswith("rank 1") and needle in rec["error"]
    assert "status: failed" in p.stdout and "Traceback" not in p.stderr


@pytest.mark.parametrize("rank", [0, 1])
def test_sigkilled_rank_and_its_loader_workers_leave_nothing_running(tmp_path, out_dir, rank):
    """SIGKILL of rank 0 (the one that gathers the records) and of a non-zero rank, each with a
    loader worker. Bugs caught: the job waiting for the collective timeout (300 s here) or the
    launcher's 30 s grace; the wrong rank named; the killed rank's loader worker, reparented
    away from the job, still running after it ended (it waited for its own watchdog)."""
    job, rec = _run_with_failing_rank(tmp_path, out_dir, "ddp", 2,
                                      "os.kill(os.getpid(), signal.SIGKILL)", 1, rank=rank, at_call=10,
                                      extra=("--loader", "pipelined", "--workers", 1))
    assert rec["status"] == "failed"
    assert rec["error"].startswith(f"rank {rank}:") and "signal 9" in rec["error"]
    # a worker whose rank died mid-handover of a batch printed the resource sharer's
    # ConnectionResetError traceback here (19 lines); the record already says what happened
    assert "Traceback" not in job.stderr and "resource_sharer" not in job.stderr, job.stderr
    # the killed rank had its loader worker (its pid, written just before the kill; the job's
    # process tree, sampled every 0.1 s, can miss a worker that lived less than that) and it
    # is gone too
    kids = [int(pid) for pid in (tmp_path / "m.py.children").read_text().split()]
    assert len(kids) == 1, kids
    assert not [pid for pid in kids if _running_pid(pid)], "the killed rank's worker runs on"


def _running_pid(pid):
    try:
        return _running(psutil.Process(pid))
    except psutil.Error:
        return False


@pytest.mark.parametrize("flags", [("--master-port", "{port}"),
                                   ("--nnodes", 1, "--rdzv-endpoint", "127.0.0.1:{port}")])
def test_rendezvous_port_in_use_is_an_error_not_a_hang(cli, out_dir, flags):
    """Bug caught: a port another program holds ending in a rendezvous timeout or a traceback
    after the workers started, instead of one line and exit 2 before anything runs."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        t0 = time.time()
        p = cli("run", "--strategy", "ddp", "--nproc", 2, *[str(f).format(port=port)
                                                             for f in flags],
                "--steps", 2, "--out", out_dir, "--no-progress", timeout=60)
        took = time.time() - t0
    assert p.returncode == 2, p.stderr[-2000:]
    assert f"port {port} on 127.0.0.1 is already in use" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not list(out_dir.glob("*/steps.csv"))  # nothing ran
    print(f"port in use: refused in {took:.1f} s")


OOM = ("raise RuntimeError('[enforce fail at alloc_cpu.cpp:121] data. DefaultCPUAllocator: "
       "not enough memory: you tried to allocate 8589934592 bytes.')")


def test_rank_out_of_memory_is_an_oom_result_with_exit_code_3(tmp_path, out_dir):
    """One DDP rank runs out of memory (the CPU allocator's own message): the whole run is
    'oom', names the rank and exits 3, as a single process does. Bug caught: a rank's OOM
    reported as an ordinary failure (exit 1), which a sweep would rerun and not use to skip
    the larger batches."""
    p, rec = _run_with_failing_rank(tmp_path, out_dir, "ddp", 2, OOM, 3)
    assert rec["status"] == "oom"
    assert rec["error"].startswith("rank 1") and "DefaultCPUAllocator" in rec["error"]
    assert "status: oom" in p.stdout and "Traceback" not in p.stderr
