"""The result schema, its typed model and its files. No torch import: reports run anywhere.

Every record below has a dataclass in ``scaleprobe.core.result_model``, re-exported here (``RunResult``,
``SweepRecord``, ``ColocateRecord``, ``ParityRecord``; ``typed(rec)`` picks one by ``kind``)
that reads and writes exactly this JSON; ``assemble.build_result`` makes a ``RunResult`` from
the ranks' ``RankRecord``s.

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
    status            "ok" | "oom" | "failed" | "interrupted" | "target_not_reached" (a run
                      with --target that ended at --max-epochs below it: its figures are
                      complete measurements; ``target`` holds the best value and when). A
                      record read without one reads as "unknown" (shown "unknown (older
                      record without a status)"), never as "failed"
    error             null or one line
    partial           true when an interrupted run kept the steps timed so far: its figures
                      cover those steps (the reason in null_reasons.partial); absent otherwise
    started_at, finished_at   ISO-8601 UTC
    config            RunConfig.to_dict()
    resolved          {"data.image_size", "data.num_classes"}: what the run resolved these
                      to when the config left them null (the dataset's own), so runs are
                      compared like for like on what they measured; --task lm adds
                      "data.seq_len", "data.vocab_size" and the GPT shape built
                      ("model.layers", "model.width", "model.heads", "model.context")
    input_mode        "device-resident": --dataset synthetic, one batch per rank made once on
                      the training device and reused every step (no loader, data wait ~0);
                      "loader": every other dataset, through data/loader.py
    env               host, cores, cpu_model, python, torch, cuda, cudnn, gpus[], driver,
                      world_size, nnodes, backend
    batch             {per_device, global, world_size, tokens_per_sample (token tasks: the
                      sequence length; null for images)}
    metrics           samples_per_s, samples_per_s_by_rank {rank: samples/s},
                      tokens_per_s (token tasks: samples_per_s x batch.tokens_per_sample),
                      unigram_entropy_nats (lm: the training split's, nats per token),
                      step_time_s {median, p95, mean, min, max, n, rel_ci}, step_time_rank,
                      breakdown_s {data, h2d, forward, backward, optimizer, comm},
                      data_wait_fraction, comm_fraction, epoch_time_s, epoch_time_projected,
                      steps_per_epoch, steps_timed, stop_reason (why the timed window
                      ended: steps | stable | max-steps | max-seconds | peer | epochs |
                      target | max-epochs | interrupted | script | failed; the last two:
                      wrap's script ended on its own, a rank died or hung),
                      epoch_starts_timed, epoch_start_data_s,
                      epoch_start_data_share, epoch_start_window_share,
                      epoch_start_other_data_s (the timed steps that took an epoch's first
                      batch: how many, their median wait for it, the waits' share of the
                      data wait and of the timed window, the other steps' median data
                      wait), window_s, window_clock [start, end] (the timed window,
                      wall clock, seconds since the epoch),
                      peak_mem_bytes {host, host_baseline,
                      host_file_growth, host_net, device_allocated, device_reserved,
                      device_nvml},
                      cpu_util_pct, gpu_util_pct, gpu_power_w, joules_per_sample,
                      joules_per_token, joules_to_target, energy_method (NVML energy
                      counter, else sampled power, over the timed window; null with the
                      reason without an NVIDIA GPU), accuracy, loss_first,
                      loss_last, bad_samples_skipped, flops_per_step, flops_per_sample,
                      achieved_flops_per_s, mfu, peak {flops_per_s, devices, dtype,
                      device_name, source, measured},
                      state_bytes {params_bytes, grads_bytes, optimizer_bytes, total_bytes,
                      rank, by_rank [{rank, params_bytes, grads_bytes, optimizer_bytes,
                      total_bytes, host_peak_rss, device_allocated, device_reserved}],
                      read_at}: the training state each rank holds (measure/held.py: local
                      shards under fsdp, full copies otherwise), the largest rank's at the
                      top, each rank's with its own measured peak memory beside it,
                      memory_facts {param_count, param_numel_by_dtype, optimizer,
                      optimizer_states_per_param, optimizer_bytes_per_param,
                      optimizer_scalar_bytes, master_bytes_per_param, largest_unit_bytes,
                      second_unit_bytes, root_unit_bytes, batch_sizes, fwd_bwd_peak_bytes,
                      optimizer_peak_bytes, input_bytes, probe_margin, probe_s, device,
                      method, strategy, world, reasons}: what a memory prediction
                      reads (measure/memstate.py, predict/memmodel.py, docs/MEMORY.md),
                      (task metrics: verification_accuracy, map50; lm: loss (held-out,
                      mean nats per token), perplexity, eval_tokens, baseline_loss (the
                      context-free baseline on the same held-out tokens), baseline_margin,
                      baseline_margin_lo, baseline_margin_hi, baseline_windows)
                      samples_per_s: the sum over the training ranks of each one's
                      samples per step / its own median step (= global batch / step time
                      when ranks move in lockstep; with an asynchronous parameter server
                      the workers' rates differ), each in samples_per_s_by_rank.
                      step_time_s and breakdown_s are one training rank's: step_time_rank
                      (the first that trained; ranks[] holds every rank's).
                      peak_mem_bytes.host: peak resident memory of the training processes
                      plus their loader workers' unique memory (torch itself included);
                      host_baseline: the ranks' resident memory summed, each read before
                      its model and data were built (torch imported);
                      host_file_growth: file-backed resident pages (library code) the
                      ranks first touched after it; host_net = the ranks' own peaks
                      summed - host_baseline - host_file_growth, the part the run's
                      settings (batch, model) move (loader workers count in host only).
                      flops_per_step: FLOPs of one step of every training rank, counted
                      once on the first warm-up step (measure/flops.py: forward + backward,
                      2 per multiply-add, optimizer and element-wise operators 0);
                      achieved_flops_per_s = flops_per_sample x samples_per_s; mfu = that /
                      (peak.flops_per_s x peak.devices), the peak from a data sheet
                      (measure/peaks.py) or measured ("measured peak", cached per machine);
                      a compiled model is counted once on its eager module with fake
                      tensors, after the window (measure/fakeflops.py)
                      compile_time_s, compiles, recompiles, compiles_in_window,
                      recompiles_in_window, compile_in_window_s, graph_breaks: torch.compile's
                      compilations (measure/compiled.py; the in-window ones: the most of
                      any rank); null with the reason when nothing was compiled
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
                        phase; fsdp: the time blocked on its collectives, measured in the
                        step. 0 at world size 1, where nothing is communicated
      exposed_per_step  measured in the step (fsdp): {median_s, interval_s [lo, hi], steps,
                        resolved, method}: the per-step figure's median and its 95% interval
                        over the timed steps; resolved false when the interval reaches 0
      cross_check       fsdp: the no_sync calibration beside it {sync_step_s,
                        no_sync_step_s, difference_s, interval_s, resolved, pairs, samples,
                        method}; never moved into the breakdown
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
      prediction        the network model (predict/costmodel.py) for the link --link named
      prediction_measured_link   the model for the measured link, when --link named another
                        (a run on loopback is compared only with the loopback prediction)
      strategy_metrics, server   the strategy's own figures (ps: the server's)
    load              {flag, reason, outside_cpu_cores, limit_cores, machine_cores, window_s,
                      gpu_processes [{device, pid, name, used_memory_bytes}] or null}:
                      flag = measured under load (rule: core/thresholds.py
                      Thresholds.under_load); null when neither figure was measured
    target            null without --target; else (docs/TIME_TO_TARGET.md, target.py):
                      metric, target, reached, time_to_target_s (training wall clock from
                      the first step to the evaluation that reached it, evaluation time
                      excluded), eval_time_s (that evaluation time, every evaluation's),
                      steps_to_target, epochs_to_target, samples_to_target (global),
                      best_value, best_at_s, best_at_epoch, best_at_samples, evaluations,
                      eval_every_steps (null: every epoch), max_epochs, rule, curve [{
                      evaluation, step, epoch, samples, train_wall_s, eval_s, value}] (also
                      OUT/<run>/target_curve.csv); null figures when not reached
    gns               absent unless measured (--gns; on by default under DDP with 2+
                      processes): the gradient noise scale (gns.py, docs/CRITICAL_BATCH.md):
                      b_simple (samples) with b_simple_lo/b_simple_hi (95%, block bootstrap
                      over the timed steps), b_noise_path, grad_sq (|G|^2), trace_sigma
                      (tr(Sigma) per sample), steps, b_small, b_big, global_batch, method
                      (ddp_hook | micro_batches), smoothing, series [{step, steps, samples,
                      b_simple}]; asked for and not measured: null_reasons.gns
    experiment        {id, kind, point} when the run belongs to a sweep / scale / ...;
                      a run is identified by experiment id + point (+ ``repeat``, the repeat
                      index, when present), never by its name; ``start``: how the
                      point's process started, "fork" (from the preloaded server) or
                      "exec" (a fresh interpreter; experiments/procs.py)
    paths             {dir, steps_csv, monitor_csv, traces[], tensorboard}
    compile           null when nothing was compiled; else {mode (`run --compile-mode`; null
                      under wrap), method, graph_breaks, graph_break_reasons [{reason,
                      count}] (dynamo's, the 5 most frequent), events [{kind (dynamo | backward |
                      cudagraph | ...), compile_id, phase (warm-up | window | after),
                      duration_s, at_s (from the window's start), step, timed_step,
                      recompile, reason (the guard that failed)}]}: the first training rank's

A value that was not measured is ``null``, with its reason in ``null_reasons``; never 0.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from scaleprobe.core.errors import OutputError
from scaleprobe.core.experiment_records import ColocateRecord, ParityRecord, SweepRecord, typed
from scaleprobe.core.result_model import Experiment, RunResult
from scaleprobe.core.run_metrics import Breakdown, Metrics, PeakMem, StepTime
from scaleprobe.core.run_parts import Audit, Batch, Comm, Load

# the record's types, read from here by README's "Reading results from Python" (the
# reading and writing below is this module's own)
__all__ = [
    "Audit", "Batch", "Breakdown", "ColocateRecord", "Comm", "Experiment", "Load", "Metrics",
    "ParityRecord", "PeakMem", "RunResult", "StepTime", "SweepRecord", "typed",
]


try:  # fcntl is POSIX-only; on other systems appends are still whole-line writes
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

RESULTS_FILE = "results.jsonl"
RESULTS_FILE_ENV = "SCALEPROBE_RESULTS_FILE"


def results_file(out: str | Path) -> Path:
    """Where a run appends its record: ``OUT/results.jsonl``, or the file named by
    SCALEPROBE_RESULTS_FILE (a Slurm job's own file; the process that submitted the job
    appends the record to OUT/results.jsonl, so jobs never write one file at once)."""
    override = os.environ.get(RESULTS_FILE_ENV)
    return Path(override) if override else Path(out) / RESULTS_FILE


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def new_run_record(config: dict[str, Any], run_id: str, name: str, key: str) -> dict[str, Any]:
    """A run's record before it ran (status "failed" until it ends otherwise)."""
    rec = RunResult(run_id=run_id, name=name, key=key, started_at=utc_now()).to_dict()
    return {**rec, "config": config}


def make_run_id(name: str | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    suffix = f"{os.getpid() % 100000:05d}{time.perf_counter_ns() % 1000:03d}"
    base = f"{stamp}-{suffix}"
    if name:
        safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)[:40]
        base = f"{base}-{safe}"
    return base


OUTPUT_REASONS = {errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
                  errno.EPERM: "permission denied", errno.ENOSPC: "no space left on device",
                  errno.EDQUOT: "disk quota exceeded", errno.ENOTDIR: "not a folder"}


def output_error(path: str | Path, e: OSError, verb: str = "cannot write") -> OutputError:
    """One line naming the path and why: ``cannot write OUT/result.json: read-only file system``."""
    reason = OUTPUT_REASONS.get(e.errno or 0) or e.strerror or str(e)
    return OutputError(f"{verb} {path}: {reason}")


def free_bytes(folder: str | Path) -> int | None:
    """Bytes an unprivileged writer may still use on ``folder``'s file system."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _kib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n // 1024} KiB"


def check_writable(folder: str | Path, need_bytes: int = 0, what: str = "the results") -> Path:
    """Preflight of an output folder: create it, create and remove a file in it, and check
    that ``need_bytes`` are free. Raises OutputError (one line naming the folder)."""
    d = Path(folder)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise output_error(d, e, "cannot create the output folder") from None
    if not d.is_dir():
        raise OutputError(f"output folder {d} is not a folder")
    probe = d / f".scaleprobe-probe.{os.getpid()}.tmp"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as e:
        raise output_error(d, e, "cannot write in the output folder") from None
    probe.unlink(missing_ok=True)
    free = free_bytes(d)
    if need_bytes and free is not None and free < need_bytes:
        raise OutputError(f"not enough free space in {d}: {_kib(free)} free, {what} need "
                          f"about {_kib(need_bytes)}")
    return d


def _mkdir(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise output_error(folder, e, "cannot create the output folder") from None


def write_text_atomic(path: str | Path, text: str | bytes) -> None:
    """Write via a temporary file (``.<name>.<pid>.tmp``) and rename, so a crash never leaves
    half a file; on failure (read-only, full disk) the temporary file is removed and an
    OutputError names the path."""
    p = Path(path)
    _mkdir(p.parent)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    data = text.encode() if isinstance(text, str) else text
    try:
        with tmp.open("wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except OSError as e:
        _remove(tmp)
        raise output_error(p, e) from None
    except BaseException:
        _remove(tmp)
        raise


def _remove(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:  # a read-only folder, where the file was never created
        pass


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """Write via a temporary file and rename, so a crash never leaves half a file."""
    write_text_atomic(path, json.dumps(obj, indent=2, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, (set, tuple)):
        return list(o)
    return str(o)


def append_jsonl(path: str | Path, record: dict[str, Any]) -> None:
    """Append one complete line, under an exclusive lock, flushed to disk: whole or not at all.

    The line goes out in one ``os.write`` after a check that the file system has room for it;
    a short write (the disk filled meanwhile) is cut back to the previous size, so the file
    never ends in part of this record. If the file already ends in a torn line (a writer
    killed mid-write), a newline is written first, so the new record starts on its own line.
    Raises OutputError (naming the file) when the line cannot be written.
    """
    p = Path(path)
    _mkdir(p.parent)
    line = (json.dumps(record, default=_json_default, separators=(",", ":")) + "\n").encode()
    try:
        fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as e:
        raise output_error(p, e) from None
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        _append_whole(fd, p, line)
    finally:
        os.close(fd)  # closing releases the lock


def _append_whole(fd: int, p: Path, line: bytes) -> None:
    size = os.fstat(fd).st_size
    if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
        line = b"\n" + line
    free = free_bytes(p.parent)
    if free is not None and free < len(line):
        raise output_error(p, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    try:
        written = os.write(fd, line)
        if written != len(line):
            raise OSError(errno.ENOSPC, f"short write ({written} of {len(line)} bytes)")
        os.fsync(fd)
    except OSError as e:
        try:
            os.ftruncate(fd, size)
        except OSError:  # pragma: no cover  (truncating never needs space)
            pass
        raise output_error(p, e) from None


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
            elif warn:  # valid JSON, but no record: warned like a torn line, not dropped silently
                print(f"warning: {p}:{n}: skipping a line that is not a record (a JSON "
                      f"{_json_kind(rec)}, not an object)", file=sys.stderr)
    return out


def _json_kind(v: Any) -> str:
    return {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(v), "number")


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
