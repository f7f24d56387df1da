"""Find the largest batch size that fits: double from a start until a run runs out of memory,
then bisect between the last size that fitted and the first that did not.

The search is a small state machine with no knowledge of how a size is tried, so the sweep
runs each probe in its own process and a unit test drives it with a fake::

    search = BatchSearch(start=16, cap=4096, max_probes=12, round_to=8)
    while (size := search.next_size()) is not None:
        search.report(size, run(size))      # "ok" | "oom" | "failed"
    search.largest_fit, search.first_oom, search.probes
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class BatchSearch:
    start: int = 16  # first size tried
    cap: int = 4096  # never try beyond this
    max_probes: int = 12  # at most this many runs
    round_to: int = 8  # bisection sizes are multiples of this (when the bracket allows)
    largest_fit: int | None = None  # largest size that ran
    first_oom: int | None = None  # smallest size that ran out of memory
    failed_at: int | None = None  # a size that failed for another reason (search stops)
    data_cap: int | None = None  # the data's training samples per rank (``hold_to_data``)
    probes: list[tuple[int, str]] = field(default_factory=list)  # (size, status) in order

    def __post_init__(self) -> None:
        if self.start < 1 or self.cap < self.start:
            raise ValueError(f"bad search range {self.start}..{self.cap}")
        if self.max_probes < 1 or self.round_to < 1:
            raise ValueError("max_probes and round_to must be at least 1")

    @property
    def done(self) -> bool:
        return self.next_size() is None

    @property
    def phase(self) -> str:
        return "doubling" if self.first_oom is None else "bisecting"

    def hold_to_data(self, share: int | None) -> None:
        """Each rank's epoch holds ``share`` samples (a run's ``metrics.train_samples`` over
        its training ranks): a larger batch has no full step, so the search goes no further
        and its last doubling tries ``share`` itself."""
        if share is not None and 1 <= share < self.cap:
            self.data_cap = self.cap = share

    def report(self, size: int, status: str) -> None:
        """Record the outcome of trying ``size``: "ok", "oom", or anything else (failed)."""
        self.probes.append((size, status))
        if status == "ok":
            self.largest_fit = max(size, self.largest_fit or 0)
        elif status == "oom":
            self.first_oom = size if self.first_oom is None else min(size, self.first_oom)
        else:
            self.failed_at = size

    def next_size(self) -> int | None:
        """The next size to try, or None when the search is over."""
        if self.failed_at is not None or len(self.probes) >= self.max_probes:
            return None
        tried = {s for s, _ in self.probes}
        if self.first_oom is None:
            return self._next_doubling(tried)
        return self._next_bisection(tried, self.first_oom)

    def _next_doubling(self, tried: set[int]) -> int | None:
        if self.largest_fit is None:
            return None if self.start in tried else self.start
        if self.largest_fit >= self.cap:
            return None
        nxt = min(self.largest_fit * 2, self.cap)
        return None if nxt in tried else nxt

    def _next_bisection(self, tried: set[int], hi: int) -> int | None:
        lo = self.largest_fit or 0
        if lo == 0:  # even the start size ran out of memory: halve towards 1
            nxt = max(1, hi // 2)
            return None if nxt in tried or nxt >= hi else nxt
        mid = (lo + hi) // 2
        step = self.round_to if hi - lo > 2 * self.round_to else 1
        mid = mid - mid % step
        if mid <= lo or mid >= hi or mid in tried:
            return None
        # stop once the bracket is within one rounding step of the answer
        if hi - lo <= self.round_to and self.round_to > 1:
            return None
        return mid

    def estimate_remaining(self) -> int:
        """A rough count of the probes still to come (for a progress bar's total)."""
        if self.done:
            return 0
        if self.first_oom is None:
            cur = self.largest_fit or self.start
            doublings = 0
            while cur < self.cap:
                cur *= 2
                doublings += 1
            return min(self.max_probes - len(self.probes), doublings + 3)
        lo, hi = self.largest_fit or 0, self.first_oom
        n = 0
        while hi - lo > max(1, self.round_to):
            lo = (lo + hi) // 2
            n += 1
        return max(1, min(self.max_probes - len(self.probes), n))

    def summary(self) -> str:
        tried = ", ".join(f"{s} {st}" for s, st in self.probes)
        if self.failed_at is not None:
            return f"stopped: batch {self.failed_at} failed (not out of memory); tried {tried}"
        if self.largest_fit is None:
            return f"no batch size fitted; tried {tried}"
        if self.first_oom is None and self.largest_fit == self.data_cap:
            return (f"largest batch {self.largest_fit:,}: every sample the data holds per rank "
                    f"(no larger batch has a step; no out-of-memory up to it); tried {tried}")
        if self.first_oom is None:
            return f"largest batch {self.largest_fit} (no out-of-memory up to the cap); tried {tried}"
        return (f"largest batch that fits: {self.largest_fit} "
                f"(batch {self.first_oom} ran out of memory); tried {tried}")
