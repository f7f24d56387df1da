"""Every threshold the diagnosis, the recommendations and ``compare`` use, in one place.

docs/REPORTS.md lists them with the rule each one drives. Change a default here and the
report, the terminal findings and the docs' examples all follow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Thresholds:
    # input-bound: the loop waits for the next batch for more than this fraction of a step
    data_wait_fraction: float = 0.10
    # input-bound at epoch starts: at least this share of the window's data wait fell on the
    # steps that took an epoch's first batch (and that first wait is above data_wait_fraction
    # of an epoch): a DataLoader prefetches nothing across an epoch boundary. On an H100,
    # resnet34 at 512 px with 1-3 steps per epoch put 95-100% of its data wait there
    epoch_start_share: float = 0.60
    # input-bound: real-data samples/s below this fraction of a synthetic-data run of the
    # same model and batch size in the same results
    real_vs_synthetic: float = 0.80
    # communication-bound: exposed communication above this fraction of a step
    comm_fraction: float = 0.20
    # straggler: the slowest rank's median step time above this multiple of the ranks' median
    straggler_ratio: float = 1.15
    # CPU saturated: average utilisation of ALL cores above this percentage
    cpu_util_pct: float = 90.0
    # compute-bound: compute (h2d + forward + backward + optimizer) at least this fraction of a step (and nothing above)
    compute_fraction: float = 0.50
    # utilisation of peak: MFU below this is "not compute-bound" (the device could do several
    # times more), at or above it the step is bound by the device's arithmetic. Published
    # well-tuned dense training sits at 40-55% MFU (PaLM 46%, Megatron-LM GPT 40-50%); on this
    # repository's 2-core CPU resnet18 at 32 px reached 55% of the measured matmul peak
    # (docs/BENCHMARKS.md), so 30% leaves room for convolutions being slower than a matmul
    mfu_compute_bound: float = 0.30
    # memory headroom: device peak above this fraction of the GPU's memory is "tight"...
    memory_tight_fraction: float = 0.90
    # ...and below this fraction leaves room for a larger batch
    memory_room_fraction: float = 0.50
    # loader settings: compute (h2d + forward + backward + optimizer) per step grew by more than this factor while the
    # data wait fell (loader workers and compute threads sharing the cores)
    compute_growth: float = 1.15
    # loader recommendation: the fewest workers within this fraction of the best samples/s
    workers_within: float = 0.05
    # scaling: a point below this efficiency gets a finding on what the gap was lost to
    scale_efficiency: float = 0.80
    # compare: "no change" only when the interval of samples/s B / A lies within +/- this
    compare_floor_rel: float = 0.02
    # a share of a step smaller than this is left out of "lost to" lines
    minor_fraction: float = 0.01
    # co-location: every job within this slowdown (alone / together samples/s) = no interference
    colocate_slowdown: float = 1.10
    # co-location: machine-wide CPU use while together at or above this = CPU saturated
    colocate_cpu_pct: float = 90.0
    # co-location: GPU utilisation while together at or above this = device contention
    colocate_gpu_pct: float = 90.0
    # measured under load: processes outside the run's own tree kept more than
    # max(load_cores, load_machine_fraction x the machine's cores) busy on average during the
    # timed window. Why: process-to-process noise measured on a 2-core machine is 10-18%
    # (docs/DESIGN.md, 2026-11-22); 0.25 cores of outside work is 12.5% of such a machine,
    # enough on its own to make a difference of that size, and on larger machines 10% of the
    # cores is the low end of the same noise. Any compute process of another program on the
    # run's GPU is load too (NVML cannot say how much of the device it took).
    load_cores: float = 0.25
    load_machine_fraction: float = 0.10
    # memory taken afresh every step: more minor page faults a timed step than this (1 MiB
    # of 4 KiB pages). Six one-rank digits_cnn runs with glibc's own thresholds took
    # 1,338-5,839 a step and stepped in 29.9-39.5 ms; with fixed ones (train.malloc=steady)
    # 11-42 and 27.3-29.5 ms (docs/REPORTS.md)
    refaults_per_step: float = 256.0
    # gloo's socket thread busy: its CPU a timed step above this share of the median step.
    # With gloo's default, 2-rank CPU runs measured 5-12% (digits_cnn DDP to gpt_tiny FSDP);
    # with dist.gloo_io=batch 1-3% where the data moved is small (docs/COMMUNICATION.md)
    gloo_io_step_share: float = 0.05

    def load_limit_cores(self, machine_cores: int | None) -> float:
        """Mean cores that outside processes may keep busy before a run is under load."""
        return max(self.load_cores, self.load_machine_fraction * (machine_cores or 0))

    def under_load(self, outside_cores: float | None, machine_cores: int | None,
                   gpu_processes: list[dict[str, Any]] | None = None) -> tuple[bool | None, str]:
        """(flag, reason): was the run measured while other processes used the machine?
        The flag is None when neither the CPU nor the GPU figure was measured."""
        limit = self.load_limit_cores(machine_cores)
        gpu = [g for g in gpu_processes or [] if isinstance(g, dict)]
        parts = []
        if outside_cores is not None:
            parts.append(f"processes outside the run used {outside_cores:.2f} cores on average "
                         f"(of {machine_cores or '?'}; limit {limit:.2f})")
        if gpu:
            who = ", ".join(f"{g.get('name') or 'pid'} {g.get('pid')} on GPU {g.get('device')}"
                            for g in gpu[:4])
            parts.append(f"{len(gpu)} other compute process(es) on the run's GPU: {who}")
        if outside_cores is None and gpu_processes is None:
            return None, "not measured"
        flag = bool(gpu) or (outside_cores is not None and outside_cores > limit)
        return flag, "; ".join(parts)


DEFAULT = Thresholds()
