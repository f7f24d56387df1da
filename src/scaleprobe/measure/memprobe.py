"""How fast this process moves host memory, measured after a one-rank run's timed window (its
threads, its machine): what the step model (predict/stepmodel.py) prices a parameter server's
copies and local SGD's averaging with.

``warm_s_per_byte`` is one read-and-write pass over a buffer already touched,
``fresh_s_per_byte`` the same pass into a fresh buffer (every page touched for the first
time), each the median of ``repeats`` timed calls after one untimed call;
``machine_memory_passes`` caches a host's figures for ``MEASURE_EVERY_S``.
docs/COMMUNICATION.md ("Memory passes") says why 64 MiB and what the cache saves.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

from scaleprobe.core.run_metrics import MemoryPass
from scaleprobe.measure.flops import cache_dir, cache_locked, read_cache, write_cache
from scaleprobe.measure.stats import median

PROBE_BYTES = 64 << 20  # above glibc's largest mmap threshold (32 MiB): fresh pages each time
METHOD = ("host memory, one thread set as the run's: median of 3 in-place mul_ (warm) and of "
          "3 clone (fresh buffer) of 64 MiB of float32, after the timed window")
CACHE_FILE = "memory_pass.json"
MEASURE_EVERY_S = 600.0  # as the FLOPs peak's check (measure/flops.CHECK_EVERY_S)
KEYS = ("bytes", "warm_s_per_byte", "fresh_s_per_byte", "threads", "method")


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


def machine_memory_passes(folder: Path | None = None) -> MemoryPass:
    """``memory_passes`` of this host at this thread count, measured at most once every
    ``MEASURE_EVERY_S``: a run within that time of the last measurement reuses it, and its
    method says when it was measured. A cache that cannot be read or written costs a
    measurement, never the run."""
    # heavy: torch: the probe runs in a rank, which has torch loaded
    import torch

    folder = folder or cache_dir()
    key = f"{socket.gethostname()}|{torch.get_num_threads()} threads|torch {torch.__version__}"
    with cache_locked(folder):
        cached = read_cache(folder / CACHE_FILE)
        hit = cached.get(key)
        if (isinstance(hit, dict) and all(k in hit for k in KEYS)
                and 0 <= time.time() - float(hit.get("measured_at_s") or 0) < MEASURE_EVERY_S):
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(hit["measured_at_s"]))
            return MemoryPass.from_dict({
                **{k: hit[k] for k in KEYS},
                "method": f"{hit['method']}; measured {when} on this host, reused"})
        got = memory_passes()
        cached[key] = {**got, "measured_at_s": time.time()}
        write_cache(folder / CACHE_FILE, cached)
    return MemoryPass.from_dict(got)
