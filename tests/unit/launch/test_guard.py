"""The job's guard (launch/guard.py): when the launcher ends, however it ends, every process
the ranks left in their process groups is ended."""

import os
import struct
import subprocess
import time

import psutil

from scaleprobe.launch import _guarded
from scaleprobe.measure.heartbeat import STATES, beat_dir


def test_the_guard_ends_a_ranks_group_once_the_launcher_is_gone(tmp_path):
    """A rank (it leads its process group) that started a child of its own, as a wrapped
    script's torch.multiprocessing.spawn or its resource tracker do. Bug caught: when the
    launcher was killed, the children ran on, reparented to init. Closing the pipe is what
    the launcher's death does (SIGKILL included)."""
    before = subprocess.Popen(["sleep", "60"], start_new_session=True)  # not the job's
    try:
        with _guarded(str(tmp_path)) as guard:
            assert guard is not None and psutil.pid_exists(guard)
            rank = subprocess.Popen(["sh", "-c", "sleep 60 & exec sleep 61"],
                                    start_new_session=True)
            deadline = time.time() + 10
            while not [p for p in psutil.process_iter(["pid"]) if _group(p.pid) == rank.pid
                       and p.pid != rank.pid] and time.time() < deadline:
                time.sleep(0.05)
            child = next(p for p in psutil.process_iter(["pid"])
                         if _group(p.pid) == rank.pid and p.pid != rank.pid)
            beat_dir(tmp_path).mkdir(parents=True)
            (beat_dir(tmp_path) / "rank-0.hb").write_bytes(struct.pack(
                "<9d", 0, rank.pid, STATES.index("training"), 3, 0, 1, 0, 0, 0))
            assert rank.poll() is None
        assert rank.wait(timeout=10) == -9
        child.wait(timeout=10)  # gone (psutil.TimeoutExpired otherwise)
        assert not psutil.pid_exists(guard) or psutil.Process(guard).status() == "zombie"
        assert before.poll() is None  # a group that is not a rank's is left alone
    finally:
        before.kill()


def _group(pid):
    try:
        return os.getpgid(pid)
    except OSError:
        return None
