"""How fast this process moves host memory, measured after a one-rank run's timed window (its
threads, its machine): what the step model (comm/stepmodel.py) prices a parameter server's
copies and local SGD's averaging with.

    warm_s_per_byte    one read-and-write pass over a buffer already touched (``mul_`` in
                       place): a copy into memory the process holds
    fresh_s_per_byte   the same pass into a buffer allocated for it (``clone``): every page
                       touched for the first time. A large allocation is returned to the
                       system when freed (glibc maps anything over 32 MiB), so a step that
                       allocates its copies pays this every time; measured at 64 MiB for
                       that reason

Each the median of ``repeats`` timed calls after one untimed call.
"""

from __future__ import annotations

import time
from typing import Any

from scaleprobe.measure.stats import median

PROBE_BYTES = 64 << 20  # above glibc's largest mmap threshold (32 MiB): fresh pages each time
METHOD = ("host memory, one thread set as the run's: median of 3 in-place mul_ (warm) and of "
          "3 clone (fresh buffer) of 64 MiB of float32, after the timed window")


def memory_passes(nbytes: int = PROBE_BYTES, repeats: int = 3) -> dict[str, Any]:
    # heavy: torch: the probe runs in a rank, which has torch loaded
    import torch  # the probe runs in a rank, beside the training it follows

    a = torch.ones(nbytes // 4)

    def timed(fn: Any) -> float:
        fn()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return median(times)

    warm = timed(lambda: a.mul_(1.0))
    fresh = timed(lambda: a.clone())
    return {"bytes": nbytes, "warm_s_per_byte": warm / nbytes,
            "fresh_s_per_byte": fresh / nbytes, "threads": torch.get_num_threads(),
            "method": METHOD}
