"""Turn the ranks' raw records into the result's metrics, then write result.json, steps.csv
and one results.jsonl line."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from scaleprobe import metrics as M
from scaleprobe import results as res
from scaleprobe.config import RunConfig
from scaleprobe.invariants import check_run
from scaleprobe.measure.audit import audit
from scaleprobe.measure.summary import PHASES, epoch_time, rank_summary, straggler
from scaleprobe.traits import traits_of


def _write_steps_csv(path: Path, raw0: dict[str, Any]) -> None:
    phases = raw0["phase_times_s"]
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["step", "step_time_s", *[f"{p}_s" for p in PHASES]])
        for i, t in enumerate(raw0["step_times_s"]):
            w.writerow([i, f"{t:.6f}", *[f"{phases[p][i]:.6f}" if i < len(phases[p]) else ""
                                         for p in PHASES]])


def _memory(rec: dict[str, Any], raws: list[dict[str, Any]], mon: dict[str, Any]) -> None:
    m, why = rec["metrics"]["peak_mem_bytes"], rec["null_reasons"]
    rss = [r["mem"]["host_peak_rss"] for r in raws if r["mem"]["host_peak_rss"]]
    cand = [v for v in (mon.get("host_mem_peak_bytes"), sum(rss) if rss else None) if v]
    m["host"] = max(cand) if cand else None
    _host_net(m, why, raws)
    alloc = [r["mem"]["device_allocated"] for r in raws if r["mem"]["device_allocated"] is not None]
    resv = [r["mem"]["device_reserved"] for r in raws if r["mem"]["device_reserved"] is not None]
    m["device_allocated"] = max(alloc) if alloc else None
    m["device_reserved"] = max(resv) if resv else None
    m["device_nvml"] = mon.get("gpu_mem_peak_bytes")
    if not alloc:
        why["peak_mem_bytes.device_allocated"] = "no CUDA device: ran on the CPU"
        why["peak_mem_bytes.device_reserved"] = "no CUDA device: ran on the CPU"
    if m["device_nvml"] is None:
        why["peak_mem_bytes.device_nvml"] = mon.get("gpu_reason") or "no NVML reading"


def _host_net(m: dict[str, Any], why: dict[str, str], raws: list[dict[str, Any]]) -> None:
    """Host peak net of what every rank held before its model and data were built (torch
    itself, about 750 MiB on the CPU): the part of the peak that the run's settings move."""
    base = [r["mem"].get("host_baseline_rss") for r in raws]
    m["host_baseline"] = sum(base) if base and all(base) else None
    m["host_net"] = None
    if m["host_baseline"] is None:
        why["peak_mem_bytes.host_baseline"] = "no resident-memory reading before the model was built"
        why["peak_mem_bytes.host_net"] = why["peak_mem_bytes.host_baseline"]
    elif m["host"] is None:
        why["peak_mem_bytes.host_net"] = "no host peak reading"
    elif m["host"] < m["host_baseline"]:
        why["peak_mem_bytes.host_net"] = "host peak below the baseline: inconsistent readings"
    else:
        m["host_net"] = m["host"] - m["host_baseline"]


def _metrics(rec: dict[str, Any], cfg: RunConfig, raws: list[dict[str, Any]],
             mon: dict[str, Any]) -> None:
    m, why = rec["metrics"], rec["null_reasons"]
    ranks = [rank_summary(r) for r in raws]
    rec["ranks"] = ranks
    # the headline is the first rank that trained (a parameter server's rank 0 does not)
    head = next((i for i, r in enumerate(raws) if r["step_times_s"]), 0)
    raw0, r0 = raws[head], ranks[head]
    trainers = [r for r in ranks if r["step_time_s"]]
    world = len(raws)
    per_proc = raw0["samples_per_step"]
    global_batch = per_proc * max(1, len(trainers))
    rec["batch"] = {"per_device": per_proc // max(1, raw0.get("towers", 1)),
                    "per_process": per_proc,
                    "global": global_batch, "world_size": world,
                    "training_ranks": len(trainers)}
    st = r0["step_time_s"]
    m["step_time_s"] = st
    m["steps_timed"] = raw0["steps_timed"]
    m["steps_done"] = raw0["steps_done"]
    m["breakdown_s"] = r0["breakdown_s"]
    if st:
        typical = sum(r0["breakdown_s"].values())
        # sum over training ranks: equals global batch / step time when ranks move in
        # lockstep, and stays right when they do not (asynchronous parameter server)
        m["samples_per_s"] = sum(r["samples_per_s"] for r in trainers)
        m["samples_per_s_by_rank"] = {str(r["rank"]): r["samples_per_s"] for r in trainers}
        m["step_time_rank"] = r0["rank"]  # the step figures are this training rank's
        m["data_wait_fraction"] = r0["breakdown_s"]["data"] / typical if typical else None
        m["comm_fraction"] = r0["breakdown_s"]["comm"] / typical if typical else None
    else:
        why["step_time_s"] = "no step was timed (too few steps after warm-up?)"
        why["samples_per_s_by_rank"] = why["step_time_rank"] = why["step_time_s"]
    info = raw0["info"]
    m["param_count"] = info["param_count"]
    m["lr_effective"] = info["lr_effective"]
    spe = max(1, info["train_samples"] // max(1, len(trainers)) // per_proc)
    m["steps_per_epoch"] = spe
    m["epoch_time_s"], m["epoch_time_projected"] = epoch_time(raw0, st and st["median"], spe)
    m["epoch_times_s"] = raw0["epoch_wall_s"]
    m["cpu_util_pct"] = mon.get("cpu_util_pct")
    m["gpu_util_pct"] = mon.get("gpu_util_pct")
    m["gpu_power_w"] = mon.get("gpu_power_w")
    for k in ("gpu_util_pct", "gpu_power_w"):
        if m[k] is None:
            why[k] = mon.get("gpu_reason") or "no NVML reading"
    m["loss_first"], m["loss_last"] = raw0["loss_first"], raw0["loss_last"]
    m["bad_samples_skipped"] = sum(r["bad_samples"] for r in raws)
    ev = next((r["eval"] for r in raws if r.get("eval")), {})
    for k, v in ev.items():
        m[k] = v
    if not cfg.train.eval:
        why["accuracy"] = "not evaluated (add --eval)"
    _memory(rec, raws, mon)
    rec["straggler"] = straggler(trainers)
    _comm(rec, raw0, raws)
    # over the ranks that take batches: a parameter server reads no sample
    readers = [r["indices"] for r in raws if not r.get("is_server")]
    if traits_of(cfg.dist.strategy).audits_shards and cfg.dist.audit and world > 1 and readers:
        rec["audit"] = audit(readers, info["train_samples"], per_proc, raw0["epochs_complete"])
    rec["dataset_source"] = info["dataset_source"]
    rec["resolved"] = {"data.image_size": info["image_size"], "data.num_classes": info["num_classes"]}
    if raw0.get("threads"):  # what a training rank used, not the launching process's
        rec["env"]["threads"] = raw0["threads"]
    for r in raws:  # every rank's traces; the first trainer's top operators; TensorBoard
        for k, v in (r.get("observed") or {}).items():
            if k == "traces" and v:
                rec["paths"].setdefault("traces", []).extend(v)
            elif v and k not in rec["paths"]:
                rec["paths"][k] = v


def _comm(rec: dict[str, Any], raw0: dict[str, Any], raws: list[dict[str, Any]]) -> None:
    """The communication record: exposed time split into transfer + sync overhead, with
    the method of each; with one process, none (DDP's own cost is its wrapper overhead);
    the network model for the link the run was measured on next to the one it named."""
    from scaleprobe.comm.exposed import (
        ALONE_METHOD,
        OVERHEAD_METHOD,
        TRANSFER_METHOD,
        measured_link,
        split_exposed,
    )

    d, why = rec["config"]["dist"], rec["null_reasons"]
    tr = traits_of(d["strategy"])
    cal = dict(raw0.get("comm") or {})
    if not cal and tr.in_process:
        return
    transfer = cal.pop("transfer", None)
    out = cal
    out["exposed_s"] = rec["metrics"]["breakdown_s"]["comm"]
    out["exposed_fraction"] = rec["metrics"]["comm_fraction"]
    out.setdefault("wrapper_overhead_s", None)
    if rec["batch"]["world_size"] < 2:
        out.update(transfer_s=0.0, sync_overhead_s=0.0, transfer_hidden_s=0.0,
                   transfer_method=ALONE_METHOD, sync_overhead_method=ALONE_METHOD)
        if out["wrapper_overhead_s"] is not None:
            out["wrapper_overhead_method"] = ("sync minus no_sync with one process: the "
                                              "wrapper's hooks and bucket copies, not "
                                              "communication (kept inside backward)")
    else:
        out["transfer_standalone"] = transfer
        out.update(split_exposed(out["exposed_s"], transfer and transfer["per_step_s"]))
        if out["exposed_s"] is None:
            why["comm.transfer_s"] = why["comm.sync_overhead_s"] = "no step was timed"
        elif transfer is not None:
            out["transfer_method"] = f"{TRANSFER_METHOD}; standalone: {transfer['method']}"
            out["sync_overhead_method"] = OVERHEAD_METHOD
        else:
            reason = ("not measured: calibration switched off (dist.calibrate_comm = false)"
                      if not d.get("calibrate_comm", True) else
                      "not measured: no standalone collective for this strategy")
            why["comm.transfer_s"] = why["comm.sync_overhead_s"] = reason
    out["strategy_metrics"] = raw0.get("strategy_metrics") or {}
    if tr.has_server:
        out["server"] = raws[0].get("strategy_metrics") or {}
    out["measured_link"] = measured_link(d)
    out["prediction"] = _prediction(rec, d.get("link"))
    p = out["prediction"]
    if p and out["measured_link"]["name"] == "loopback" and p["link"] != "loopback":
        # --link named another network than the one measured: compare on loopback
        out["prediction_measured_link"] = _prediction(rec, "loopback")
    rec["comm"] = out


def _prediction(rec: dict[str, Any], link: Any) -> dict[str, Any] | None:
    """The network model's figures for this run's setting on ``link``."""
    from scaleprobe.comm.model import predict_for_run

    d, m = rec["config"]["dist"], rec["metrics"]
    bd = m["breakdown_s"]
    if not m.get("param_count") or bd.get("forward") is None:
        return None
    compute_s = sum(v for k, v in bd.items() if k != "comm" and v is not None)
    try:
        return predict_for_run(d["strategy"], d["nproc"], d["nnodes"], 4.0 * m["param_count"],
                               compute_s, link, d["average_every"])
    except Exception as e:  # a bad link spec must not lose the run's own figures
        rec["null_reasons"]["comm.prediction"] = f"{type(e).__name__}: {e}"
        return None


def _checks(rec: dict[str, Any], head: dict[str, Any]) -> None:
    """The figures the invariants need, then the invariants (``scaleprobe.invariants``)."""
    m = rec["metrics"]
    m["window_s"] = head.get("window_s")
    audit_rec = rec.get("audit")
    if isinstance(audit_rec, dict) and audit_rec.get("ok") is False:
        m["unique_samples_per_s"] = M.unique_samples_per_s(m.get("samples_per_s"),
                                                           audit_rec.get("unique_fraction"))
    rec["invariants"] = check_run(rec)


def _load(rec: dict[str, Any], window: dict[str, Any]) -> None:
    """Outside-the-tree figures and the under-load verdict (rule: report/thresholds.py)."""
    from scaleprobe.measure.outside import result_fields
    from scaleprobe.report.thresholds import DEFAULT  # torch-free; the one home of thresholds

    try:
        metrics, reasons, rec["load"] = result_fields(window, DEFAULT)
    except Exception as e:  # a bug here must not lose the run's own figures
        metrics, reasons = {}, {"outside_cpu_s": f"not summarised: {type(e).__name__}: {e}"}
    rec["metrics"].update(metrics)
    rec["null_reasons"].update(reasons)


def finalize(rec: dict[str, Any], cfg: RunConfig, raws: list[dict[str, Any]] | None,
             monitor: Any, run_dir: Path) -> dict[str, Any]:
    mon: dict[str, Any] = {"gpu_reason": monitor.gpu_reason}
    t0 = t1 = None
    if raws:
        head = next((r for r in raws if r["step_times_s"]), raws[0])  # a trainer, not a server
        t0, t1 = head.get("clock_window") or (None, None)
        mon.update(monitor.summary(t0, t1))
        try:
            _metrics(rec, cfg, raws, mon)
            _checks(rec, head)
            _write_steps_csv(run_dir / "steps.csv", head)
        except Exception as e:  # a bug in summarising must not lose the run
            rec["status"] = "failed"
            rec["error"] = f"summarising the run failed: {type(e).__name__}: {e}"
    else:
        mon.update(monitor.summary())
        rec["metrics"]["cpu_util_pct"] = mon.get("cpu_util_pct")
        rec["metrics"]["peak_mem_bytes"]["host"] = mon.get("host_mem_peak_bytes")
        for k in ("host_baseline", "host_net"):
            rec["null_reasons"][f"peak_mem_bytes.{k}"] = "no rank returned a record"
    _load(rec, monitor.outside_load(t0, t1))
    rec["finished_at"] = res.utc_now()
    res.write_json_atomic(run_dir / "result.json", rec)
    res.append_jsonl(Path(cfg.out) / res.RESULTS_FILE, rec)
    return rec
