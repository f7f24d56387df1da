"""``scaleprobe comm``: benchmark collectives between N processes, like nccl-tests.

    scaleprobe comm --nproc 2
    scaleprobe comm --nproc 2 --ops all_reduce,ps_push_pull --sizes 1K,1M,16M,256M --iters 20
    scaleprobe comm --nproc 1 --nnodes 2 --node-rank 0 --rdzv-endpoint 10.0.0.1:29500  (host 0)
    scaleprobe comm --nproc 1 --nnodes 2 --node-rank 1 --rdzv-endpoint 10.0.0.1:29500  (host 1)

Prints time, algorithm bandwidth and bus bandwidth per operation and message size, and a fit
``time = alpha + beta * bytes`` per operation. Host 0 appends one ``kind: "comm"`` record to
``OUT/results.jsonl``; ``scaleprobe predict --link OUT/results.jsonl`` uses its all_reduce fit.
Several hosts: set GLOO_SOCKET_IFNAME (gloo) or NCCL_SOCKET_IFNAME to the interface to use.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from pathlib import Path
from typing import Any

from scaleprobe.core.errors import ConfigError, ScaleprobeError
from scaleprobe.core.experiment_records import CommBenchRecord
from scaleprobe.core.result_model import Experiment
from scaleprobe.core.results import RESULTS_FILE, append_jsonl, utc_now
from scaleprobe.core.thresholds import DEFAULT
from scaleprobe.experiments.executor import (
    SlurmProcessSet,
    add_executor_options,
    from_args,
    job_nodes,
    launcher_env,
)
from scaleprobe.features.links import MMAP_BYTES
from scaleprobe.launch import Job, fresh_launcher, run_workers
from scaleprobe.launch.failures import WorkerFailure
from scaleprobe.measure.comm.bench import (
    DEFAULT_OPS,
    DEFAULT_SIZES,
    OPS,
    bench_worker,
    busbw_factor,
    parse_ops,
    parse_sizes,
)
from scaleprobe.measure.env import collect_env
from scaleprobe.measure.monitor import Monitor
from scaleprobe.measure.outside import result_fields

NAME = "comm"
LOAD_INTERVAL_S = 0.25  # the monitor's samples while the benchmark runs
HELP = "benchmark collectives (all_reduce, broadcast, ...) and fit latency + bandwidth"


class BenchmarkFailed(ScaleprobeError):
    """A worker of the benchmark failed (a lost host, a timeout): one line, exit code 1."""

    exit_code = 1


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nproc", "--nproc-per-node", "--nproc_per_node", type=int, default=2,
                   help="processes on this host (default 2)")
    p.add_argument("--ops", default=",".join(DEFAULT_OPS),
                   help=f"comma list of {', '.join(OPS)} (default {','.join(DEFAULT_OPS)})")
    p.add_argument("--sizes", default=DEFAULT_SIZES,
                   help=f"message sizes, powers of 1024 (default {DEFAULT_SIZES})")
    p.add_argument("--iters", type=int, default=20,
                   help="timed iterations per point (fewer for big messages; default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed iterations per point")
    p.add_argument("--backend", choices=("gloo", "nccl"), default=None,
                   help="default: nccl on CUDA, gloo on CPU")
    p.add_argument("--timeout", type=float, default=120.0, help="collective timeout in seconds")
    p.add_argument("--out", default="scaleprobe-out", help="results folder")
    p.add_argument("--nnodes", type=int, default=1, help="hosts")
    p.add_argument("--node-rank", type=int, default=0, help="this host's index (0 = rendezvous)")
    p.add_argument("--rdzv-endpoint", default=None, help="HOST:PORT of host 0 (several hosts)")
    p.add_argument("--gloo-io", choices=("default", "batch"), default="default",
                   help="gloo's socket threads, as a run's --gloo-io sets them: "
                        "measure the link the way the runs it prices will use it")

    add_executor_options(p)
    for a in p._actions:
        if a.dest == "executor":
            a.help = ("local: the ranks here (default); slurm: one Slurm job of --nnodes nodes, "
                      "so the fit is the cluster's own network (docs/CLUSTER.md)")


def _validate(args: argparse.Namespace, slurm: bool = False) -> None:
    if slurm and (args.rdzv_endpoint or args.node_rank):
        raise ConfigError("--executor slurm places the hosts itself (one job of --nnodes "
                          "nodes): leave out --rdzv-endpoint and --node-rank")
    if args.nproc < 1 or args.nnodes < 1:
        raise ConfigError("--nproc and --nnodes must be at least 1")
    if args.nproc * args.nnodes < 2:
        raise ConfigError("the communication benchmark needs at least 2 processes (--nproc 2)")
    if args.iters < 1 or args.warmup < 0:
        raise ConfigError("--iters must be at least 1 and --warmup at least 0")
    if not 0 <= args.node_rank < args.nnodes:
        raise ConfigError(f"--node-rank {args.node_rank} is outside 0..{args.nnodes - 1}")
    if args.nnodes > 1 and not args.rdzv_endpoint and not slurm:
        raise ConfigError("several hosts need --rdzv-endpoint HOST:PORT (or --executor slurm)")
    if args.timeout <= 0:
        raise ConfigError("--timeout must be positive")


# the quantile of a CPU row's timed calls its fit takes (rows timed on the CPU keep them all:
# ``times_s``, ``after_compute_times_s``). gloo's small calls there are bimodal (0.2-0.8 ms or
# 2-6 ms at 256 KiB, docs/COMMUNICATION.md) and a training step meets the fast mode more
# often than calls after a barrier do: the median of 10 calls fell in either mode from one
# comm run to the next (gpt_tiny's FSDP over 1 Gbit predicted 1.06 and 1.43 of its measured
# step in two grids). Fitted from the lower quartile of the same calls, two grids' mean error
# went from 10.5% to 7.1% and from 17.1% to 11.4%, p90 from 27.0% to 12.9% and from 41.0%
# to 23.9%; a third grid came out alike either way, 7.2% and 6.8% (2026-11-29,
# docs/COMMUNICATION.md "The lower quartile")
FIT_QUANTILE = 0.25
# With gloo's socket threads at SCHED_BATCH (``--gloo-io batch``) the calls come out in one
# mode, and their median does as well as the quartile or better: the two quiet grids of
# 2026-11-29 measured that way predicted a mean 3.9% and 3.5% off fitted from the quartile,
# 3.3% and 3.3% from the median (p90 8.8/7.4% and 7.7/7.2%; docs/COMMUNICATION.md)
FIT_QUANTILE_BATCH = 0.5


def fit_quantile(gloo_io: str | None) -> float:
    """The quantile of a CPU row's calls its fit takes, for a benchmark run with ``gloo_io``."""
    return FIT_QUANTILE_BATCH if gloo_io == "batch" else FIT_QUANTILE


def fit_times(rows: list[dict[str, Any]], q: float = FIT_QUANTILE) -> list[dict[str, Any]]:
    """The rows as the fits read them: a row timed on the CPU (``cpu_s``) with its calls kept
    takes their quantile ``q`` as its time (and its calls after compute theirs); any other
    row (CUDA, or an older record) its median as printed."""
    from scaleprobe.measure.stats import quantile  # heavy: numpy: only where a fit is made

    out = []
    for r in rows:
        if r.get("cpu_s") is None or not r.get("times_s"):
            out.append(r)
            continue
        got = dict(r, time_s=quantile(r["times_s"], q))
        if r.get("after_compute_times_s"):
            got["after_compute_s"] = quantile(r["after_compute_times_s"], q)
        out.append(got)
    return out


def fit_summary(rows: list[dict[str, Any]], world: int,
                gloo_io: str | None = None) -> dict[str, dict[str, Any]]:
    """Per operation: alpha, beta, effective bandwidth and bus bandwidth (Gbit/s), fitted to
    the rows' times as ``fit_times`` reads them (at ``fit_quantile(gloo_io)``)."""
    from scaleprobe.predict.fit import fit_rows  # heavy: scipy: only where an interval is computed

    rows = fit_times(rows, fit_quantile(gloo_io))
    out: dict[str, dict[str, Any]] = {}
    for op, fit in fit_rows(rows).items():
        d = fit.to_dict()
        bw = fit.bandwidth_gbit_s
        d["busbw_gbit_s"] = bw * busbw_factor(op, world) if bw is not None else None
        d["cpu_s_per_byte"] = cpu_per_byte(rows, op)
        d["wake_s"] = wake(rows, op)
        d["ranges"] = size_ranges([r for r in rows if r.get("op") == op])
        out[op] = d
    return out


def size_ranges(rows: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """Fits of one operation per size range, where the rows allow more than one; None else.

    - From ``MMAP_BYTES`` (one size or more there: one is a line through the origin): gloo's
      buffers that big come fresh from the system at each call; its FSDP collectives took
      1.3-1.4x the one fit's time at 64 MiB over an unshaped link.
    - Below the knee, where the fit below ``MMAP_BYTES`` has its latency and bandwidth terms
      equal (``alpha / beta`` bytes), when two sizes or more lie on each side of it: a
      message that small waits out the link's round trips whatever its size, and a line
      through the larger sizes priced it short (an all-gather of 128 KiB over 1 ms each way
      took 2.6 ms, the line said 2.0).
    """
    from scaleprobe.predict.fit import fit_alpha_beta  # heavy: scipy

    def sizes(part: list[dict[str, Any]]) -> int:
        return len({r["size_bytes"] for r in part})

    ok = [r for r in rows if r.get("time_s")]
    below = [r for r in ok if r["size_bytes"] < MMAP_BYTES]
    above = [r for r in ok if r["size_bytes"] >= MMAP_BYTES]
    if sizes(below) < 2:
        return None
    parts: list[tuple[int, list[dict[str, Any]]]] = [(0, below)]
    whole = fit_alpha_beta([r["size_bytes"] for r in below], [r["time_s"] for r in below])
    if whole.beta_s_per_byte > 0:
        knee = int(whole.alpha_s / whole.beta_s_per_byte)
        small = [r for r in below if r["size_bytes"] < knee]
        if sizes(small) >= 2 and sizes(below) - sizes(small) >= 2:
            parts = [(0, small), (knee, [r for r in below if r["size_bytes"] >= knee])]
    if above:
        parts.append((MMAP_BYTES, above))
    if len(parts) < 2:
        return None
    out = []
    for start, part in parts:
        f = fit_alpha_beta([r["size_bytes"] for r in part], [r["time_s"] for r in part])
        out.append({"from_bytes": start, "alpha_s": f.alpha_s,
                    "beta_s_per_byte": f.beta_s_per_byte, "points": f.points})
    return out


def wake(rows: list[dict[str, Any]], op: str) -> float | None:
    """What ``op`` costs more right after a step's compute than after a barrier (gloo's
    threads woken from sleep): the median over the sizes timed both ways, of each size's
    difference of medians, at least 0; None where no size was (CUDA, or older records)."""
    got = sorted(max(0.0, r["after_compute_s"] - r["time_s"]) for r in rows
                 if r.get("op") == op and r.get("after_compute_s") is not None)
    if not got:
        return None
    n = len(got)
    return got[n // 2] if n % 2 else (got[n // 2 - 1] + got[n // 2]) / 2


CPU_MIN_BYTES = 1 << 20  # below, a call's fixed cost would pass for a cost per byte


def cpu_per_byte(rows: list[dict[str, Any]], op: str) -> float | None:
    """The median CPU seconds per byte a rank spent in ``op`` (its threads together, the
    kernel's work for it included) over the sizes of 1 MiB and more; None where the rows
    have no CPU time (CUDA, or older records)."""
    got = sorted(r["cpu_s"] / r["size_bytes"] for r in rows
                 if r.get("op") == op and r.get("cpu_s") is not None
                 and r["size_bytes"] >= CPU_MIN_BYTES)
    if not got:
        return None
    n = len(got)
    return got[n // 2] if n % 2 else (got[n // 2 - 1] + got[n // 2]) / 2


def make_record(rows: list[dict[str, Any]], args: argparse.Namespace, world: int,
                backend: str) -> CommBenchRecord:
    env = collect_env()
    env.update(world_size=world, nnodes=args.nnodes, backend=backend)
    gloo_io = getattr(args, "gloo_io", "default")
    return CommBenchRecord(
        experiment=Experiment(id=f"comm-{uuid.uuid4().hex[:12]}", kind="comm"),
        created_at=utc_now(), env=env, backend=backend, world_size=world, nproc=args.nproc,
        nnodes=args.nnodes,
        settings={"sizes_bytes": sorted({r["size_bytes"] for r in rows}),
                  "iters": args.iters, "warmup": args.warmup,
                  "gloo_io": gloo_io},
        rows=rows, fit=fit_summary(rows, world, gloo_io))


def _quantile_words(q: float) -> str:
    if q == 0.5:
        return " (of each size's calls, the median: gloo's socket threads at SCHED_BATCH)"
    return (f" (of each size's calls, the {q:.0%} quantile: gloo's small calls on the CPU "
            "are bimodal)")


def print_tables(rec: CommBenchRecord) -> None:
    # heavy: rich: printing only; kept out of the CLI's start-up
    from rich.console import Console
    from rich.table import Table

    from scaleprobe.commands.terminal import bytes_, esc  # heavy: rich

    t = Table(title=f"collectives: {esc(rec.backend)}, {rec.world_size} ranks "
                    f"(time = median over iterations, slowest rank)")
    for col in ("size", "op", "time", "algbw GB/s", "busbw GB/s", "iters"):
        t.add_column(col, justify="left" if col == "op" else "right")
    for r in sorted(rec.rows, key=lambda r: (r["size_bytes"], r["op"])):
        t.add_row(bytes_(r["size_bytes"]), esc(r["op"]), _time(r["time_s"]),
                  f"{r['algbw_gbyte_s']:.3f}", f"{r['busbw_gbyte_s']:.3f}", str(r["iters"]))
    quartile = any(r.get("cpu_s") is not None and r.get("times_s") for r in rec.rows)
    f = Table(title="fit: time = alpha + bytes * beta" + (
        _quantile_words(fit_quantile((rec.settings or {}).get("gloo_io"))) if quartile else ""))
    woken = any(d.get("wake_s") is not None for d in rec.fit.values())
    cols = ("op", "alpha", "bandwidth Gbit/s", "busbw Gbit/s", "worst rel. error")
    for col in cols + (("after compute, more",) if woken else ()):
        f.add_column(col, justify="left" if col == "op" else "right")
    for op, d in rec.fit.items():
        bw, bus = d["bandwidth_gbit_s"], d["busbw_gbit_s"]
        more = () if not woken else ("n/a" if d.get("wake_s") is None else _time(d["wake_s"]),)
        f.add_row(esc(op), _time(d["alpha_s"]), "n/a" if bw is None else f"{bw:.2f}",
                  "n/a" if bus is None else f"{bus:.2f}", f"{d['max_rel_err'] * 100:.0f}%", *more)
    console = Console()
    console.print(t)
    console.print(f)


def _time(v: float) -> str:
    return f"{v * 1e6:.0f} us" if v < 1e-3 else f"{v * 1e3:.2f} ms"


def run(args: argparse.Namespace) -> int:
    executor = from_args(args)
    _validate(args, slurm=executor.kind == "slurm")
    if executor.kind == "slurm":
        rec = _measure_as_job(args, executor)
    else:
        rec = measure(args)
    print_tables(rec)
    line = load_line(rec)
    if line:
        print(line)
    if args.node_rank == 0:
        path = Path(args.out) / RESULTS_FILE
        append_jsonl(path, rec.to_dict())
        print(f"appended to {path}")
    return 0


def measure(args: argparse.Namespace) -> CommBenchRecord:
    """The benchmark on this host's ranks (with the other hosts' when --nnodes > 1): the
    ``kind: "comm"`` record."""
    from torch.distributed import DistError  # heavy: torch

    ops, sizes = parse_ops(args.ops), parse_sizes(args.sizes)
    world = args.nproc * args.nnodes
    backend = args.backend or _default_backend()
    _check_backend(backend, args.nproc)
    try:
        # what else used the machine meanwhile: a fit measured under load prices every
        # prediction made from it, and nothing in the record said so
        with Monitor(LOAD_INTERVAL_S, training_in_children=True) as mon:
            t0 = time.time()
            results = run_workers(bench_worker, (ops, sizes, args.iters, args.warmup, backend,
                                                 args.timeout, getattr(args, "gloo_io", "default")),
                                  Job(nproc=args.nproc, nnodes=args.nnodes,
                                      node_rank=args.node_rank,
                                      rdzv_endpoint=args.rdzv_endpoint,
                                      timeout_s=args.timeout))
            t1 = time.time()
    except WorkerFailure as e:
        raise BenchmarkFailed(f"communication benchmark failed: {e}") from None
    except DistError as e:  # the hosts never met: store or rendezvous timeouts
        line = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        raise BenchmarkFailed(f"communication benchmark failed: {line[:300]}") from None
    rows = results[min(results)]
    rec = make_record(rows, args, world, backend)
    rec.load = result_fields(mon.outside.window(t0, t1), DEFAULT)[2]
    return rec


def load_line(rec: CommBenchRecord) -> str | None:
    """One line on the load the benchmark met: a warning when it was measured under load."""
    load = rec.load
    if not load:
        return None
    if load.get("flag"):
        return (f"measured under load: {load.get('reason')}; every prediction from this fit "
                "carries it: measure the link again on a quiet machine")
    cores = load.get("outside_cpu_cores")
    return None if cores is None else (
        f"outside the benchmark: {cores:.2f} cores on average (limit "
        f"{load.get('limit_cores', 0):.2f}): not under load")


JOB_ARGS = ("nproc", "ops", "sizes", "iters", "warmup", "backend", "timeout", "out", "nnodes",
            "gloo_io")


def comm_job(given: dict[str, Any]) -> CommBenchRecord | None:
    """What the Slurm job runs, on each of its nodes: the benchmark with this node's rank and
    the rendezvous on the job's first node; node 0 returns the record."""
    fresh_launcher()  # the job's own process, no tensor operation run: its ranks may fork
    args = argparse.Namespace(**given, node_rank=0, rdzv_endpoint=None)
    if args.nnodes > 1:
        env = launcher_env(dict(os.environ))
        args.node_rank, args.rdzv_endpoint = int(env["node_rank"]), env["rdzv_endpoint"]
    rec = measure(args)
    return rec if args.node_rank == 0 else None


def _measure_as_job(args: argparse.Namespace, executor: Any) -> CommBenchRecord:
    """One Slurm job of --nnodes nodes runs the benchmark; the record comes back here (this
    process writes results.jsonl), with the job and the nodes it ran on."""
    folder = Path(args.out) / "slurm"
    folder.mkdir(parents=True, exist_ok=True)
    jobs = SlurmProcessSet(executor.slurm, folder)
    print(f"comm: submitting one Slurm job of {args.nnodes} node(s) x {args.nproc} "
          "process(es)", flush=True)
    rec, job_id = jobs.call(comm_job, {k: getattr(args, k) for k in JOB_ARGS},
                            nnodes=args.nnodes, nproc=args.nproc)
    if not isinstance(rec, CommBenchRecord):
        raise BenchmarkFailed(f"Slurm job {job_id} returned no comm record")
    rec.extra["slurm"] = {"job_id": job_id, "state": "COMPLETED", "nodes": job_nodes(job_id)}
    return rec


def _default_backend() -> str:
    import torch  # heavy: torch: the comm command's parser builds without it

    return "nccl" if torch.cuda.is_available() else "gloo"


def _check_backend(backend: str, nproc: int) -> None:
    """nccl needs one GPU per process on this host."""
    if backend != "nccl":
        return
    import torch  # heavy: torch: the comm command's parser builds without it

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus == 0:
        raise ConfigError("--backend nccl needs CUDA GPUs; use --backend gloo on CPUs")
    if nproc > gpus:
        raise ConfigError(f"nccl needs one GPU per process: --nproc {nproc} but {gpus} GPU(s) "
                          "visible; lower --nproc or use --backend gloo")
