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


def test_a_machines_memory_passes_are_reused_within_their_window(tmp_path, monkeypatch):
    """A sweep's short runs each paid 0.34 s (cProfile of one short run, load average 3) to measure the same host's memory again: a
    measurement stands for MEASURE_EVERY_S on this host and thread count, then the next run
    measures again; a reused one says when it was measured."""
    from scaleprobe.measure import memprobe as mp

    calls, now = [], [1000.0]
    monkeypatch.setattr(mp, "memory_passes", lambda: calls.append(now[0]) or {
        "bytes": 1, "warm_s_per_byte": 1e-10, "fresh_s_per_byte": 2e-10, "threads": 1,
        "method": "fake"})
    monkeypatch.setattr(mp.time, "time", lambda: now[0])
    first = mp.machine_memory_passes(tmp_path)
    assert first.method == "fake"
    now[0] += mp.MEASURE_EVERY_S - 1
    again = mp.machine_memory_passes(tmp_path)
    assert again.warm_s_per_byte == 1e-10 and "reused" in again.method
    now[0] += 2
    assert mp.machine_memory_passes(tmp_path).method == "fake"
    assert calls == [1000.0, 1000.0 + mp.MEASURE_EVERY_S + 1]
    (tmp_path / mp.CACHE_FILE).write_text("{torn")  # an unreadable cache: measured again
    now[0] += 1
    assert mp.machine_memory_passes(tmp_path).method == "fake" and len(calls) == 3
