"""Hand-built result records following scaleprobe.core.results' schema, for report tests."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from types import ModuleType
from typing import Any

from scaleprobe.core import results as res
from scaleprobe.core.experiment_records import typed

GIB = 1 << 30


def breakdown(step_s: float = 0.1, data: float = 0.02, comm: float = 0.0) -> dict[str, float]:
    """Phases of one step as fractions: data and comm given, the rest split like a CNN."""
    rest = 1.0 - data - comm
    return {"data": data * step_s, "h2d": 0.0, "forward": 0.35 * rest * step_s,
            "backward": 0.55 * rest * step_s, "optimizer": 0.10 * rest * step_s,
            "comm": comm * step_s}


def run(name: str = "run", *, status: str = "ok", model: str = "resnet18",
        dataset: str = "synthetic-loader", strategy: str = "single", nproc: int = 1, batch: int = 32,
        workers: int = 2, loader: str = "pipelined", transform: str = "light", step_s: float = 0.1,
        bd: dict[str, float] | None = None, sps: float | None = None, host_mem: int | None = 2 * GIB,
        device_mem: int | None = None, gpu_total: int | None = None, cpu: float | None = 60.0,
        gpu: float | None = None, accuracy: float | None = None, rel_ci: float | None = 0.01,
        cores: int = 4, threads: int = 2, experiment: dict[str, Any] | None = None,
        epoch_s: float | None = None, error: str | None = None, **extra: Any) -> dict[str, Any]:
    cfg = {"model": {"name": model}, "data": {"dataset": dataset, "workers": workers,
                                              "loader": loader, "transform": transform,
                                              "prefetch": 2, "image_size": 64},
           "train": {"batch_size": batch}, "dist": {"strategy": strategy, "nproc": nproc,
                                                    "nnodes": 1, "bucket_cap_mb": 25.0}}
    rec = res.new_run_record(cfg, f"id-{name}", name, f"key-{name}")
    rec["status"], rec["error"] = status, error
    gpus = [{"index": 0, "name": "Test GPU", "memory_total_bytes": gpu_total}] if gpu_total else []
    rec["env"] = {"host": "testhost", "cores": cores, "cpu_model": "Test CPU", "torch": "2.5",
                  "gpus": gpus, "threads": threads, "world_size": nproc, "local_world_size": nproc}
    rec["batch"] = {"per_device": batch, "global": batch * nproc, "world_size": nproc}
    rec["experiment"] = experiment
    if status != "ok":
        rec["null_reasons"] = {"step_time_s": "the run did not finish"}
        rec.update(extra)
        return rec
    bd = bd or breakdown(step_s)
    total = sum(bd.values())
    m = rec["metrics"]
    m["samples_per_s"] = sps if sps is not None else batch * nproc / step_s
    m["step_time_s"] = {"median": step_s, "p95": step_s * 1.2, "mean": step_s * 1.05,
                        "min": step_s * 0.9, "max": step_s * 1.5, "n": 50, "rel_ci": rel_ci}
    m["breakdown_s"] = bd
    m["data_wait_fraction"] = bd["data"] / total
    m["comm_fraction"] = bd["comm"] / total
    m["epoch_time_s"] = epoch_s if epoch_s is not None else step_s * 100
    m["epoch_time_projected"] = epoch_s is None
    m["peak_mem_bytes"].update(host=host_mem, device_allocated=device_mem)
    m["cpu_util_pct"], m["gpu_util_pct"], m["accuracy"] = cpu, gpu, accuracy
    if gpu is None:
        rec["null_reasons"]["gpu_util_pct"] = "no NVML reading"
    if accuracy is None:
        rec["null_reasons"]["accuracy"] = "not evaluated (add --eval)"
    for k, v in extra.items():
        rec[k] = v
    return rec


def sweep_point(eid: str, repeat: int | None = None, **point: Any) -> dict[str, Any]:
    """A sweep run's ``experiment``; ``repeat`` (its repeat index) only when given."""
    exp = {"id": eid, "kind": "sweep", "point": point}
    return exp if repeat is None else {**exp, "repeat": repeat}


def scale_point(eid: str, nproc: int) -> dict[str, Any]:
    return {"id": eid, "kind": "scale", "point": {"nproc": nproc}}


def comm_record() -> dict[str, Any]:
    rows = []
    for size in (1024, 1 << 20, 16 << 20):
        t = 5e-5 + 6e-10 * size
        rows.append({"op": "all_reduce", "size_bytes": size, "time_s": t * 1.05,
                     "algbw_gbyte_s": size / t / 1e9, "busbw_gbyte_s": size / t / 1e9})
        rows.append({"op": "ps_push_pull", "size_bytes": size, "time_s": 1.6 * t,
                     "algbw_gbyte_s": size / t / 1.6e9, "busbw_gbyte_s": size / t / 1.6e9})
    return {"kind": "comm", "schema": 1, "experiment": {"id": "comm-1", "kind": "comm"},
            "env": {"host": "testhost", "cores": 4}, "backend": "gloo", "world_size": 2,
            "rows": rows,
            "fit": {"all_reduce": {"alpha_s": 5e-5, "beta_s_per_byte": 6e-10,
                                   "bandwidth_gbit_s": 13.3},
                    "ps_push_pull": {"alpha_s": 8e-5, "beta_s_per_byte": 9.6e-10,
                                     "bandwidth_gbit_s": 8.3}}}


def colocate_record(placement: str = "shared", legacy: bool = False) -> dict[str, Any]:
    """A colocate record over 3 repeats; ``legacy``: as written before repeats (no intervals)."""
    def iv(est: float, lo: float, hi: float) -> dict[str, Any]:
        return {"estimate": est, "lo": lo, "hi": hi, "n": 3,
                "method": "paired t on log ratios, 3 repeats", "log_sd": 0.02}

    rec = {"kind": "colocate", "schema": 1, "experiment": {"id": "co-1", "kind": "colocate"},
           "placement": placement, "repeats": 3,
           "jobs": [{"name": "a", "alone_samples_per_s": 100.0, "together_samples_per_s": 55.0,
                     "alone_epoch_time_s": 10.0, "together_epoch_time_s": 18.0,
                     "slowdown": 1.8, "slowdown_interval": iv(1.8, 1.7, 1.9),
                     "reading": "slower together"},
                    {"name": "b", "alone_samples_per_s": 80.0, "together_samples_per_s": 50.0,
                     "alone_epoch_time_s": 12.0, "together_epoch_time_s": 19.2,
                     "slowdown": 1.6, "slowdown_interval": iv(1.6, 1.5, 1.7),
                     "reading": "slower together"}],
           "total_samples_per_s_alone_sum": 180.0, "total_samples_per_s_together": 105.0,
           "cpu_util_pct_together": 98.0, "gpu_util_pct_together": None,
           "verdict": "CPU saturated", "evidence": "CPU 98% while together"}
    if legacy:
        del rec["repeats"]
        for j in rec["jobs"]:
            del j["slowdown_interval"], j["reading"]
    return rec


def parity_record(ok: bool = True, legacy: bool = False) -> dict[str, Any]:
    """A parity record over 3 seeds (``ok``: holds, else broken); ``legacy``: one seed, a fixed
    tolerance, no verdict (as written before repeats)."""
    rec = {"kind": "parity", "schema": 1, "experiment": {"id": "par-1", "kind": "parity"},
           "accuracy_1": 0.95, "accuracy_n": 0.94 if ok else 0.80, "nproc": 2,
           "difference": -0.01 if ok else -0.15, "within_tolerance": ok}
    if legacy:
        return rec
    return {**rec, "repeats": 3, "global_batch": 64, "seeds": [0, 1, 2],
            "difference_interval": {"estimate": rec["difference"],
                                    "lo": rec["difference"] - 0.005,
                                    "hi": rec["difference"] + 0.005},
            "tolerance": 0.02, "tolerance_rule": "max(0.010, 2 x pooled seed-to-seed sd 0.0100)",
            "verdict": "parity holds" if ok else "parity broken",
            "verdict_text": "difference (N - 1) ... within" if ok else "... outside"}


def with_(rec: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    """A copy of ``rec`` with one nested field set: with_(r, "metrics.cpu_util_pct", 97)."""
    out = copy.deepcopy(rec)
    cur = out
    parts = dotted.split(".")
    for p in parts[:-1]:
        cur = cur.setdefault(p, {})
    cur[parts[-1]] = value
    return out


def write_results(folder: Path, records: list[dict[str, Any]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / res.RESULTS_FILE
    with path.open("w") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")
    return path


def write_monitor_csv(path: Path, n: int = 12, gpu: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["t_s,cpu_util_pct,host_mem_bytes,gpu_util_pct,gpu_mem_bytes,gpu_power_w"]
    for i in range(n):
        g = f"{50 + i},{1 << 30},{120.5}" if gpu else ",,"
        lines.append(f"{100 + 0.5 * i},{40 + 3 * i},{(1 << 30) + i},{g}")
    path.write_text("\n".join(lines) + "\n")
    return path


def loaded(x: Any) -> Any:
    """Records as the report reads them (``report/reading/records.load_records``): each JSON record a
    typed one (``_source`` kept as its ``source``); lists element by element; anything else
    (table rows, numbers) as it is."""
    if isinstance(x, list):
        return [loaded(r) for r in x]
    if isinstance(x, dict) and isinstance(x.get("kind"), str):
        rec = typed(x)
        if isinstance(x.get("_source"), str):
            rec.source = x["_source"]
        return rec
    return x


def typed_api(fn: Any) -> Any:
    """``fn`` taking the hand-built JSON records of these tests as the report reads them."""
    @functools.wraps(fn)
    def call(*args: Any, **kw: Any) -> Any:
        return fn(*(loaded(a) for a in args), **{k: loaded(v) for k, v in kw.items()})
    return call


class typed_module:  # noqa: N801  (stands in for a module)
    """A report module whose functions take the tests' JSON records (``typed_api``)."""

    def __init__(self, mod: ModuleType) -> None:
        self._mod = mod

    def __getattr__(self, name: str) -> Any:
        v = getattr(self._mod, name)
        return typed_api(v) if callable(v) and not isinstance(v, type) else v
