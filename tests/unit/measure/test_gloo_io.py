"""dist.gloo_io: gloo's socket threads found by name, set to SCHED_BATCH, and their CPU read."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from scaleprobe.config.runconfig import build, validate
from scaleprobe.core.errors import ConfigError
from scaleprobe.measure import env

ROOT = Path(__file__).resolve().parents[3]
linux = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="Linux's /proc")

# one process's gloo group: its socket thread starts in init_process_group and names itself
# once it runs (under load, after init_process_group has returned: waited for here, as the
# engine's window gate, where set_gloo_io is applied again, comes steps later); each mode in
# turn ("default" first: it leaves the threads as they are)
_GROUP = """
import os, sys, time
sys.path.insert(0, {src!r})
import torch.distributed as dist
from scaleprobe.measure.env import set_gloo_io, threads_named
store = dist.HashStore()
dist.init_process_group("gloo", store=store, rank=0, world_size=1)
deadline = time.monotonic() + 30
while not threads_named("gloo_tcp_loop") and time.monotonic() < deadline:
    time.sleep(0.01)
for mode in {modes!r}:
    print(set_gloo_io(mode),
          ",".join(str(os.sched_getscheduler(t)) for t in threads_named("gloo_tcp_loop")))
dist.destroy_process_group()
"""


def _groups(*modes: str) -> list[tuple[int, list[int]]]:
    """For each mode, set in turn in one process: (threads it set, every socket thread's
    scheduling policy after it)."""
    code = _GROUP.format(src=str(ROOT / "src"), modes=list(modes))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split() for line in out.stdout.strip().splitlines()]
    return [(int(n), [int(p) for p in policies.split(",")]) for n, policies in rows]


@linux
def test_batch_sets_every_gloo_socket_thread_and_default_none():
    (n, policies), (n_batch, batch) = _groups("default", "batch")
    assert n == 0 and os.SCHED_BATCH not in policies and policies
    assert n_batch >= 1 and len(batch) == n_batch
    assert set(batch) == {os.SCHED_BATCH}


@linux
def test_threads_are_found_by_name_and_their_cpu_grows_with_their_work():
    named, spun, stop = threading.Event(), threading.Event(), threading.Event()

    def spin() -> None:
        named.wait()
        end = time.thread_time() + 0.05  # 50 ms of this thread's own CPU
        while time.thread_time() < end:
            pass
        spun.set()
        stop.wait()

    t = threading.Thread(target=spin)
    t.start()
    try:
        tid = t.native_id
        # a name set through /proc, as gloo names its thread
        Path(f"/proc/self/task/{tid}/comm").write_text("sp_test_spin")
        assert env.threads_named("sp_test_spin") == [tid]
        before = env.threads_cpu_s([tid])
        named.set()
        assert spun.wait(60)
        assert env.threads_cpu_s([tid]) - before >= 0.045
    finally:
        stop.set()
        t.join()
    # join returns when the thread clears its id, a moment before the kernel drops its
    # /proc entry: wait for that, then an ended thread counts nothing and raises nothing
    deadline = time.monotonic() + 10
    while Path(f"/proc/self/task/{tid}").exists() and time.monotonic() < deadline:
        time.sleep(0.001)
    assert env.threads_cpu_s([tid]) == 0.0
    assert env.threads_named("no such thread name") == []


def test_batch_is_refused_where_the_system_has_no_sched_batch(monkeypatch):
    monkeypatch.delattr(os, "SCHED_BATCH", raising=False)
    with pytest.raises(ConfigError, match="leave dist.gloo_io at default"):
        env.set_gloo_io("batch")
    assert env.set_gloo_io("default") == 0  # nothing to set
    with pytest.raises(ConfigError, match="leave dist.gloo_io at default"):
        validate(build({"dist.gloo_io": "batch"}))
