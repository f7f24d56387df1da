"""Concrete recommendations, with numbers taken from the run they are about.

Each function returns one sentence (or a few joined by '; ') naming the option to change and
the value to try, so a finding reads as something to do next, not a general hint.
"""

from __future__ import annotations

from typing import Any

from scaleprobe.core import fmt
from scaleprobe.core.result_model import RunResult, dict_of, num
from scaleprobe.core.traits import known


def cores(rec: RunResult) -> int | None:
    c = rec.env_number("cores")
    return int(c) if c else None


def local_procs(rec: RunResult) -> int:
    n = rec.env_number("local_world_size") or rec.cfg_number("dist.nproc") or 1
    return max(1, int(n))


def compute_threads(rec: RunResult) -> int | None:
    t = rec.env_number("threads")
    return int(t) if t else None


def on_gpu(rec: RunResult) -> bool:
    return rec.metrics.peak_mem_bytes.device_peak() is not None or bool(rec.env.get("gpus"))


def cpu_demand(rec: RunResult) -> tuple[int | None, str]:
    """Busy threads on this host: compute threads (one driving thread per process when the
    model runs on a GPU: torch's CPU thread pool then idles) + loader workers, and the sum
    written out."""
    threads, workers, n = compute_threads(rec), rec.loader_workers or 0, local_procs(rec)
    if threads is None:
        return None, ""
    if rec.metrics.peak_mem_bytes.device_peak() is not None:
        threads, kind = 1, "driving thread"
    else:
        kind = "compute thread(s)"
    total = n * (threads + workers)
    per = f"{threads} {kind} + {workers} loader worker(s)"
    text = per if n == 1 else f"{n} processes x ({per})"
    return total, f"{text} = {total}"


def epoch_starts(rec: RunResult) -> str:
    """What to change when the wait comes at each epoch's first batch."""
    spe = rec.metrics.steps_per_epoch
    few = f" ({int(spe)} now)" if spe else ""
    return ("a DataLoader prefetches nothing across an epoch boundary: each epoch's first "
            "batch is built from scratch, by one worker alone, while the device waits, so "
            "more workers do not shorten it; compare settings by epoch time, not samples/s; "
            f"more steps per epoch{few} (more samples, or a smaller batch) spread that wait "
            "over more steps, and a cheaper sample shortens it")


def input_bound(rec: RunResult) -> str:
    """What to change when the loop waits for data: workers, prefetch, cheaper samples."""
    c, n = cores(rec), local_procs(rec)
    per_proc = max(1, c // n) if c else None
    workers, prefetch = rec.loader_workers or 0, int(rec.cfg_number("data.prefetch") or 2)
    if rec.cfg("data.dataset") == "script":  # the user's own DataLoader: its arguments
        return _script_input_bound(c, n, per_proc, workers)
    tips = []
    if per_proc is not None and workers + 1 < per_proc:
        target = min(per_proc - 1, max(workers * 2, workers + 1))
        loader = " --loader pipelined" if workers == 0 else ""
        tips.append(f"raise loader workers from {workers} to {target}{loader} --workers {target}"
                    f" --prefetch {max(prefetch, 4)} ({c} cores, {n} training process(es);"
                    " keep workers + 1 per process within the cores)")
    elif per_proc is not None:
        tips.append(f"more loader workers would share the {c} cores with compute ({workers} "
                    f"worker(s) + 1 training process per rank already fill them), so make each "
                    "sample cheaper instead")
    else:
        tips.append(f"raise --workers (now {workers}) and --prefetch (now {prefetch}) while the "
                    "cores allow")
    if rec.cfg("data.transform") == "heavy":
        size = rec.cfg_number("data.image_size")
        sized = f" ({size}x{size})" if size else ""
        tips.append("move augmentation off the hot path: pre-resize the dataset once to the "
                    f"training size{sized} and keep only crop/flip per sample, or measure the "
                    "ceiling with --transform light")
    tips.append("check that more workers do not slow compute: sweep workers = [0, 1, 2] and "
                "compare forward+backward per step, not only the data wait")
    return "; ".join(tips)


def _script_input_bound(c: int | None, n: int, per_proc: int | None, workers: int) -> str:
    """The input-bound advice for a script under ``wrap``: its DataLoader's own arguments
    (scaleprobe's --workers and --loader do not reach a script)."""
    if per_proc is not None and workers + 1 < per_proc:
        target = min(per_proc - 1, max(workers * 2, workers + 1))
        tip = (f"in your script, raise the DataLoader's num_workers from {workers} to {target} "
               f"(with persistent_workers=True, prefetch_factor=4; {c} cores, {n} training "
               "process(es): keep workers + 1 per process within the cores)")
    elif per_proc is not None:
        tip = (f"more DataLoader workers would share the {c} cores with compute ({workers} "
               "worker(s) + 1 training process per rank already fill them), so make each "
               "sample cheaper in your dataset's __getitem__ or transforms")
    else:
        tip = f"raise the DataLoader's num_workers (now {workers}) while the cores allow"
    return (f"{tip}; check that more workers do not slow compute: sweep your script's own "
            "flag for them (a sweep spec with args = [...], docs/WRAP.md) and compare "
            "forward+backward per step, not only the data wait")


def short_ms(v_s: Any) -> str:
    """'0.31 ms' below a millisecond (a small all_reduce), else report.fmt.duration."""
    v = num(v_s)
    return f"{v * 1000:.2f} ms" if v is not None and abs(v) < 1e-3 else fmt.duration(v)


def comm_dominant(rec: RunResult) -> str | None:
    """"transfer" or "sync_overhead" when the result splits its exposed communication."""
    return rec.comm.dominant() if rec.comm is not None else None


def sync_words(rec: RunResult) -> tuple[str, str]:
    """(what one synchronisation moves, what its overhead is made of) for the run's strategy:
    DDP's gradient buckets, or FSDP's per-unit gathers of parameters and scatters of
    gradients."""
    tr = known(rec.cfg("dist.strategy"))
    if tr is not None and tr.shards_state:
        return ("parameters and gradients", "one collective per unit and its latency, buffer "
                "copies, waiting for the slowest rank")
    return "gradients", "gradient hooks, bucket copies, waiting for the slowest rank"


def unsplit(parts: str) -> str:
    """How sync overhead's parts are named: as what it may hold, never as a measured split
    (no part is timed apart; bug caught: a 14x overhead "attributed" to hooks, bucket copies
    and waiting beside a straggler line of 1.00x)."""
    return f"not split further: its parts are not measured apart; it may hold {parts}"


def comm_bound(rec: RunResult) -> str:
    """What to change when exposed communication is large. Links and bucket sizes only when
    transfer dominates; when sync overhead dominates, say that the network is not the cost."""
    tips = []
    bd = rec.metrics.breakdown_s
    comm, total = bd.comm, bd.measured_total_s()
    batch = rec.batch_size
    if comm and total and batch and total > comm:
        share = comm / (comm + 2 * (total - comm))
        tips.append(f"doubling the per-device batch to {2 * batch} would cut the communication "
                    f"share to about {fmt.pct(share)} (compute doubles, the gradients stay the "
                    "same size)")
    kind = comm_dominant(rec)
    if kind == "sync_overhead":
        transfer = rec.comm.transfer_s if rec.comm is not None else None
        overhead = rec.comm.sync_overhead_s if rec.comm is not None else None
        moved, parts = sync_words(rec)
        tips.insert(0, f"the cost is not the network: moving the {moved} takes "
                       f"{short_ms(transfer)} of the {short_ms((transfer or 0) + (overhead or 0))}"
                       f" exposed, so a faster link or other bucket sizes cannot win more than "
                       f"that; the other {short_ms(overhead)} is synchronisation overhead "
                       f"({unsplit(parts)})")
        tips.append("look for a straggler or for compute threads competing with the "
                    "communication threads (threads per process = cores / processes), or "
                    "synchronise less often (--strategy localsgd --average-every 4)")
        return "; ".join(tips)
    if kind is None:
        tips.append("this result does not split the exposed time into transfer and sync "
                    "overhead; rerun with this version of scaleprobe to see whether the "
                    "network is the cost before changing links or bucket sizes")
        return "; ".join(tips)
    tr = known(rec.cfg("dist.strategy"))
    if tr is not None and tr.bucketed:
        cap = float(rec.cfg_number("dist.bucket_cap_mb") or 25.0)
        tips.append(f"try DDP bucket sizes --bucket-cap-mb {cap * 2:g} and {cap / 2:g} "
                    f"(now {cap:g}) and keep the faster: larger buckets send fewer messages, "
                    "smaller ones start overlapping with backward earlier")
        tips.append("or average less often: --strategy localsgd --average-every 4")
    tips.append(network(rec) or "measure the link with `scaleprobe comm` and ask "
                "`scaleprobe predict` which bandwidth the target efficiency needs")
    return "; ".join(tips)


def network(rec: RunResult) -> str | None:
    pred = dict_of(rec.comm.prediction if rec.comm is not None else None)
    needed = num(pred.get("needed_gbit_s"))
    if needed is None:
        return None
    target = num(pred.get("target_efficiency")) or 0.9
    have = num(pred.get("bandwidth_gbit_s"))
    link = pred.get("link")
    now = f"; the link modelled here is {have:.1f} Gbit/s ({link})" if have else ""
    return (f"the network model needs at least {needed:.1f} Gbit/s for {target:.0%} scaling "
            f"efficiency{now}")


def compute_bound(rec: RunResult) -> str:
    batch = rec.batch_size
    if on_gpu(rec):
        tips = ["mixed precision (--amp bf16)", "channels_last for conv nets (--channels-last)"]
        if batch:
            tips.append(f"a larger batch than {batch} while device memory allows")
        return "faster compute is the lever: " + ", ".join(tips)
    return ("training runs on the CPU's cores: a GPU, --amp bf16 on CPUs with bf16 support, or "
            "a smaller model; the input pipeline and communication are not the limit")


def below_peak(rec: RunResult) -> str:
    """What to try when the model's FLOPs use little of the device's peak."""
    if on_gpu(rec):
        return ("feed the device more work per launch: a larger batch, --amp bf16, "
                "--channels-last for conv nets; input or communication first if they lead")
    return ("a larger batch or image gives the cores larger products; the input pipeline or "
            "communication first where they lead")


def cpu_saturated(rec: RunResult, oversubscribed: bool, gpu: bool) -> str:
    c, n = cores(rec), local_procs(rec)
    workers, threads = rec.loader_workers or 0, compute_threads(rec)
    tips = []
    if oversubscribed and c:
        fit_threads = max(1, c // n - workers)
        tips.append(f"keep compute threads + loader workers within the {c} cores: "
                    f"{fit_threads} compute thread(s) per process with {workers} worker(s), or "
                    f"fewer workers (now {workers}, {threads} threads)")
    if gpu:
        tips.append("the GPU waits on the CPU: pre-resize images, lighten per-sample "
                    "transforms, or move augmentation onto the GPU")
    else:
        tips.append("training runs on the CPU, so compute is expected to fill the cores; "
                    "compare forward+backward per step across loader settings to see whether "
                    "loader workers take cores from compute")
    return "; ".join(tips)


def straggler(rec: RunResult, slow_rank: Any) -> str:
    host = next((r.host for r in rec.ranks if r.rank == slow_rank), None)
    where = f" on {host}" if host else ""
    return (f"look at what else runs next to rank {slow_rank}{where} (other jobs, thermal "
            "throttling, a slower device); on one host give each process its own cores "
            "(taskset) and set threads per process = cores / processes")


def oom(rec: RunResult) -> str:
    batch = rec.batch_size
    half = f"halve the batch ({batch} -> {max(1, batch // 2)}), " if batch else ""
    return (f"{half}or use --amp bf16; `scaleprobe sweep` with batch_size = \"auto\" finds the "
            "largest batch that fits")
