"""Loading result records and reading figures out of them, tolerant of missing parts.

Every accessor returns ``None`` for a figure that is absent or null, so tables and plots can
skip it; nothing here raises on a partial record.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from scaleprobe import results as res
from scaleprobe.errors import ConfigError

BATCH_AXES = ("batch_size", "global_batch")
LOADER_AXES = ("workers", "prefetch", "transform", "loader")


SOURCE = "_source"  # set on each record by load_records: the folder it was read from


def load_records(path: str | Path) -> list[dict[str, Any]]:
    """Records from a results.jsonl, a result.json, a run folder or a folder of results.

    A folder is searched for results.jsonl files first; when it holds none, for result.json
    files (a single run folder). Each record is tagged with the folder it came from
    (``rec["_source"]``, see ``source``). Raises ConfigError when nothing is there."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"no such file or folder: {p}")
    if p.is_file():
        try:
            recs = _tagged(res.find_results(p), str(p.parent))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"cannot read {p}: {e}") from None
    else:
        recs = []
        for f in sorted(p.rglob(res.RESULTS_FILE)):
            recs.extend(_tagged(res.read_jsonl(f), _folder(p, f.parent)))
        if not recs:
            recs = _result_jsons(p)
    recs = _unique([r for r in recs if isinstance(r, dict) and isinstance(r.get("kind"), str)])
    # every record read through its typed model (results.py): old schemas and damaged
    # blocks read as "not measured", every field the report asks for is there
    recs = [res.typed(r).to_dict() for r in recs]
    if not recs:
        raise ConfigError(f"no result records in {p} (expected results.jsonl or result.json)")
    colocated_load(recs)
    return recs


def colocated_load(recs: list[dict[str, Any]]) -> None:
    """Each co-located job's together run gets ``load.colocated_cores``: the cores its
    co-located jobs used themselves in the same repeat (each partner's own ``cpu_util_pct``,
    a share of the cores it could run on, ``env.cores``), weighted by the share of the run's
    timed window that the partner's window covered. Its outside figure holds them by design,
    so the load the report judges is net of them (``report.load.run_load``). Only finished
    partners with a known window count, one record per partner job (the most overlap): a
    failed or rerun attempt is not subtracted again."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in recs:
        e = dict_of(r.get("experiment"))
        point = dict_of(e.get("point"))
        if r.get("kind") != "run" or e.get("kind") != "colocate" or point.get("phase") != "together":
            continue
        groups.setdefault((r.get("_source"), e.get("id"), e.get("repeat")), []).append(r)
    for group in groups.values():
        for r in group:
            job = _job(r)
            best: dict[str, tuple[float, float]] = {}  # partner job -> (overlap share, cores)
            for o in group:
                pct = metric(o, "cpu_util_pct")
                cores = num(dict_of(o.get("env")).get("cores")) or num(
                    dict_of(o.get("load")).get("machine_cores"))
                share = _overlap_share(r, o)
                if _job(o) == job or o.get("status") != "ok" or pct is None or not cores \
                        or not share:
                    continue
                if share > best.get(_job(o), (0.0, 0.0))[0]:
                    best[_job(o)] = (share, pct / 100.0 * cores * share)
            if best:
                load = r.get("load") if isinstance(r.get("load"), dict) else {}
                r["load"] = {**load, "colocated_cores": sum(c for _, c in best.values()),
                             "colocated_jobs": sorted(best)}


def _job(r: dict[str, Any]) -> str:
    return str(dict_of(dict_of(r.get("experiment")).get("point")).get("job"))


def _overlap_share(a: dict[str, Any], b: dict[str, Any]) -> float:
    """The share of run ``a``'s timed window (wall clock) that ``b``'s covered; 0 when either
    window is unknown."""
    wa = dict_of(a.get("metrics")).get("window_clock")
    wb = dict_of(b.get("metrics")).get("window_clock")
    if not (isinstance(wa, list) and isinstance(wb, list) and len(wa) == len(wb) == 2):
        return 0.0
    try:
        span = float(wa[1]) - float(wa[0])
        both = min(float(wa[1]), float(wb[1])) - max(float(wa[0]), float(wb[0]))
    except (TypeError, ValueError):
        return 0.0
    return max(0.0, min(1.0, both / span)) if span > 0 else 0.0


def _folder(base: Path, folder: Path) -> str:
    """A folder as the user named it: the source itself, or source/relative path."""
    return str(base / folder.relative_to(base)) if folder != base else str(base)


def _tagged(recs: list[Any], folder: str) -> list[Any]:
    for r in recs:
        if isinstance(r, dict):
            r[SOURCE] = folder
    return recs


def _unique(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop repeats of the same record, e.g. from a results file copied into a subfolder of
    the folder being read: a run by run id and finish time, any other record by its
    content. The first one read is kept."""
    seen: set[Any] = set()
    out = []
    for r in recs:
        rid = r.get("run_id")
        if r.get("kind") == "run" and isinstance(rid, str):
            key: Any = (rid, str(r.get("finished_at")))
        else:
            key = json.dumps({k: v for k, v in r.items() if k != SOURCE}, sort_keys=True,
                             default=str)
        if key in seen:
            continue
        seen.add(key)
        out.append(r)
    return out


def _result_jsons(folder: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for f in sorted(folder.rglob("result.json")):
        try:
            out.extend(_tagged(res.find_results(f), _folder(folder, f.parent)))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            continue
    return out


def source(rec: dict[str, Any]) -> str:
    """The folder a record was read from ("" when it was not read by load_records)."""
    v = rec.get(SOURCE)
    return v if isinstance(v, str) else ""


def of_kind(records: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for r in records if r.get("kind") == kind]


def exp_kind(rec: dict[str, Any]) -> str | None:
    v = dict_of(rec.get("experiment")).get("kind")
    return v if isinstance(v, str) else None


def exp_id(rec: dict[str, Any]) -> str | None:
    v = dict_of(rec.get("experiment")).get("id")
    return None if v is None or isinstance(v, (dict, list)) else str(v)


def point(rec: dict[str, Any]) -> dict[str, Any]:
    """The experiment point with axis names normalised: 'train.batch_size' -> 'batch_size'."""
    raw = dict_of(dict_of(rec.get("experiment")).get("point"))
    return {axis_name(k): v for k, v in raw.items()}


def axis_name(label: str) -> str:
    return str(label).split(".")[-1].replace("-", "_")


def point_key(pt: dict[str, Any]) -> str:
    return json.dumps(pt, sort_keys=True, default=str)


def repeat(rec: dict[str, Any]) -> int | None:
    """The repeat index of an experiment point measured several times, else None."""
    v = num(dict_of(rec.get("experiment")).get("repeat"))
    return int(v) if v is not None else None


def shared_ids(records: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Experiment ids found in more than one folder: ``{id: [folders]}``. Both are kept and
    told apart by folder (``exp_label``)."""
    folders: dict[str, dict[str, None]] = {}
    for r in records:
        eid = exp_id(r)
        if eid is not None:
            folders.setdefault(eid, {})[source(r)] = None
    return {eid: list(f) for eid, f in folders.items() if len(f) > 1}


def exp_label(rec: dict[str, Any], shared: dict[str, list[str]]) -> str | None:
    """The experiment's name in a report: its id, with the folder when the id is shared."""
    eid = exp_id(rec)
    if eid is None:
        return None
    return f"{eid} ({source(rec) or '?'})" if eid in shared else eid


def run_identity(rec: dict[str, Any]) -> str:
    """What identifies a run: folder, experiment id, point key and repeat index; a run of no
    experiment (or no point), its run id. Never the display name (every scale point is "nproc=2")."""
    if exp_id(rec) is None or not point(rec):
        return json.dumps([source(rec), exp_id(rec), rec.get("run_id")], default=str)
    return json.dumps([source(rec), exp_id(rec), point_key(point(rec)), repeat(rec)],
                      default=str)


def by_experiment(records: list[dict[str, Any]], kind: str) -> dict[str, list[dict[str, Any]]]:
    """Run records of experiments of one kind, by experiment label (the id, with the folder
    when two folders hold the same id: both are kept), in file order. A point that a sweep
    reused from a run of another experiment (same configuration, measured once) is listed
    under each: the sweep's summary record names its run id and point."""
    out: dict[str, list[dict[str, Any]]] = {}
    shared = shared_ids(records)
    runs = of_kind(records, "run")
    for r in runs:
        if exp_kind(r) == kind:
            out.setdefault(exp_label(r, shared) or "(unnamed)", []).append(r)
    by_id = {(source(r), r.get("run_id")): r for r in runs if isinstance(r.get("run_id"), str)}
    by_run_id = {r.get("run_id"): r for r in runs if isinstance(r.get("run_id"), str)}
    for s in of_kind(records, "sweep"):
        label = exp_label(s, shared)
        if exp_kind(s) != kind or label is None:
            continue
        have = {r.get("run_id") for r in out.get(label, [])}
        for pt in s.get("points") or []:
            rid = dict_of(pt).get("run_id")
            run = by_id.get((source(s), rid)) or by_run_id.get(rid)
            if run is not None and run.get("run_id") not in have:
                exp = {"id": exp_id(s), "kind": kind, "point": dict_of(pt.get("point")),
                       "reused": run.get("run_id")}
                out.setdefault(label, []).append({**run, "experiment": exp, SOURCE: source(s)})
                have.add(run.get("run_id"))
    return out


def summaries(records: list[dict[str, Any]], kind: str, label: str) -> list[dict[str, Any]]:
    """Summary records of one kind ("sweep", "colocate", ...) of the experiment ``label``."""
    shared = shared_ids(records)
    return [r for r in of_kind(records, kind) if exp_label(r, shared) == label]


def latest_per_point(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per run identity (folder, experiment, point, repeat): the last one that
    finished ok, else the last one (a resumed sweep may have appended a point twice). Keeps
    first-seen order."""
    chosen: dict[str, dict[str, Any]] = {}
    for r in recs:
        k = run_identity(r)
        prev = chosen.get(k)
        if prev is None or r.get("status") == "ok" or prev.get("status") != "ok":
            chosen[k] = r
    return list(chosen.values())


def name(rec: dict[str, Any]) -> str:
    return str(rec.get("name") or rec.get("run_id") or "?")


def num(v: Any) -> float | int | None:
    """``v`` when it is a finite number (not a bool), else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return v if math.isfinite(v) else None


def number(rec: dict[str, Any], dotted: str) -> float | int | None:
    """A numeric field anywhere in a record: ``number(rec, "env.cores")``."""
    return num(res.get(rec, dotted))


def cfg(rec: dict[str, Any], dotted: str, default: Any = None) -> Any:
    return res.get(dict_of(rec.get("config")), dotted, default)


def cfg_number(rec: dict[str, Any], dotted: str) -> float | int | None:
    return num(cfg(rec, dotted))


def metric(rec: dict[str, Any], dotted: str) -> float | int | None:
    """A numeric metric, e.g. ``metric(rec, "step_time_s.median")``; None unless a number."""
    return num(res.get(dict_of(rec.get("metrics")), dotted))


def metric_dict(rec: dict[str, Any], dotted: str) -> dict[str, float | int | None]:
    """A metric made of numbers, e.g. ``breakdown_s``; non-numbers read as None."""
    d = res.get(dict_of(rec.get("metrics")), dotted)
    return {k: num(v) for k, v in d.items()} if isinstance(d, dict) else {}


def projected(rec: dict[str, Any]) -> bool:
    return dict_of(rec.get("metrics")).get("epoch_time_projected") is True


def step_median_s(rec: dict[str, Any]) -> float | None:
    return metric(rec, "step_time_s.median")


def phase_s(rec: dict[str, Any], phase: str) -> float | None:
    return metric(rec, f"breakdown_s.{phase}")


def breakdown_total_s(rec: dict[str, Any]) -> float | None:
    vals = [v for v in metric_dict(rec, "breakdown_s").values() if v is not None]
    total = sum(vals)
    return total if vals and total > 0 else None


def compute_s(rec: dict[str, Any]) -> float | None:
    """Seconds of a typical step spent computing (``metrics.compute_s``: h2d + forward +
    backward + optimizer; what loader workers sharing the cores can slow down)."""
    from scaleprobe.metrics import compute_s as of_breakdown

    return of_breakdown(metric_dict(rec, "breakdown_s"))


def host_peak(rec: dict[str, Any]) -> int | None:
    """Peak host memory in total, torch's own resident memory included."""
    return metric(rec, "peak_mem_bytes.host")


def host_peak_net(rec: dict[str, Any]) -> int | None:
    """Peak host memory net of the baseline read before the model and data were built (what
    a larger batch or model adds); None for records made before it was measured."""
    return metric(rec, "peak_mem_bytes.host_net")


def rank_rates(rec: dict[str, Any]) -> dict[str, float]:
    """Each training rank's samples/s (``metrics.samples_per_s_by_rank``), whose sum is the
    headline samples/s; {} for a record without them."""
    d = res.get(dict_of(rec.get("metrics")), "samples_per_s_by_rank")
    if not isinstance(d, dict):
        return {}
    return {str(k): v for k, v in d.items() if num(v) is not None}


def rate_definition(rec: dict[str, Any]) -> str | None:
    """'sum of 2 workers' rates (12.4, 20.3); step times are rank 1's' for a run with several
    training ranks (workers when a rank serves instead), else None."""
    rates = rank_rates(rec)
    if len(rates) < 2:
        return None
    b = dict_of(rec.get("batch"))
    serves = num(b.get("training_ranks")) is not None and num(b.get("world_size")) is not None \
        and b["training_ranks"] < b["world_size"]
    who = "workers" if serves else "ranks"
    each = ", ".join(f"{v:.0f}" if v >= 100 else f"{v:.1f}" for v in rates.values())  # no 1,202
    text = f"sum of {len(rates)} {who}' rates ({each})"
    step_rank = metric(rec, "step_time_rank")
    return text + (f"; step times are rank {step_rank}'s" if step_rank is not None else "")


def device_peak(rec: dict[str, Any]) -> int | None:
    """The framework's peak allocation, else reserved, else NVML's reading."""
    for k in ("device_allocated", "device_reserved", "device_nvml"):
        v = metric(rec, f"peak_mem_bytes.{k}")
        if v is not None:
            return v
    return None


def gpu_total_bytes(rec: dict[str, Any]) -> int | None:
    totals = [num(g.get("memory_total_bytes")) for g in dicts(res.get(rec, "env.gpus"))]
    totals = [t for t in totals if t]
    return min(totals) if totals else None


def world_size(rec: dict[str, Any]) -> int | None:
    for v in (number(rec, "batch.world_size"), number(rec, "env.world_size")):
        if v:
            return int(v)
    nproc, nnodes = cfg_number(rec, "dist.nproc"), cfg_number(rec, "dist.nnodes")
    return int(nproc) * int(nnodes or 1) if nproc else None


def batch_size(rec: dict[str, Any]) -> int | None:
    """The batch size a sweep varied: the point's value, else the per-device batch."""
    pt = point(rec)
    for k in BATCH_AXES:
        if num(pt.get(k)):
            return int(pt[k])
    for v in (number(rec, "batch.per_device"), cfg_number(rec, "train.batch_size")):
        if v:
            return int(v)
    return None


def loader_workers(rec: dict[str, Any]) -> int | None:
    """Loader worker processes actually used: 0 for the naive (in-process) loader."""
    if cfg(rec, "data.loader") == "naive":
        return 0
    w = num(point(rec).get("workers", cfg(rec, "data.workers")))
    return int(w) if w is not None else None


def status_text(rec: dict[str, Any]) -> str:
    st = rec.get("status") or "unknown"
    if st == "oom":
        return "out of memory"
    if st == "failed":
        err = rec.get("error")
        return f"failed: {err}" if err else "failed"
    if st == "target_not_reached":
        return "target not reached"
    return str(st)


def null_reason(rec: dict[str, Any], metric_key: str) -> str | None:
    reasons = dict_of(rec.get("null_reasons"))
    why = reasons.get(metric_key) or reasons.get(f"metrics.{metric_key}")
    return str(why) if why else None


def is_synthetic(rec: dict[str, Any]) -> bool:
    return str(cfg(rec, "data.dataset") or "").startswith("synthetic")


def find_run_file(rec: dict[str, Any], path_key: str, default_name: str,
                  bases: list[Path]) -> Path | None:
    """A run's file (``paths.<path_key>``), also when the results folder was moved: tried as
    written, then under each base folder by run id, then by the file's own name."""
    paths = dict_of(rec.get("paths"))
    written = paths.get(path_key)
    cands: list[Path] = []
    if isinstance(written, str) and written:
        cands.append(Path(written))
        cands += [b / written for b in bases if not Path(written).is_absolute()]
    run_id = rec.get("run_id")
    if isinstance(run_id, str) and run_id:
        cands += [b / run_id / default_name for b in bases]
    if isinstance(paths.get("dir"), str):
        cands.append(Path(paths["dir"]) / default_name)
    return next((c for c in cands if _is_file(c)), None)


def _is_file(p: Path) -> bool:
    try:
        return p.is_file()
    except OSError:  # a name too long, a permission problem: not a file we can read
        return False


def dicts(items: Any) -> list[dict[str, Any]]:
    """The dict entries of a list from a record (rows, jobs, ops), skipping anything else."""
    return [x for x in items if isinstance(x, dict)] if isinstance(items, list) else []


def dict_of(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


TASK_METRICS = (("accuracy", "{:.3f}"), ("verification_accuracy", "verif. {:.3f}"),
                ("map50", "mAP50 {:.3f}"),  # classification, face, detection
                ("loss", "loss {:.3f}"))  # lm: held-out nats per token (lower is better)


def task_metric(rec: dict[str, Any]) -> tuple[str, float] | None:
    """(name, value) of the run's evaluation figure, or None when it was not evaluated."""
    for key, _ in TASK_METRICS:
        v = metric(rec, key)
        if v is not None:
            return key, v
    return None


def task_metric_text(rec: dict[str, Any], missing: str = "n/a") -> str:
    found = task_metric(rec)
    if found is None:
        return missing
    return dict(TASK_METRICS)[found[0]].format(found[1])
