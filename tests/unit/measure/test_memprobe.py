"""The host memory probe a one-rank run makes after its window (measure/memprobe.py)."""

from scaleprobe.measure.memprobe import PROBE_BYTES, memory_passes


def test_a_fresh_buffer_costs_more_than_touched_memory():
    """64 MiB is above glibc's largest mmap threshold, so every clone gets pages the process
    has never touched, and pays their first touch; an in-place pass does not (this machine,
    2026-11-26, one thread, under other jobs' load: 0.3-0.9 ns/byte in place, 1.9-3.2 into a
    clone). A probe
    that let the allocator reuse its pages would price a parameter server's copies as
    warm ones, which the validation grid measured 2-4x slower."""
    got = memory_passes()
    assert got["bytes"] == PROBE_BYTES and got["threads"] >= 1
    assert 0 < got["warm_s_per_byte"] < got["fresh_s_per_byte"] < 1e-6
