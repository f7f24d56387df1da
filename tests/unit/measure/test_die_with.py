"""``measure/env.die_with``: a process asks for a signal when another process, not its parent,
ends, however it ends (a point forked from the points' server, whose caller is the sweep)."""

import os
import signal
import subprocess
import time

from scaleprobe.measure.env import die_with


def _child_waits_for_sigterm(watched: int, w: int) -> None:
    """In a forked child: ask for SIGTERM when ``watched`` ends, then say on ``w`` whether it
    came within 5 s."""
    got = []
    signal.signal(signal.SIGTERM, lambda *a: got.append(1))
    die_with(watched, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while not got and time.monotonic() < deadline:
        time.sleep(0.02)
    os.write(w, b"1" if got else b"0")


def _fork(watched: int) -> tuple[int, int]:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            _child_waits_for_sigterm(watched, w)
        finally:
            os._exit(0)
    os.close(w)
    return pid, r


def test_the_signal_comes_when_the_watched_process_is_killed():
    sleeper = subprocess.Popen(["sleep", "30"])
    pid, r = _fork(sleeper.pid)
    try:
        time.sleep(0.3)  # the child is waiting on it
        sleeper.send_signal(signal.SIGKILL)
        sleeper.wait()
        assert os.read(r, 1) == b"1"
    finally:
        os.waitpid(pid, 0)
        sleeper.kill()


def test_a_process_already_gone_sends_it_at_once():
    gone = subprocess.Popen(["true"])
    gone.wait()
    pid, r = _fork(gone.pid)
    try:
        assert os.read(r, 1) == b"1"
    finally:
        os.waitpid(pid, 0)
