"""The memory model (``scaleprobe predict --memory``) against measured runs on this machine:
each model's peak per rank predicted from ONE 1-rank run at a small batch, then measured at
larger batches, under ddp and fsdp, on 1 and 2 ranks (``--ranks``: any).

    python benchmarks/predict_memory_validation.py measure --out OUT     # resumable
    python benchmarks/predict_memory_validation.py measure --out OUT --ranks 1   # one GPU
    python benchmarks/predict_memory_validation.py measure --out OUT --ranks 4   # 4 ranks
    python benchmarks/predict_memory_validation.py table --out OUT       # the table, summary
    python benchmarks/predict_memory_validation.py table --out OUT --markdown

``measure`` runs, per model (digits_cnn at 32 px, resnet18 at 64 px, gpt_tiny --task lm, and
a user's model given as FILE.py:FUNC, examples/models/mixer.py:build):

    base      ``--strategy single`` at batch 8: the one run every point is predicted from
    grid      batch 16, 32, 64 per rank x (ddp, fsdp) x the ranks asked (default 1 and 2):
              the points
    fits      the largest batch predicted to fit in ``--device-memory`` (the upper end of the
              prediction's interval under it; the device size is the prediction at batch 48,
              rounded down to a whole MiB: chosen from the base run alone, before any point
              is measured) and twice that batch, on fsdp with 2 ranks (whose whole peak the
              CPU can see: DDP's buckets are not reachable as tensors there)

All runs: AdamW, synthetic data made on the device, ``--loader naive``, 2 timed steps after 1
warm-up step, no communication calibration, no gradient noise scale; the memory probe runs
after the window (measure/memstate.py). On the CPU the measured peak is the allocator's
(tensor bytes live: the rank's parameters, optimizer state and batch + the probe step's
peak above them), never the process's RSS; DDP's buckets are left out of both sides there
(``predict --check`` does the same, docs/MEMORY.md).

A point whose folder already holds an ``ok`` record is skipped. ``table`` reads the folders
and prints predicted, measured and their ratio per point, the summary (median and worst
|predicted / measured - 1|, the goals: every point within 10%, the median within 5%) and
the fits check: the largest batch predicted to fit measures under the device size, twice
that batch is predicted not to fit and measures over it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from scaleprobe.commands import predict_memory as PM  # noqa: E402
from scaleprobe.commands.predict_steps import load_runs  # noqa: E402
from scaleprobe.core import claim as CL  # noqa: E402
from scaleprobe.core.result_model import RunResult  # noqa: E402
from scaleprobe.predict import memmodel as MM  # noqa: E402

MIXER = str(ROOT / "examples" / "models" / "mixer.py") + ":build"
MODELS: dict[str, list[str]] = {
    "digits_cnn": ["--model", "digits_cnn", "--dataset", "synthetic", "--image-size", "32"],
    "resnet18": ["--model", "resnet18", "--dataset", "synthetic", "--image-size", "64"],
    "gpt_tiny": ["--model", "gpt_tiny", "--task", "lm", "--dataset", "tokens-synthetic"],
    "mixer.py:build": ["--model", MIXER, "--dataset", "synthetic", "--image-size", "32"],
}
# the configurations each model's fits check runs on: one rank alone (the activations), fsdp
# on 2 (with its gathered unit); both show their whole peak on the CPU, where DDP's buckets
# are not reachable as tensors
FITS = (("single", 1), ("fsdp", 2))
BASE_BATCH = 8
BATCHES = (16, 32, 64)
STRATEGIES = ("ddp", "fsdp")
RANKS_READ = range(1, 17)  # the numbers of ranks ``table`` looks for
DEVICE_AT_BATCH = 48  # the device size: the prediction at this batch, down to a whole MiB
COMMON = ["--optimizer", "adamw", "--loader", "naive", "--steps", "2", "--warmup-steps", "1",
          "--no-progress", "--no-gns", "--set", "dist.calibrate_comm=false",
          "--timeout", "300"]
GOAL_EVERY, GOAL_MEDIAN = 0.10, 0.05
RUN_TIMEOUT_S = 900


def _slug(model: str) -> str:
    return model.replace(".py:", "_").replace(":", "_")


def _result(folder: Path) -> RunResult | None:
    """The folder's latest ``ok`` run, or None."""
    if not (folder / "results.jsonl").exists():
        return None
    ok = [r for r in load_runs(str(folder)) if r.status == "ok"]
    return max(ok, key=lambda r: str(r.started_at or "")) if ok else None


def _log(out: Path, text: str) -> None:
    line = f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}"
    print(line, flush=True)
    with (out / "progress.log").open("a") as fh:
        fh.write(line + "\n")


def run_point(out: Path, folder: Path, model: str, strategy: str, nproc: int,
              batch: int) -> RunResult | None:
    """One run (skipped when its folder holds an ``ok`` record already)."""
    got = _result(folder)
    if got is not None:
        return got
    argv = [sys.executable, "-m", "scaleprobe", "run", *MODELS[model], *COMMON,
            "--strategy", strategy, "--batch-size", str(batch), "--out", str(folder)]
    if strategy != "single":
        argv += ["--nproc", str(nproc)]
    t0 = time.monotonic()
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=RUN_TIMEOUT_S, check=False)
    _log(out, f"{model} {strategy} {nproc} x {batch}: "
              f"{'ok' if p.returncode == 0 else f'FAILED ({p.returncode})'} "
              f"({time.monotonic() - t0:.0f} s)")
    if p.returncode != 0:
        print(p.stdout[-3000:], flush=True)
    return _result(folder)


def device_bytes(base: RunResult, strategy: str, nproc: int) -> int:
    """The device size of a fits check: the prediction at ``DEVICE_AT_BATCH``, rounded down
    to a whole MiB (from the base run alone)."""
    p = MM.predict(PM.inputs_of(base), strategy, nproc, DEVICE_AT_BATCH)
    return (p.peak_bytes >> 20) << 20


def fits_batches(base: RunResult, strategy: str, nproc: int) -> tuple[int, int]:
    """The largest batch predicted to fit (its interval's upper end under the device size)
    and twice it."""
    b = MM.largest_batch(PM.inputs_of(base), strategy, nproc,
                         device_bytes(base, strategy, nproc), bound="high")
    return b, 2 * b


def _ranks(ranks: str) -> list[int]:
    """``--ranks``: the numbers of ranks to measure (a one-GPU host: 1; 4 or more on this
    2-core CPU share its cores, which moves the step, not the peak)."""
    try:
        got = sorted({int(x) for x in ranks.split(",") if x.strip()})
    except ValueError:
        raise SystemExit(f"--ranks: whole numbers, e.g. 1,2,4 (got '{ranks}')") from None
    if not got or got[0] < 1:
        raise SystemExit(f"--ranks: whole numbers >= 1, e.g. 1,2,4 (got '{ranks}')")
    return got


def _only(configs: tuple[tuple[str, int], ...], ranks: str) -> list[tuple[str, int]]:
    """The configurations on the numbers of ranks asked (``--ranks``)."""
    want = set(_ranks(ranks))
    return [(s, n) for s, n in configs if n in want]


def configs(ranks: str) -> list[tuple[str, int]]:
    """Each strategy on each number of ranks asked: ddp on 1, 2, ..., then fsdp."""
    return [(s, n) for s in STRATEGIES for n in _ranks(ranks)]


def measure(a: argparse.Namespace) -> int:
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
    for model in a.models.split(","):
        root = out / _slug(model)
        base = run_point(out, root / "base", model, "single", 1, BASE_BATCH)
        if base is None:
            _log(out, f"{model}: the base run failed; its points skipped")
            continue
        for batch in BATCHES:
            for strategy, nproc in configs(a.ranks):
                run_point(out, root / f"{strategy}{nproc}_b{batch}", model, strategy, nproc,
                          batch)
        for strategy, nproc in _only(FITS, a.ranks):
            for tag, batch in zip(("fits", "fits_x2"), fits_batches(base, strategy, nproc),
                                  strict=True):
                if batch >= 1:
                    run_point(out, root / f"{tag}_{strategy}{nproc}", model, strategy, nproc,
                              batch)
    _log(out, "grid done")
    return 0


def rows(out: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The grid's points and each model's fits check, read from the folders."""
    points, fits = [], []
    for model in MODELS:
        root = out / _slug(model)
        base = _result(root / "base")
        if base is None:
            continue
        for batch in BATCHES:
            for strategy, nproc in ((s, n) for s in STRATEGIES for n in RANKS_READ):
                run = _result(root / f"{strategy}{nproc}_b{batch}")
                if run is None:
                    continue
                points.append({"model": model, "strategy": strategy, "nproc": nproc,
                               "batch": batch, **PM.memory_point(run, base)})
        for strategy, nproc in FITS:
            cap = device_bytes(base, strategy, nproc)
            for tag in ("fits", "fits_x2"):
                run = _result(root / f"{tag}_{strategy}{nproc}")
                if run is None:
                    continue
                pt = PM.memory_point(run, base)
                fits.append({"model": model, "strategy": strategy, "nproc": nproc,
                             "batch": run.batch.per_device, "device_bytes": cap, "tag": tag,
                             **pt})
    return points, fits


def _mib(n: float | None) -> str:
    return "n/a" if n is None else f"{n / 2**20:,.2f}"


def _band(p: dict[str, Any]) -> str:
    lo, hi = p.get("predicted_peak_low_bytes"), p.get("predicted_peak_high_bytes")
    return f"[{_mib(lo)}, {_mib(hi)}]" if lo is not None and hi is not None else "n/a"


def _inside(p: dict[str, Any]) -> bool | None:
    lo, hi, meas = (p.get("predicted_peak_low_bytes"), p.get("predicted_peak_high_bytes"),
                    p["measured_peak_bytes"])
    if lo is None or hi is None or meas is None:
        return None
    return lo <= meas <= hi


def table(a: argparse.Namespace) -> int:
    points, fits = rows(Path(a.out))
    if not points:
        print(f"no measured point in {a.out}")
        return 1
    md = a.markdown
    head = ("model", "strategy", "N", "batch/rank", "predicted MiB", "interval MiB",
            "measured MiB", "pred / meas", "inside")
    print("| " + " | ".join(head) + " |" if md else "  ".join(f"{h:>14}" for h in head))
    if md:
        print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    errs = []
    for p in points:
        r = p["memory_ratio"]
        if r is not None:
            errs.append(abs(r - 1))
        cells = (p["model"], p["strategy"], str(p["nproc"]), str(p["batch"]),
                 _mib(p["predicted_peak_bytes"]), _band(p), _mib(p["measured_peak_bytes"]),
                 f"{r:.3f}" if r is not None else str(p["memory_reason"]),
                 {True: "yes", False: "no", None: "n/a"}[_inside(p)])
        print("| " + " | ".join(cells) + " |" if md else "  ".join(f"{c:>14}" for c in cells))
    errs.sort()
    half = len(errs) // 2
    median = errs[half] if len(errs) % 2 else (errs[half - 1] + errs[half]) / 2
    inside = sum(1 for p in points if _inside(p))
    print(f"\n{len(errs)} points: median |predicted / measured - 1| {median:.2%}, worst "
          f"{errs[-1]:.2%}; every point within {GOAL_EVERY:.0%}: "
          f"{'yes' if errs[-1] <= GOAL_EVERY else 'no'}; median within {GOAL_MEDIAN:.0%}: "
          f"{'yes' if median <= GOAL_MEDIAN else 'no'}; measured inside the predicted "
          f"interval: {inside} of {len(errs)}")
    print_fits(fits)
    return 0


def fit_word(f: dict[str, Any]) -> str:
    """The fit's verdict as ``predict --memory`` says it (core/claim.memory_fit)."""
    hi, lo, cap = (f.get("predicted_peak_high_bytes"), f.get("predicted_peak_low_bytes"),
                   f["device_bytes"])
    return CL.memory_fit(f["predicted_peak_bytes"], lo, hi, cap, 3).short_verdict


def print_fits(fits: list[dict[str, Any]]) -> None:
    """Each fits check: the largest batch whose interval fits measures under the device size;
    twice it is predicted not to fit (its whole interval over the device) and measures over
    it."""
    if not fits:
        return
    print("\nfits check (device size: the prediction at batch "
          f"{DEVICE_AT_BATCH}, down to a whole MiB; from the base run alone)")
    for f in fits:
        cap, meas = f["device_bytes"], f["measured_peak_bytes"]
        word = fit_word(f)
        want = CL.FITS if f["tag"] == "fits" else CL.DOES_NOT_FIT
        under = meas is not None and meas <= cap
        if word not in (CL.FITS, CL.DOES_NOT_FIT):
            said = "no verdict to check"
        elif (word == CL.FITS) == under:
            said = "as the check wants" if word == want else "right, not the check's verdict"
        else:
            said = "WRONG"
        print(f"  {f['model']} {f['strategy']} on {f['nproc']}, batch {f['batch']}: device "
              f"{_mib(cap)} MiB; predicted {_mib(f['predicted_peak_bytes'])} {_band(f)}: "
              f"{word}; measured {_mib(meas)} MiB, {'under' if under else 'over'} it: {said}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("measure", "table"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--ranks", default="1,2",
                    help="the numbers of ranks to measure, e.g. 1,2,4 (1 on a one-GPU host)")
    ap.add_argument("--markdown", action="store_true", help="the table as docs/MEMORY.md keeps it")
    a = ap.parse_args()
    return measure(a) if a.what == "measure" else table(a)


if __name__ == "__main__":
    sys.exit(main())
