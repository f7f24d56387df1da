"""Why gloo's small collectives on the CPU take 0.3 ms or 3-4 ms: its I/O thread spinning.

    python benchmarks/gloo_io_spin.py calls [--size 256K] [--calls 200] [--after barrier]
                                            [--modes plain,pinned,batch,fifo] [--trace]
    python benchmarks/gloo_io_spin.py train [--points fsdp:gpt_tiny,ddp:resnet18] [--pairs 3]

Two processes on 127.0.0.1 all-reduce ``--size`` bytes ``--calls`` times, each call after a
barrier, or after 5 ms of computing on both (``--after compute``). Per call it times the
call and reads the CPU time that each rank's gloo I/O thread (``gloo_tcp_loop``, the thread
that reads the sockets) and its collective thread (``pt_gloo_runloop``) used during it, from
``/proc/self/task/TID/schedstat``. A call over 2 ms is "slow".

When a message arrives before its receive is posted, the I/O thread polls the readable
socket in a loop, and the thread that would post the receive can be the one it just took
the CPU from: neither moves until the kernel's next tick preempts the poller. A slow call
then shows milliseconds of I/O-thread CPU; a fast one tens of microseconds.

Modes, each in fresh processes, one after another:
  plain   the threads as torch makes them
  pinned  each rank's collective thread on its own core, its I/O thread on the other core
  batch   the I/O thread at SCHED_BATCH (what ``--set dist.gloo_io=batch`` does): the same
          share of the CPU, but woken it no longer preempts the thread running
  fifo    both gloo threads at SCHED_FIFO priority 1 (needs root or CAP_SYS_NICE; skipped
          otherwise). Not a setting to train with: a thread that posts a receive may be a
          training thread, which a real-time poller then holds off its core

``train`` runs ``scaleprobe run`` on 2 CPU ranks for each point (STRATEGY:MODEL), ``--pairs``
times with gloo's default and with ``--set dist.gloo_io=batch``, alternated, each in fresh
processes, and prints each run's median step and its socket threads' CPU a step
(``metrics.gloo_io_cpu_per_step_s``), and the ratio of the medians of the two sides.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

THREADS = ("gloo_tcp_loop", "pt_gloo_runloop")
SLOW_S = 2e-3


def _threads() -> dict[int, str]:
    out = {}
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                out[int(t)] = f.read().strip()
        except OSError:
            pass
    return out


def _cpu_ns(tids: list[int]) -> int:
    total = 0
    for t in tids:
        with open(f"/proc/self/task/{t}/schedstat") as f:
            total += int(f.read().split()[0])
    return total


def _size(text: str) -> int:
    mult = {"K": 1 << 10, "M": 1 << 20}
    return int(float(text[:-1]) * mult[text[-1].upper()]) if text[-1].upper() in mult \
        else int(text)


def _rank(rank: int, mode: str, size: int, calls: int, after: str, port: int, q,
          trace: bool = False) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    x = torch.ones(size // 4)
    dist.all_reduce(x)
    th = _threads()
    io = [t for t, n in th.items() if n == "gloo_tcp_loop"]
    coll = [t for t, n in th.items() if n == "pt_gloo_runloop"]
    for t, name in th.items():
        if name not in THREADS:
            continue
        if mode == "pinned":
            os.sched_setaffinity(t, {1 - rank} if name == "gloo_tcp_loop" else {rank})
        elif mode == "batch" and name == "gloo_tcp_loop":
            os.sched_setscheduler(t, os.SCHED_BATCH, os.sched_param(0))
        elif mode == "fifo":
            os.sched_setscheduler(t, os.SCHED_FIFO, os.sched_param(1))
    if mode == "pinned":
        os.sched_setaffinity(0, {rank})
    rows = []
    marker = os.open(f"{TRACING}/trace_marker", os.O_WRONLY) if trace and rank == 0 else None
    for i in range(calls + 5):
        dist.barrier()
        if after == "compute":
            end = time.perf_counter() + 5e-3
            while time.perf_counter() < end:
                pass
        io0, coll0 = _cpu_ns(io), _cpu_ns(coll)
        if marker is not None and i >= 5:
            os.write(marker, b"SP_CALL_START")
        t = time.perf_counter()
        dist.all_reduce(x)
        if marker is not None and i >= 5:
            os.write(marker, b"SP_CALL_END")
        rows.append((time.perf_counter() - t, (_cpu_ns(io) - io0) / 1e9,
                     (_cpu_ns(coll) - coll0) / 1e9))
    dist.destroy_process_group()
    q.put((rank, rows[5:]))


def _measure(mode: str, size: int, calls: int, after: str, port: int,
             trace: bool = False) -> list[tuple]:
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, mode, size, calls, after, port, q, trace))
             for r in (0, 1)]
    for p in procs:
        p.start()
    got = dict(q.get() for _ in procs)
    for p in procs:
        p.join()
    # a call's time: the slower rank's; its I/O thread's CPU: the two ranks' together
    return [(max(a[0], b[0]), a[1] + b[1], a[2] + b[2]) for a, b in zip(got[0], got[1], strict=True)]


TRACING = "/sys/kernel/tracing"
# the scheduler's switches and the socket threads' polls, from the kernel's own tracing
EVENTS = "sched:sched_switch syscalls:sys_enter_epoll_wait syscalls:sys_enter_recvfrom"


def _tracefs(name: str, text: str) -> None:
    with open(f"{TRACING}/{name}", "w") as f:
        f.write(text)


def _traced(mode: str, size: int, calls: int, after: str, port: int) -> list[tuple]:
    """``_measure`` with the kernel tracing the scheduler and the socket threads' syscalls:
    per call, its time between rank 0's markers and how many times the socket threads (both
    ranks') entered epoll_wait in it."""
    _tracefs("tracing_on", "0")
    _tracefs("trace", "")
    _tracefs("buffer_size_kb", "40000")
    _tracefs("set_event", EVENTS)
    _tracefs("tracing_on", "1")
    try:
        _measure(mode, size, calls, after, port, trace=True)
    finally:
        _tracefs("tracing_on", "0")
        _tracefs("set_event", "")
    out, start, polls = [], None, 0
    with open(f"{TRACING}/trace") as f:
        for line in f:
            if "SP_CALL_START" in line:
                start, polls = float(line.split(":")[0].split()[-1]), 0
            elif "SP_CALL_END" in line and start is not None:
                out.append((float(line.split(":")[0].split()[-1]) - start, polls))
                start = None
            elif start is not None and "gloo_tcp_loop-" in line and "epoll_wait" in line:
                polls += 1
    return out


def _ms(v: float) -> str:
    return f"{v * 1e3:.2f}"


def calls(a: argparse.Namespace) -> None:
    size = _size(a.size)
    print(f"gloo all_reduce of {size:,} bytes between 2 processes on 127.0.0.1, {a.calls} "
          f"calls each after a {a.after}; {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC")
    print("mode     calls  slow (>2 ms)  mean ms  median ms  I/O thread CPU per call, ms: "
          "slow calls / fast calls   collective thread CPU, ms: slow / fast")
    for i, mode in enumerate(a.modes.split(",")):
        if mode == "fifo" and os.geteuid() != 0:
            print("fifo     skipped: SCHED_FIFO needs root or CAP_SYS_NICE")
            continue
        rows = _measure(mode, size, a.calls, a.after, 29820 + i)
        slow = [r for r in rows if r[0] > SLOW_S]
        fast = [r for r in rows if r[0] <= SLOW_S]

        def med(rs: list[tuple], k: int) -> str:
            return _ms(statistics.median(r[k] for r in rs)) if rs else "-"

        print(f"{mode:8} {len(rows):5}  {len(slow):12}  "
              f"{_ms(statistics.mean(r[0] for r in rows)):>7}  "
              f"{_ms(statistics.median(r[0] for r in rows)):>9}  {med(slow, 1):>28} / "
              f"{med(fast, 1):<10}  {med(slow, 2):>23} / {med(fast, 2)}")
    if a.trace:
        if os.geteuid() != 0 or not os.path.exists(f"{TRACING}/trace_marker"):
            print("trace skipped: needs root and the kernel's tracefs at " + TRACING)
            return
        got = _traced("plain", size, a.calls, a.after, 29830)
        for name, part in (("slow", [g for g in got if g[0] > SLOW_S]),
                           ("fast", [g for g in got if g[0] <= SLOW_S])):
            if part:
                polls = sorted(p for _, p in part)
                print(f"traced, plain: {len(part)} {name} calls; the socket threads entered "
                      f"epoll_wait {polls[0]}-{polls[-1]} times in each (median "
                      f"{statistics.median(polls):.0f})")


MODEL_ARGS = {"gpt_tiny": ["--task", "lm", "--dataset", "tokens-synthetic", "--layers", "2",
                           "--width", "64", "--heads", "2", "--seq-len", "32"]}
RUN = ["--nproc", "2", "--batch-size", "32", "--loader", "naive", "--no-progress",
       "--steps", "40", "--warmup-steps", "3", "--set", "dist.calibrate_comm=false",
       "--set", "dist.threads_per_rank=1", "--set", "train.malloc=steady"]


def _train_once(strategy: str, model: str, batch: bool, out: str) -> tuple[float, float]:
    import json
    import subprocess

    args = [sys.executable, "-m", "scaleprobe", "run", "--strategy", strategy, "--model", model,
            *MODEL_ARGS.get(model, ["--dataset", "synthetic", "--image-size", "32"]), *RUN,
            "--out", out]
    if batch:
        args += ["--set", "dist.gloo_io=batch"]
    got = subprocess.run(args, capture_output=True, text=True)
    if got.returncode != 0:
        sys.exit(f"{strategy} {model} failed: {got.stderr.strip().splitlines()[-1:]}")
    from pathlib import Path

    m = json.loads(next(Path(out).glob("*/result.json")).read_text())["metrics"]
    return m["step_time_s"]["median"], m.get("gloo_io_cpu_per_step_s") or 0.0


def train(a: argparse.Namespace) -> None:
    import tempfile

    print(f"scaleprobe run, 2 CPU ranks on 127.0.0.1, gloo's default against "
          f"dist.gloo_io=batch, {a.pairs} pairs alternated; "
          f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC")
    for point in a.points.split(","):
        strategy, model = point.split(":")
        sides: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(a.pairs):
                for batch in (False, True) if i % 2 == 0 else (True, False):
                    sides[batch].append(_train_once(strategy, model, batch,
                                                    f"{tmp}/{i}-{int(batch)}"))
        for batch in (False, True):
            runs = ", ".join(f"{s * 1e3:.1f} ({c * 1e3:.2f})" for s, c in sides[batch])
            print(f"{strategy} {model:10} {'batch' if batch else 'default':7}  step ms "
                  f"(socket threads' CPU ms a step): {runs}")
        ratio = (statistics.median(s for s, _ in sides[True])
                 / statistics.median(s for s, _ in sides[False]))
        print(f"{strategy} {model:10} median step, batch / default: {ratio:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    c = sub.add_parser("calls", help="time single all-reduces and the threads' CPU in each")
    c.add_argument("--size", default="256K")
    c.add_argument("--calls", type=int, default=200)
    c.add_argument("--after", choices=("barrier", "compute"), default="barrier")
    c.add_argument("--modes", default="plain,pinned,batch,fifo")
    c.add_argument("--trace", action="store_true",
                   help="then the plain mode once more under the kernel's tracing (root): "
                        "how many times the socket threads polled in each call")
    t = sub.add_parser("train", help="scaleprobe run with gloo's default and with batch")
    t.add_argument("--points", default="fsdp:gpt_tiny,fsdp:digits_cnn,ddp:digits_cnn,"
                                       "ddp:resnet18,fsdp:resnet18,ps:gpt_tiny")
    t.add_argument("--pairs", type=int, default=3)
    a = ap.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        sys.exit("needs two cores")
    (calls if a.what == "calls" else train)(a)


if __name__ == "__main__":
    main()
