"""Findings on how a run's processes behaved beneath the training: glibc's allocator
giving memory back and faulting it in again every step, and gloo's socket threads polling
on the cores the ranks compute on. Each names the setting that measures without it."""

from __future__ import annotations

from scaleprobe.config.sections import GLOO_IO_THREAD, STEADY_MALLOC_ENV
from scaleprobe.core.result_model import RunResult
from scaleprobe.core.thresholds import Thresholds
from scaleprobe.report.findings.finding import Finding


def refaults(rec: RunResult, th: Thresholds) -> Finding | None:
    """Memory taken afresh every step (``page_faults_per_step``): with glibc's own thresholds
    (``train.malloc=default``) how much a step re-faults is drawn anew in each process, and
    so is part of its step time."""
    n = rec.metrics.page_faults_per_step
    if n is None or n <= th.refaults_per_step:
        return None
    steady = rec.cfg("train.malloc") == "steady"
    ev = (f"{n:,.0f} page faults a timed step: memory the step touched afresh"
          + ("" if steady else ", most often what glibc's allocator gave back to the system "
             "and took again"))
    if steady:
        return Finding("memory taken afresh every step", ev,
                       "with the allocator's thresholds fixed, this is memory the step itself "
                       "allocates anew (e.g. tensors above 32 MiB)", "info")
    fix = (f"run the script with {STEADY_MALLOC_ENV} in its environment (glibc's thresholds "
           "fixed)" if rec.cfg("script.path") else "measure with --set train.malloc=steady; "
           f"in your own training, {STEADY_MALLOC_ENV} do the same")
    return Finding("memory taken afresh every step", ev,
                   fix + ". How many faults a fresh process takes varies, and its step with "
                   "them: one-rank digits_cnn stepped in 29.9-39.5 ms over six fresh processes, "
                   "27.3-29.5 with the thresholds fixed (docs/REPORTS.md)", "warning")


GLOO_IO_VERDICT = "gloo's socket thread busy"
# what dist.gloo_io=batch did, measured side by side (benchmarks/gloo_io_spin.py train)
GLOO_IO_MEASURED = ("Side by side on 2 CPU ranks, three runs each way: FSDP of gpt_tiny stepped "
                    "in 30.3-40.7 ms with them at SCHED_BATCH, 42.2-44.5 ms without; DDP of "
                    "resnet18 in 158.9-167.7 against 175.7-178.6 ms")


def gloo_io(rec: RunResult, th: Thresholds) -> Finding | None:
    """gloo's socket thread busy (``gloo_io_cpu_per_step_s``): CPU it takes from the cores
    the ranks compute on, much of it, with gloo's default, polling a socket whose receive is
    not posted yet (docs/COMMUNICATION.md, "gloo's socket thread")."""
    cpu, step = rec.metrics.gloo_io_cpu_per_step_s, rec.step_median_s
    if cpu is None or not step or cpu <= th.gloo_io_step_share * step:
        return None
    ev = (f"gloo's socket threads used {cpu * 1e3:.2f} ms of CPU a timed step, "
          f"{cpu / step:.0%} of the median step, on the cores the ranks compute on")
    if rec.cfg("dist.gloo_io") == "batch":
        return Finding(GLOO_IO_VERDICT, ev, "with them at SCHED_BATCH this is mostly "
                       "reading the sockets: the data the step moves", "info")
    fix = ("run it under wrap with --gloo-io batch, or in the script set each "
           f"thread named {GLOO_IO_THREAD} (/proc/self/task/*/comm) to SCHED_BATCH after "
           "init_process_group" if rec.cfg("script.path") else
           "measure with --gloo-io batch; in your own training, set each thread "
           f"named {GLOO_IO_THREAD} (/proc/self/task/*/comm) to SCHED_BATCH after "
           "init_process_group")
    return Finding(GLOO_IO_VERDICT, ev, fix + ". The thread polls a socket whose message "
                   "came before its receive was posted; when it has taken the core from the "
                   "thread about to post it, both wait for the kernel's next tick. "
                   f"{GLOO_IO_MEASURED} (docs/COMMUNICATION.md)", "warning")
