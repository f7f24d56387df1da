"""What `scaleprobe wrap` costs a compiled script: examples/scripts/gpt_compiled.py (a small GPT,
AdamW, a DataLoader of the standard library's text, ``torch.compile(model)``) bare and under
wrap, in fresh processes, interleaved (each pair: bare, wrap, bare; the wrap run held against the
geometric mean of the two bare runs around it). Both sides are measured by
the script's own clock (its ``own: ... samples_per_s=X`` over the steps after its warm-up), so
a compile or recompile that wrap caused inside the script's window shows in the ratio. Also an
A/A list (the two bare runs of each pair) for the machine's noise, and what wrap recorded of
the compilations (compiles, recompiles and compilations inside its window).

    python benchmarks/wrap_compile.py [--pairs 6] [--steps 60] [-- extra script args]

Two figures per run: samples per wall second (what the script got), and samples per CPU second
of the script's process (its ``cpu_s``: the work it did, hooks included), which a neighbour
on the machine moves far less. The script runs one compute thread (``--threads``, default 1):
with two, OpenMP threads spin while they wait for each other, more so when a neighbour holds a
core, and CPU time then grows with the load too.

Each process is also timed against the machine: the CPU that other processes used while it ran
(the machine's busy time from /proc/stat less this process tree's own CPU time), in cores. On a
shared 2-core machine a busy neighbour moves a run by 10x, so a pair starts once the machine
has been quiet for a second (others under ``QUIET_CORES``; waiting at most ``--wait`` seconds),
and a pair in which any run saw more is run again (``--tries`` in all). The ratio is given over
the quiet pairs, and over every pair run.

The first process of a machine compiles with a cold inductor cache (minutes on 2 cores); the
benchmark runs one untimed bare process first so that every measured process finds the same
warm cache. A GPT-2-small-shaped run on a GPU:
``python benchmarks/wrap_compile.py -- --layers 12 --d 768 --heads 12 --seq 1024 --amp bf16``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples/scripts/gpt_compiled.py"
OWN = re.compile(r"samples=(\d+) seconds=([\d.]+) samples_per_s=([\d.]+) cpu_s=([\d.]+)")
# other processes' CPU, in cores, under which a run counts as quiet: the run's own threshold
# for "measured under load" (core/thresholds.py, under_load: 0.25 cores)
QUIET_CORES = 0.25
LAST_OUTSIDE: list[float] = []  # the outside cores of the last run


def _machine_busy_s() -> float:
    """CPU seconds the whole machine has been busy (/proc/stat: all but idle and iowait)."""
    f = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(f) - f[3] - f[4]) / os.sysconf("SC_CLK_TCK")


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    """Run ``cmd``; note in LAST_OUTSIDE the cores other processes used meanwhile."""
    t0, b0, c0 = time.perf_counter(), _machine_busy_s(), os.times()
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    c1 = os.times()
    own = (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)
    LAST_OUTSIDE[:] = [max(0.0, _machine_busy_s() - b0 - own) / (time.perf_counter() - t0)]
    return p


def _own(stdout: str) -> tuple[float, float]:
    """(samples per wall second, samples per CPU second) from the script's own line."""
    m = OWN.search(stdout)
    if not m:
        raise SystemExit(f"the script printed no own figure:\n{stdout[-2000:]}")
    samples, cpu = int(m.group(1)), float(m.group(4))
    return float(m.group(3)), samples / cpu if cpu > 0 else 0.0


def bare(args: list[str]) -> tuple[float, float]:
    return _own(_run([sys.executable, str(SCRIPT), *args]).stdout)


def wrapped(args: list[str], warmup: int) -> tuple[tuple[float, float], dict]:
    """The script's own figures under wrap, and wrap's compile figures."""
    with tempfile.TemporaryDirectory() as d:
        p = _run([sys.executable, "-m", "scaleprobe", "wrap", "--warmup-steps", str(warmup),
                  "--out", d, "--", str(SCRIPT), *args])
        rec = json.loads((Path(d) / "results.jsonl").read_text().splitlines()[-1])
    m = rec["metrics"]
    figures = {k: m.get(k) for k in ("compiles", "recompiles", "compiles_in_window",
                                     "compile_time_s", "samples_per_s")}
    return _own(p.stdout), figures


def _f(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--tries", type=int, default=3, help="runs of a pair until one is quiet")
    ap.add_argument("--wait", type=float, default=120.0,
                    help="seconds to wait for a quiet machine before a pair")
    ap.add_argument("--steps", type=int, default=60, help="the script's steps in all")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps, both sides")
    ap.add_argument("--threads", type=int, default=1, help="the script's compute threads")
    a, extra = ap.parse_known_args()
    extra = [x for x in extra if x != "--"]
    args = ["--steps", str(a.steps), "--warmup", str(a.warmup), "--threads", str(a.threads),
            *extra]

    print(f"cache warm-up: bare {bare(args)[0]:.1f} samples/s (not counted)", flush=True)
    pairs: list[tuple[tuple, tuple, tuple, bool]] = []  # bare, wrap, bare, quiet
    for i in range(a.pairs):
        for _ in range(a.tries):
            _wait_quiet(a.wait)
            b1 = bare(args)
            l1 = LAST_OUTSIDE[0]
            got, fig = wrapped(args, a.warmup)
            lw = LAST_OUTSIDE[0]
            b2 = bare(args)
            quiet = max(l1, lw, LAST_OUTSIDE[0]) < QUIET_CORES
            pairs.append((b1, got, b2, quiet))
            print(f"pair {i + 1}: samples/s bare {b1[0]:.1f} wrap {got[0]:.1f} bare {b2[0]:.1f}; "
                  f"per CPU s {b1[1]:.1f} {got[1]:.1f} {b2[1]:.1f} (others' cores {l1:.2f} "
                  f"{lw:.2f} {LAST_OUTSIDE[0]:.2f}{'' if quiet else ': under load'}; wrap saw "
                  f"{fig['compiles']} compiles, {fig['recompiles']} recompiles, "
                  f"{fig['compiles_in_window']} in its window, {_f(fig['compile_time_s'])} s "
                  f"compiling; its samples/s {_f(fig['samples_per_s'])})", flush=True)
            if quiet:
                break
    quiet = [p for p in pairs if p[3]]
    for k, unit in ((0, "samples/s"), (1, "samples per CPU second")):
        for what, sel in ((f"quiet pairs ({len(quiet)})", quiet),
                          (f"every pair run ({len(pairs)})", pairs)):
            _ratio(f"{unit}, {what}", [math.sqrt(p[0][k] * p[2][k]) for p in sel],
                   [p[1][k] for p in sel])
            print("  A/A bare / bare: " + ", ".join(f"{p[2][k] / p[0][k]:.3f}" for p in sel))


def _wait_quiet(limit_s: float) -> None:
    """Until other processes have used under QUIET_CORES for a second (at most ``limit_s``)."""
    t_end = time.perf_counter() + limit_s
    while time.perf_counter() < t_end:
        b0, c0, t0 = _machine_busy_s(), os.times(), time.perf_counter()
        time.sleep(1.0)
        c1 = os.times()
        own = (c1.user - c0.user) + (c1.system - c0.system)
        if (_machine_busy_s() - b0 - own) / (time.perf_counter() - t0) < QUIET_CORES:
            return


def _ratio(what: str, bare_: list[float], wrap_: list[float]) -> None:
    from scaleprobe.core.metrics import ratio_interval

    iv = ratio_interval(bare_, wrap_)
    if iv is None or len(wrap_) < 2:
        one = f"{wrap_[0] / bare_[0]:.3f} (one pair)" if wrap_ else "no pair"
        print(f"ratio wrap / bare, {what}: {one}")
        return
    print(f"ratio wrap / bare, {what}: {iv.estimate:.3f} (95% interval {iv.lo:.3f}-"
          f"{iv.hi:.3f}; medians wrap {statistics.median(wrap_):.1f}, bare "
          f"{statistics.median(bare_):.1f})")


if __name__ == "__main__":
    main()
