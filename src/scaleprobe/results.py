"""The result schema and its files. No torch import: reports run anywhere.

One run writes ``OUT/<run_id>/result.json`` and appends the same record as one line to
``OUT/results.jsonl``. Experiments (sweep, scale, colocate, parity) append their own
summary records to the same kind of file. Every record is a JSON object with ``kind``.

A run record (``kind == "run"``)::

    schema            2 (1: before repeats, invariants, load and the communication split;
                      the report reads both: a missing field reads as not measured)
    kind              "run"
    run_id            folder name under OUT
    name              user label or a generated one
    key               hash of the resolved config (sweeps resume by it)
    status            "ok" | "oom" | "failed" | "interrupted"
    error             null or one line
    partial           true when an interrupted run kept the steps timed so far: its figures
                      cover those steps (the reason in null_reasons.partial); absent otherwise
    started_at, finished_at   ISO-8601 UTC
    config            RunConfig.to_dict()
    resolved          {"data.image_size", "data.num_classes"}: what the run resolved these
                      to when the config left them null (the dataset's own), so runs are
                      compared like for like on what they measured
    env               host, cores, cpu_model, python, torch, cuda, cudnn, gpus[], driver,
                      world_size, nnodes, backend
    batch             {per_device, global, world_size}
    metrics           samples_per_s, samples_per_s_by_rank {rank: samples/s},
                      step_time_s {median, p95, mean, min, max, n, rel_ci}, step_time_rank,
                      breakdown_s {data, h2d, forward, backward, optimizer, comm},
                      data_wait_fraction, comm_fraction, epoch_time_s, epoch_time_projected,
                      steps_per_epoch, steps_timed, peak_mem_bytes {host, host_baseline,
                      host_net, device_allocated, device_reserved, device_nvml},
                      cpu_util_pct, gpu_util_pct, gpu_power_w, accuracy, loss_first,
                      loss_last, bad_samples_skipped,
                      (task metrics: verification_accuracy, map50)
                      samples_per_s: the sum over the training ranks of each one's
                      samples per step / its own median step (= global batch / step time
                      when ranks move in lockstep; with an asynchronous parameter server
                      the workers' rates differ), each in samples_per_s_by_rank.
                      step_time_s and breakdown_s are one training rank's: step_time_rank
                      (the first that trained; ranks[] holds every rank's).
                      peak_mem_bytes.host: peak resident memory of the training processes
                      plus their loader workers' unique memory (torch itself included);
                      host_baseline: the ranks' resident memory summed, each read before
                      its model and data were built (torch imported); host_net = host -
                      host_baseline, the part the run's settings (batch, model) move.
                      cpu_util_pct: the run's own process tree, as % of all cores (not
                      the machine's)
                      outside_cpu_s (CPU seconds that processes outside the run's process
                      tree used over the monitor samples enclosing the timed window:
                      machine-wide user+nice+system minus the tree's), outside_cpu_cores
                      (the same as mean cores busy), outside_gpu_processes (other programs'
                      compute processes on the run's GPUs; null without NVML)
    null_reasons      {metric name: why it is null}
    ranks             per-rank: rank, host, step_time_s, breakdown_s, steps_done, samples_per_s
    straggler         {slowest_rank, slowest_vs_median, steps_done} or null
    audit             {ok, duplicate_samples, missing_samples, same_order_across_epochs, detail}
    comm              null for in-process strategies (single, dp); else (docs/COMMUNICATION.md):
      exposed_s, exposed_fraction   communication the step waits for (breakdown_s.comm):
                        ddp: sync minus no_sync calibration; ps / local SGD: the timed comm
                        phase. 0 at world size 1, where nothing is communicated
      sync_step_s, no_sync_step_s, sync_cost_s, samples, method   ddp's calibration: medians
                        of fwd+bwd with / without gradient sync (alternating, first of each
                        dropped), their difference clipped at 0, the raw samples
      wrapper_overhead_s, wrapper_overhead_method   world size 1 only: ddp's sync_cost_s,
                        which is its hooks and bucket copies, not communication (left inside
                        backward); null otherwise
      transfer_s, transfer_method   the network's part of exposed_s: the standalone
                        collective (below), at most exposed_s
      sync_overhead_s, sync_overhead_method   exposed_s - transfer_s: hooks, bucketing,
                        waiting for the slowest rank; transfer_s + sync_overhead_s = exposed_s
      transfer_hidden_s the part of the standalone collective that did not show in the step
      transfer_standalone   {op, bytes, times_s, median_s, every, per_step_s, method}: the
                        strategy's own collective for one synchronisation's bytes, timed on
                        the run's process group after training (median of a few repeats,
                        slowest rank each); per_step_s = median_s / every (local SGD: K)
      measured_link     {name, why}: the link the communication crossed (loopback on one
                        host; the --link named across hosts; null name when unknown)
      prediction        the network model (comm/model.py) for the link --link named
      prediction_measured_link   the model for the measured link, when --link named another
                        (a run on loopback is compared only with the loopback prediction)
      strategy_metrics, server   the strategy's own figures (ps: the server's)
    load              {flag, reason, outside_cpu_cores, limit_cores, machine_cores, window_s,
                      gpu_processes [{device, pid, name, used_memory_bytes}] or null}:
                      flag = measured under load (rule: report/thresholds.py
                      Thresholds.under_load); null when neither figure was measured
    experiment        {id, kind, point} when the run belongs to a sweep / scale / ...;
                      a run is identified by experiment id + point (+ ``repeat``, the repeat
                      index, when present), never by its name
    paths             {dir, steps_csv, monitor_csv, traces[], tensorboard}

A value that was not measured is ``null``, with its reason in ``null_reasons``; never 0.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

try:  # fcntl is POSIX-only; on other systems appends are still whole-line writes
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

SCHEMA = 2
STATUSES = ("ok", "oom", "failed", "interrupted")
BREAKDOWN_PHASES = ("data", "h2d", "forward", "backward", "optimizer", "comm")
RESULTS_FILE = "results.jsonl"


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def empty_metrics() -> dict[str, Any]:
    return {
        "samples_per_s": None,
        "samples_per_s_by_rank": None,
        "step_time_s": None,
        "step_time_rank": None,
        "breakdown_s": dict.fromkeys(BREAKDOWN_PHASES),
        "data_wait_fraction": None,
        "comm_fraction": None,
        "epoch_time_s": None,
        "epoch_time_projected": None,
        "steps_per_epoch": None,
        "steps_timed": 0,
        "peak_mem_bytes": {
            "host": None,
            "host_baseline": None,
            "host_net": None,
            "device_allocated": None,
            "device_reserved": None,
            "device_nvml": None,
        },
        "cpu_util_pct": None,
        "gpu_util_pct": None,
        "gpu_power_w": None,
        "accuracy": None,
        "loss_first": None,
        "loss_last": None,
        "bad_samples_skipped": 0,
        "outside_cpu_s": None,
        "outside_cpu_cores": None,
        "outside_gpu_processes": None,
    }


def new_run_record(config: dict[str, Any], run_id: str, name: str, key: str) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "kind": "run",
        "run_id": run_id,
        "name": name,
        "key": key,
        "status": "failed",
        "error": None,
        "started_at": utc_now(),
        "finished_at": None,
        "config": config,
        "env": {},
        "batch": {},
        "metrics": empty_metrics(),
        "null_reasons": {},
        "ranks": [],
        "straggler": None,
        "audit": None,
        "comm": None,
        "load": None,
        "experiment": None,
        "paths": {},
    }


def make_run_id(name: str | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    suffix = f"{os.getpid() % 100000:05d}{time.perf_counter_ns() % 1000:03d}"
    base = f"{stamp}-{suffix}"
    if name:
        safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)[:40]
        base = f"{base}-{safe}"
    return base


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """Write via a temporary file and rename, so a crash never leaves half a file."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    with tmp.open("w") as fh:
        json.dump(obj, fh, indent=2, default=_json_default)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, p)


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, (set, tuple)):
        return list(o)
    return str(o)


def append_jsonl(path: str | Path, record: dict[str, Any]) -> None:
    """Append one complete line, under an exclusive lock, flushed to disk.

    If the file ends in a torn line (a writer killed mid-write), a newline is written first,
    so the new record always starts on its own line.
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(record, default=_json_default, separators=(",", ":")) + "\n"
    with p.open("a+b") as fh:
        if fcntl is not None:
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            fh.seek(0, os.SEEK_END)
            if fh.tell() > 0:
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":
                    fh.write(b"\n")
            fh.write(line.encode())
            fh.flush()
            os.fsync(fh.fileno())
        finally:
            if fcntl is not None:
                fcntl.flock(fh, fcntl.LOCK_UN)


def read_jsonl(path: str | Path, warn: bool = True) -> list[dict[str, Any]]:
    """All complete records; a torn or corrupt line is skipped with a warning, never raised."""
    p = Path(path)
    if not p.exists():
        return []
    out: list[dict[str, Any]] = []
    with p.open("rb") as fh:
        for n, raw in enumerate(fh, 1):
            raw = raw.strip()
            if not raw:
                continue
            try:
                rec = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                if warn:
                    print(f"warning: {p}:{n}: skipping a torn or corrupt line", file=sys.stderr)
                continue
            if isinstance(rec, dict):
                out.append(rec)
    return out


def find_results(path: str | Path) -> list[dict[str, Any]]:
    """Records from a results.jsonl, a folder holding one (searched recursively), or a result.json."""
    p = Path(path)
    if p.is_file() and p.suffix == ".json":
        with p.open() as fh:
            return [json.load(fh)]
    if p.is_file():
        return read_jsonl(p)
    recs: list[dict[str, Any]] = []
    for f in sorted(p.rglob(RESULTS_FILE)):
        recs.extend(read_jsonl(f))
    return recs


def runs(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r.get("kind") == "run"]


def get(rec: dict[str, Any], dotted: str, default: Any = None) -> Any:
    """``get(rec, "metrics.step_time_s.median")``; missing or null parts give ``default``."""
    cur: Any = rec
    for part in dotted.split("."):
        if not isinstance(cur, dict) or cur.get(part) is None:
            return default
        cur = cur[part]
    return cur
