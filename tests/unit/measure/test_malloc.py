"""train.malloc=steady: glibc keeps what a step frees for the next, and the run counts the
page faults of its timed window."""

from __future__ import annotations

import mmap
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from scaleprobe.config.runconfig import build, validate
from scaleprobe.core.errors import ConfigError
from scaleprobe.measure import env

ROOT = Path(__file__).resolve().parents[3]

# a step's pattern glibc's own thresholds give back to the system: one 3 MiB block freed
# raises the mmap threshold to 3 MiB and the trim threshold to 6; three 2.9 MiB blocks then
# come from the heap and, freed together, leave 8.7 MiB at its top, above 6: trimmed, and
# faulted in again next time
_STEPS = """
import resource, sys
sys.path.insert(0, {src!r})
from scaleprobe.measure.env import minor_faults, set_malloc
set_malloc({mode!r})
n = int(2.9 * (1 << 20))
def step():
    bufs = [bytearray(b"x") * n for _ in range(3)]
    del bufs
for _ in range(5):
    step()
f0 = minor_faults()
for _ in range(20):
    step()
print((minor_faults() - f0) / 20)
"""


def _faults_per_step(mode: str) -> float:
    code = _STEPS.format(src=str(ROOT / "src"), mode=mode)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    return float(out.stdout.strip())


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's allocator")
def test_steady_keeps_freed_memory_that_glibcs_own_thresholds_give_back():
    pages = 3 * 2.9 * (1 << 20) / 4096
    default = _faults_per_step("default")
    steady = _faults_per_step("steady")
    assert default > 0.5 * pages, default  # trimmed and faulted in again every step
    assert steady < 0.02 * pages, steady


def test_minor_faults_counts_pages_touched_afresh():
    with mmap.mmap(-1, 8 << 20) as fresh:  # 2,048 pages of 4 KiB the process never had
        before = env.minor_faults()
        for at in range(0, len(fresh), 4096):
            fresh[at] = 1
        assert env.minor_faults() - before >= 1000


def test_steady_is_refused_where_glibc_does_not_allocate(monkeypatch):
    monkeypatch.setattr(platform, "libc_ver", lambda *a, **k: ("", ""))
    with pytest.raises(ConfigError, match="train.malloc=steady sets glibc's allocator"):
        env.set_malloc("steady")
    env.set_malloc("default")  # nothing to set
    with pytest.raises(ConfigError, match="leave train.malloc at default"):
        validate(build({"train.malloc": "steady"}))
