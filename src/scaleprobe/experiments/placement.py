"""Where co-located jobs run: all on one shared device, or each pinned to its own GPU (GPU
hosts) and its own CPU set, split as evenly as the machine allows.

A job's CPU set also sets its compute threads (cores in the set), so pinned jobs do not
oversubscribe the cores; shared jobs each start as many threads as the machine has cores."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from scaleprobe.measure.gpu import nvml_unavailable_reason, open_device


@dataclass(frozen=True)
class Place:
    """Where one job runs: its CPU set (None: unpinned), its GPU and its environment."""

    cpus: list[int] | None = None
    gpu: int = 0
    env: dict[str, str] = field(default_factory=dict)


def split_cpus(cpus: list[int], n_jobs: int) -> list[list[int]]:
    """Contiguous CPU sets of sizes differing by at most one; with more jobs than CPUs, jobs
    take one CPU each in turn, so some share."""
    if n_jobs <= len(cpus):
        size, extra = divmod(len(cpus), n_jobs)
        sets, i = [], 0
        for j in range(n_jobs):
            k = size + (j < extra)
            sets.append(cpus[i:i + k])
            i += k
        return sets
    return [[cpus[j % len(cpus)]] for j in range(n_jobs)]


def cpu_list(cpus: list[int]) -> str:
    """[0, 1, 2, 3, 6] -> '0-3,6'."""
    runs: list[list[int]] = []
    for c in sorted(cpus):
        if runs and c == runs[-1][-1] + 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def _cpu_note(sets: list[list[int]], cpus: list[int]) -> str:
    desc = "; ".join(f"job {i + 1}: CPU {cpu_list(s)}" for i, s in enumerate(sets))
    n = len(sets)
    if n > len(cpus):
        return (f"{n} jobs on {len(cpus)} CPUs, more jobs than CPUs, so some share a CPU "
                f"({desc})")
    sizes = sorted({len(s) for s in sets})
    even = "evenly" if len(sizes) == 1 else "as evenly as possible (sizes differ by one)"
    return f"{len(cpus)} CPUs split {even} over {n} jobs ({desc})"


def plan_placement(n_jobs: int, placement: str, cpus: list[int],
                   n_gpus: int) -> tuple[list[Place], str]:
    """Per job its ``Place``, and one line saying what was done."""
    if placement == "shared":
        where = "GPU 0" if n_gpus else f"the {len(cpus)} CPUs"
        return [Place() for _ in range(n_jobs)], f"shared: all {n_jobs} jobs on {where}"
    sets = split_cpus(cpus, n_jobs)
    if n_gpus:  # each job its own GPU and its own share of the CPUs (its loader and threads)

        vis = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
               if v.strip()] or [str(i) for i in range(n_gpus)]
        plan = [Place(sets[j], j % n_gpus, {"CUDA_VISIBLE_DEVICES": vis[j % n_gpus]})
                for j in range(n_jobs)]
        share = "" if n_jobs <= n_gpus else f" (more jobs than the {n_gpus} GPUs: some share)"
        desc = ", ".join(f"job {j + 1}: GPU {j % n_gpus}" for j in range(n_jobs))
        return plan, f"pinned: one GPU per job{share} ({desc}); {_cpu_note(sets, cpus)}"
    return [Place(s) for s in sets], f"pinned: {_cpu_note(sets, cpus)}"


def gpu_count() -> int:
    """GPUs this process may use, from NVML (no CUDA context is created)."""
    if nvml_unavailable_reason() is not None:
        return 0
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    try:
        import pynvml  # optional: pynvml (absent or failing without an NVIDIA driver)

        n = pynvml.nvmlDeviceGetCount()
    except Exception:  # noqa: BLE001  (no NVML: no GPU to place jobs on)
        return 0
    if vis is not None:
        return min(n, len([p for p in vis.split(",") if p.strip()]))
    return n


def gpu_sampler(plan: list[Place]) -> Callable[[], float | None]:
    """A function giving the mean utilisation (%) of the GPUs the jobs use, or None."""
    if not gpu_count():
        return lambda: None
    idx = sorted({p.gpu for p in plan})
    devices = [d for d in (open_device(i) for i in idx) if d is not None]

    def sample() -> float | None:
        vals = [u for u, _, _ in (d.sample() for d in devices) if u is not None]
        return sum(vals) / len(vals) if vals else None

    return sample
