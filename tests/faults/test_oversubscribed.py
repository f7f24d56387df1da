"""More ranks than the host can take: refused before anything starts, with the figures, unless
--force; and Ctrl+C ends every rank of an oversubscribed job within 10 s, at any moment
(while the ranks start, import torch, meet at the rendezvous, or train)."""

import os
import signal
import time

import psutil
import pytest

from scaleprobe.core.results import read_jsonl
from scaleprobe.measure.heartbeat import read_beats
from scaleprobe.run.resources import RANKS_PER_CORE, host_cores
from tests.conftest import start_cli

pytestmark = [pytest.mark.timeout(300)]

NPROC = 6  # 3 ranks a core on the 2-core test machine
# From Ctrl+C to the last rank's end: 2.9-7.3 s measured 2026-11-26 on the 2-core machine
# (INTERRUPT_GRACE_S is 6 s); the bound is 10 s
ALL_GONE_S = 10.0


def test_too_many_ranks_for_the_cores_is_refused_in_one_line(cli, out_dir):
    """Bug caught: 64 ranks on 2 cores accepted (the machine left with 228 MiB free and no
    answer in 405 s)."""
    n = RANKS_PER_CORE * host_cores() + 1
    p = cli("run", "--strategy", "ddp", "--nproc", n, "--steps", 2, "--out", out_dir,
            "--no-progress", timeout=120)
    assert p.returncode == 2, p.stderr[-2000:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert f"--nproc {n} does not fit this machine: {n} ranks on {host_cores()} cores" in lines[0]
    assert "--force" in lines[0]
    assert not out_dir.exists() or not list(out_dir.iterdir())  # nothing started


def _family(pid, seen):
    try:
        for c in psutil.Process(pid).children(recursive=True):
            try:
                seen.setdefault((c.pid, c.create_time()), c)
            except psutil.Error:
                pass
    except psutil.Error:
        pass


def _alive(procs):
    out = []
    for c in procs:
        try:
            if c.is_running() and c.status() != psutil.STATUS_ZOMBIE:
                out.append(c)
        except psutil.Error:
            pass
    return out


def _beats(out_dir):
    return [b for d in out_dir.glob("*/") for b in read_beats(d).values()]


@pytest.mark.slow
@pytest.mark.parametrize("when", ["starting", "training"])
def test_ctrl_c_ends_every_rank_of_an_oversubscribed_job_within_10_s(tmp_path, out_dir, when):
    """Ctrl+C (SIGINT to the terminal's process group) to 6 DDP ranks on 2 cores, as soon as
    the first rank beats (the others still starting or waiting at the rendezvous), or once
    all train. Bug caught: 63 of 64 processes still running 40 s after Ctrl+C (ranks that
    had not written a heartbeat were never killed; the launcher's grace was 20 s)."""
    p, out_f, _ = start_cli(tmp_path, "run", "--strategy", "ddp", "--nproc", NPROC, "--force",
                            "--steps", 10**6, "--warmup-steps", 1, "--model", "linear",
                            "--loader", "naive", "--out", out_dir, "--no-progress")
    family: dict = {}
    try:
        deadline = time.time() + 240
        while time.time() < deadline:
            _family(p.pid, family)
            beats = _beats(out_dir)
            if when == "starting" and beats:
                break
            if (when == "training" and len(beats) == NPROC
                    and all(b.state == "training" and b.step >= 2 for b in beats)):
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"no rank reached {when} in 240 s")
        sent = time.time()
        os.killpg(p.pid, signal.SIGINT)
        last_seen = sent
        while time.time() - sent < 60:
            _family(p.pid, family)
            if _alive(family.values()):
                last_seen = time.time()
            elif p.poll() is not None:
                break
            time.sleep(0.05)
        took = last_seen - sent
        print(f"{when}: {len(family)} processes, all gone {took:.1f} s after Ctrl+C")
        assert not _alive(family.values())
        assert took < ALL_GONE_S, f"ranks ran on {took:.1f} s after Ctrl+C"
        code = p.wait(timeout=60)
        job_log = out_f.read_text(errors="replace") + out_f.with_name("cli.err").read_text(
            errors="replace")
        assert code == 130, job_log[-3000:]
        recs = read_jsonl(out_dir / "results.jsonl")
        assert len(recs) == 1, [(r.get("run_id"), r.get("status"), r.get("error"), r.get("experiment")) for r in recs]
        (rec,) = recs
        assert rec["status"] == "interrupted"
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        for c in _alive(family.values()):
            c.kill()
