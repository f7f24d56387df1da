"""The batch-size search, driven by a fake runner: sizes up to a limit fit, larger ones run
out of memory."""

import pytest

from scaleprobe.experiments.batch_search import BatchSearch


def drive(search, fits_up_to, fail_at=None):
    while (size := search.next_size()) is not None:
        if size == fail_at:
            status = "failed"
        else:
            status = "ok" if size <= fits_up_to else "oom"
        search.report(size, status)
    return [s for s, _ in search.probes]


def test_doubles_then_bisects_to_within_the_rounding_step():
    s = BatchSearch(start=16, cap=4096, max_probes=12, round_to=8)
    tried = drive(s, fits_up_to=100)
    assert tried[:4] == [16, 32, 64, 128]  # doubling until out of memory
    assert s.first_oom == 104 and s.largest_fit == 96  # 96 fits, 104 does not: within 8
    assert all(t % 8 == 0 for t in tried)
    assert len(tried) <= 12 and len(set(tried)) == len(tried)
    assert "largest batch that fits: 96" in s.summary()


def test_exact_answer_with_round_to_one():
    s = BatchSearch(start=16, cap=4096, max_probes=20, round_to=1)
    drive(s, fits_up_to=100)
    assert (s.largest_fit, s.first_oom) == (100, 101)


def test_cap_is_tried_and_never_exceeded():
    s = BatchSearch(start=16, cap=100, max_probes=12)
    tried = drive(s, fits_up_to=10_000)
    assert tried == [16, 32, 64, 100] and s.first_oom is None and s.largest_fit == 100
    assert "no out-of-memory up to the cap" in s.summary()


def test_start_that_does_not_fit_halves_down():
    s = BatchSearch(start=16, cap=1024, max_probes=12)
    tried = drive(s, fits_up_to=5)
    assert tried[:3] == [16, 8, 4] and s.largest_fit == 4 and s.first_oom == 8


def test_nothing_fits():
    s = BatchSearch(start=4, cap=64, max_probes=12)
    drive(s, fits_up_to=0)
    assert s.largest_fit is None and s.probes[-1] == (1, "oom")
    assert "no batch size fitted" in s.summary()


def test_probe_budget_bounds_the_search():
    s = BatchSearch(start=1, cap=1 << 20, max_probes=5, round_to=1)
    tried = drive(s, fits_up_to=1000)
    assert len(tried) == 5 and s.next_size() is None


def test_a_failure_that_is_not_oom_stops_the_search():
    s = BatchSearch(start=16, cap=4096)
    tried = drive(s, fits_up_to=1000, fail_at=64)
    assert tried == [16, 32, 64] and s.failed_at == 64 and s.largest_fit == 32
    assert "not out of memory" in s.summary()


def test_the_data_per_rank_ends_the_doubling_at_its_size():
    """Bug: a search on the digits (1,438 training samples) doubled to 2,048, which failed
    (no full batch in an epoch), and the sweep said "stopped: batch 2048 failed (not out of
    memory)". A run's data size now caps it: the last doubling tries every sample."""
    s = BatchSearch(start=16, cap=4096)
    while (size := s.next_size()) is not None:
        s.report(size, "ok")
        s.hold_to_data(1438)
    assert [t for t, _ in s.probes] == [16, 32, 64, 128, 256, 512, 1024, 1438]
    assert s.largest_fit == 1438 and s.failed_at is None
    assert s.summary().startswith("largest batch 1,438: every sample the data holds per rank")


def test_out_of_memory_under_the_data_size_still_bisects():
    s = BatchSearch(start=16, cap=4096, max_probes=20, round_to=8)
    while (size := s.next_size()) is not None:
        s.report(size, "ok" if size <= 700 else "oom")
        s.hold_to_data(1438)
    assert (s.largest_fit, s.first_oom) == (696, 704)
    assert "largest batch that fits: 696" in s.summary()


def test_a_data_size_over_the_cap_changes_nothing():
    s = BatchSearch(start=16, cap=100)
    s.hold_to_data(5000)
    s.hold_to_data(None)
    assert s.cap == 100 and s.data_cap is None


def test_estimate_is_positive_until_done():
    s = BatchSearch(start=16, cap=4096)
    assert s.estimate_remaining() >= 1
    drive(s, fits_up_to=300)
    assert s.estimate_remaining() == 0


@pytest.mark.parametrize("kw", [{"start": 0}, {"start": 64, "cap": 32}, {"max_probes": 0}])
def test_bad_ranges_are_rejected(kw):
    with pytest.raises(ValueError):
        BatchSearch(**kw)
