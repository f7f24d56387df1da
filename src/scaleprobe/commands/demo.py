"""``scaleprobe demo``: the main job on the embedded default data, in about a minute on a
2-core CPU. digits_cnn on the 1,797 real handwritten digits of scikit-learn:

1. a batch-size sweep (two whole epochs per point, each in its own process, every point three
   times, interleaved): peak memory and epoch time with their growth rates, the fastest and
   the most efficient batch size, each verdict with its interval or "inconclusive", and the
   gradient noise scale B_noise beside each batch size (``--gns``);
2. the two input pipelines (naive vs pipelined) with the light and the heavy transform;
3. a report (Markdown + one self-contained HTML file) with plots and a diagnosis.
Each sweep's tables are printed as Markdown and written to ``--out`` (default
``scaleprobe-out/demo``), one folder per sweep; the report covers both. Running it again reuses
the points already measured there (delete the folder to measure afresh).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from scaleprobe.commands import sweep as sweep_command
from scaleprobe.commands.interrupted import say_interrupted
from scaleprobe.commands.options import repeats as repeats_arg
from scaleprobe.report.render.sweep_tables import write_tables

NAME = "demo"
HELP = "the main job on the embedded digits data: batch sweep, loaders, transforms, report"

BASE: dict[str, Any] = {"model": "digits_cnn", "dataset": "digits", "epochs": 2,
                        "warmup_steps": 3, "loader": "pipelined", "workers": 1, "lr": 0.05}
# the batch sweep also measures the gradient noise scale (two half-batches per step): its
# table shows B_noise beside each batch size (docs/CRITICAL_BATCH.md)
BATCH_SWEEP: dict[str, Any] = {"sweep": {"id": "demo-batch-size"},
                               "base": {**BASE, "gns": True},
                               "grid": {"batch_size": [16, 32, 64, 128, 256]}}
LOADER_SWEEP: dict[str, Any] = {"sweep": {"id": "demo-loader-transform"},
                                "base": {**BASE, "batch_size": 64},
                                "grid": {"loader": ["naive", "pipelined"],
                                         "transform": ["light", "heavy"]}}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="scaleprobe-out/demo", help="results folder")
    p.add_argument("--quick", action="store_true",
                   help="fewer points and 2 repeats (a smoke test)")
    p.add_argument("--repeats", type=repeats_arg, metavar="N",
                   help="runs of every point, interleaved; verdicts carry intervals from them "
                        "(default 3, 2 with --quick)")


# The demo on the quiet 2-core reference CPU, installed: 93 s for its 27 runs and the report
# (2026-11-30, load average 0.2, README), 3.4 s a run (each its own process: two epochs;
# 3 min 32 s on 2026-11-26). A run keeps about 2 cores busy (training and one loader
# worker); other work shares them.
REFERENCE_S, REFERENCE_RUNS, RUN_CORES = 93.0, 27, 2.0
BUSY_FACTOR = 1.5  # expected slowdown from which the demo offers --quick


def runs_of(quick: bool, repeats: int | None) -> int:
    """Runs the demo starts: every point of its sweeps, ``repeats`` times each."""
    n = repeats or (2 if quick else 3)
    return sum(n * _count(spec["grid"]) for spec in _sweeps(quick))


def _count(grid: dict[str, list[Any]]) -> int:
    out = 1
    for values in grid.values():
        out *= len(values)
    return out


def estimate_s(runs: int, cores: int, busy_cores: float) -> tuple[float, float]:
    """(seconds, slowdown): the reference's time per run, stretched by the share of this
    machine's cores a run gets beside ``busy_cores`` of other work (never below the
    reference: a faster CPU is not assumed)."""
    slowdown = max(1.0, (busy_cores + RUN_CORES) / max(1, cores))
    return runs * REFERENCE_S / REFERENCE_RUNS * slowdown, slowdown


def machine_load() -> tuple[int, float]:
    """(cores this process may use, cores other work keeps busy): the threads ready to run
    now, other than this one, over half a second (``runnable_now``); where the system does
    not say (not Linux), the larger of the 1-minute load average and the CPU use over half a
    second. The load average alone lags: for most of a minute after other work has ended it
    still counts it, and the demo said "the machine is busy" of a quiet machine."""
    # heavy: psutil (run.resources reads the host with it): only when the demo starts
    from scaleprobe.run.resources import host_cores

    cores = host_cores()
    busy = runnable_now()
    if busy is None:
        # heavy: psutil: only when the demo starts
        import psutil

        now = psutil.cpu_percent(interval=0.5) / 100.0 * (psutil.cpu_count() or cores)
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):
            load = 0.0
        busy = max(now, load)
    return cores, min(busy, 64.0 * cores)


def runnable_now(seconds: float = 0.5, every_s: float = 0.025,
                 path: str = "/proc/loadavg") -> float | None:
    """The mean number of threads ready to run, this one left out, over ``seconds``: the
    fourth field of Linux's ``/proc/loadavg`` ("2/412": 2 runnable of 412), read every
    ``every_s``. Demand, as the load average counts it (eight busy processes on two cores
    read 8, where CPU use reads 2), without its minute of lag. None where there is no such
    file."""
    seen: list[int] = []
    end = time.monotonic() + seconds
    while True:
        try:
            with open(path) as f:
                running = int(f.read().split()[3].split("/")[0])
        except (OSError, ValueError, IndexError):
            return None
        seen.append(max(0, running - 1))  # this thread, reading
        if time.monotonic() >= end:
            return sum(seen) / len(seen)
        time.sleep(every_s)


def plan_line(quick: bool, repeats: int | None, cores: int, busy: float) -> str:
    """What the demo will run and how long it should take here, said before it starts; on a
    busy machine, what --quick would take."""
    runs = runs_of(quick, repeats)
    est, slow = estimate_s(runs, cores, busy)
    line = (f"{runs} runs, each its own process; about {fmt_minutes(est)} here ({cores} "
            f"core{'s' if cores != 1 else ''}, a load of {busy:.1f} from other work; "
            f"{fmt_minutes(runs * REFERENCE_S / REFERENCE_RUNS)} on a quiet 2-core CPU); "
            "points already measured in the folder are reused")
    if slow >= BUSY_FACTOR and not quick:
        q = runs_of(True, repeats)
        line += (f". The machine is busy: `scaleprobe demo --quick` ({q} runs) takes about "
                 f"{fmt_minutes(estimate_s(q, cores, busy)[0])}")
    return line


def fmt_minutes(s: float) -> str:
    return f"{s:.0f} s" if s < 90 else f"{s / 60:.1f} min" if s < 600 else f"{s / 60:.0f} min"


def _sweeps(quick: bool) -> list[dict[str, Any]]:
    if not quick:
        return [BATCH_SWEEP, LOADER_SWEEP]
    batch = {**BATCH_SWEEP, "grid": {"batch_size": [32, 128]}}
    loader = {**LOADER_SWEEP, "grid": {"loader": ["naive", "pipelined"]}}
    return [batch, loader]


def run(args: argparse.Namespace) -> int:
    # heavy: rich: printing only; kept out of the CLI's start-up
    from rich.console import Console
    from rich.markup import escape

    # heavy: rich (and psutil): the sweep's ~50 modules stay out of the CLI's start-up
    from scaleprobe import experiments
    from scaleprobe.experiments.procs import one_server

    con = Console()
    sweep_command.terminate_as_interrupt()  # SIGTERM (kill, a scheduler) stops it as Ctrl+C does
    out = Path(args.out)
    con.print(f"[bold]scaleprobe demo[/bold]: digits_cnn on scikit-learn's handwritten digits, "
              f"results in {escape(str(out))}/", soft_wrap=True)
    con.print(escape(plan_line(args.quick, args.repeats, *machine_load())), soft_wrap=True)
    try:
        with one_server():  # both sweeps' points fork from one preloaded server
            for spec in _sweeps(args.quick):
                sid = spec["sweep"]["id"]
                con.rule(sid)
                experiments.run_sweep(spec, out / sid, progress=True, console=con,
                                      repeats=args.repeats or (2 if args.quick else None),
                                      tables=write_tables)
                print((out / sid / "sweep.md").read_text(), flush=True)
    except KeyboardInterrupt:  # every point process is stopped; what finished is on disk
        return say_interrupted(out, _again(args), report=True)
    _report(con, out)
    return 0


def _again(args: argparse.Namespace) -> str:
    """The command that resumes this demo."""
    return ("scaleprobe demo" + (" --quick" if args.quick else "")
            + (f" --repeats {args.repeats}" if args.repeats else "") + f" --out {args.out}")


def _report(con: Any, out: Path) -> None:
    try:
        from scaleprobe.report import build_report  # optional: matplotlib (the plots)
    except ImportError:
        return
    md, html = build_report(out, out)
    con.rule("report")
    print(f"report: {md}\n        {html}", flush=True)  # whole paths, never wrapped
