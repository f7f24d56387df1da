"""How much a fresh process's step moves with glibc's allocator: one-rank runs of one
configuration, each in a fresh process, with glibc's own thresholds (``train.malloc=default``)
and with them fixed (``train.malloc=steady``), alternated so the machine's drift falls on
both alike.

    python benchmarks/malloc_steadiness.py [--model digits_cnn] [--runs 6] [--out DIR]

Prints each run's median step and page faults a timed step, then per setting the median,
the range and its spread ((max - min) / median), and the ratio of the two medians.

glibc raises its mmap threshold to the size of a block it unmapped, and trims the heap's top
once more than twice that is free there: which blocks a process frees first sets both, so
processes of one configuration can differ in how much of each step's memory goes back to
the system and is faulted in again the next step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = {
    "digits_cnn": ["--model", "digits_cnn", "--dataset", "synthetic", "--image-size", "32"],
    "resnet18": ["--model", "resnet18", "--dataset", "synthetic", "--image-size", "32"],
    "gpt_tiny": ["--model", "gpt_tiny", "--task", "lm", "--dataset", "tokens-synthetic",
                 "--layers", "2", "--width", "64", "--heads", "2", "--seq-len", "32"],
}


def one_run(model: str, malloc: str, out: Path, core: int) -> tuple[float, float]:
    """(median step in seconds, page faults a timed step) of one fresh one-rank run."""
    argv = [sys.executable, "-m", "scaleprobe", "run", "--strategy", "single",
            *MODELS[model], "--batch-size", "32", "--loader", "naive", "--no-progress",
            "--steps", "48", "--warmup-steps", "3", "--set", "dist.threads_per_rank=1",
            "--set", f"train.malloc={malloc}", "--out", str(out)]
    subprocess.run(["taskset", "-c", str(core), *argv], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    rec = json.loads(next(out.rglob("result.json")).read_text())
    m = rec["metrics"]
    return float(m["step_time_s"]["median"]), float(m["page_faults_per_step"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="digits_cnn", choices=sorted(MODELS))
    ap.add_argument("--runs", type=int, default=6, help="runs of each setting")
    ap.add_argument("--core", type=int, default=0, help="the core every run is pinned to")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    out = a.out or Path(tempfile.mkdtemp(prefix="malloc-"))
    got: dict[str, list[tuple[float, float]]] = {"default": [], "steady": []}
    print(f"{a.model}, one rank on core {a.core}, one thread, batch 32, 48 timed steps; "
          f"{time.strftime('%Y-%m-%d %H:%M')} UTC", flush=True)
    for i in range(a.runs):
        for malloc in (("default", "steady") if i % 2 == 0 else ("steady", "default")):
            step, faults = one_run(a.model, malloc, out / f"{malloc}-{i}", a.core)
            got[malloc].append((step, faults))
            print(f"  run {i + 1} {malloc:7s}: step {step * 1e3:6.1f} ms, "
                  f"{faults:8,.0f} page faults a step", flush=True)
    med = {}
    for malloc, rows in got.items():
        steps = [s for s, _ in rows]
        faults = [f for _, f in rows]
        med[malloc] = statistics.median(steps)
        print(f"{malloc:7s}: median {med[malloc] * 1e3:.1f} ms, range "
              f"{min(steps) * 1e3:.1f}-{max(steps) * 1e3:.1f} ms (spread "
              f"{(max(steps) - min(steps)) / med[malloc]:.0%}); page faults a step "
              f"{min(faults):,.0f}-{max(faults):,.0f}")
    print(f"steady / default, median step: {med['steady'] / med['default']:.3f}")


if __name__ == "__main__":
    main()
