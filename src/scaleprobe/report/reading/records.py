"""Loading result records for a report, and grouping them: by kind, by experiment, one per
run identity.

Records are read through their typed model (``RunResult``, ``core/result_model.py``;
``SweepRecord``, ``ColocateRecord``, ``ParityRecord``, ``core/experiment_records.py``): old
schemas and damaged blocks read as "not measured", a figure of the wrong type as missing,
and every reader asks the typed record for its figures (``run.metrics.samples_per_s``,
``run.step_median_s``, ``run.point``) instead of walking a dict. Each record keeps the folder it was read from
(``record.source``).
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

from scaleprobe.core import results as res
from scaleprobe.core.errors import ConfigError
from scaleprobe.core.experiment_records import ColocateRecord, ParityRecord, SweepRecord, typed
from scaleprobe.core.record import Record
from scaleprobe.core.result_model import SCHEMA, Experiment, RunResult, dict_of, dicts
from scaleprobe.core.run_parts import Load

LOADER_AXES = ("workers", "prefetch", "transform", "loader")

_T = TypeVar("_T", bound=Record)


def load_records(path: str | Path) -> list[Record]:
    """Records from a results.jsonl, a result.json, a run folder or a folder of results.

    A folder is searched for results.jsonl files first; when it holds none, for result.json
    files (a single run folder). Each record keeps the folder it came from (``source``).
    Raises ConfigError when nothing is there."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"no such file or folder: {p}")
    found: list[tuple[dict[str, Any], str]] = []
    unreadable: list[str] = []
    if p.is_file():
        try:
            found = [(r, str(p.parent)) for r in res.find_results(p)]
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ConfigError(f"cannot read {p}: {_why(e)}") from None
    else:
        for f in sorted(p.rglob(res.RESULTS_FILE)):
            found.extend((r, _folder(p, f.parent)) for r in res.read_jsonl(f))
        if not found:
            found, unreadable = _result_jsons(p)
    recs: list[Record] = []
    for raw, folder in _unique([(r, f) for r, f in found
                                if isinstance(r, dict) and isinstance(r.get("kind"), str)]):
        rec = typed(raw)
        rec.source = folder
        recs.append(rec)
    if not recs and unreadable:
        raise ConfigError(f"cannot read {unreadable[0]}"
                          + (f" (and {len(unreadable) - 1} more)" if len(unreadable) > 1 else ""))
    if not recs:
        raise ConfigError(f"no result records in {p} (expected results.jsonl or result.json)")
    for line in unreadable:
        print(f"warning: skipping {line}", file=sys.stderr)
    _warn_newer_schema([raw for raw, _ in found if isinstance(raw, dict)], p)
    colocated_load(runs(recs))
    return recs


def _why(e: Exception) -> str:
    """Why a record file did not parse, in words: a file cut short says so."""
    if isinstance(e, json.JSONDecodeError) and e.doc.strip() and (
            e.pos >= len(e.doc.rstrip()) or e.msg.startswith("Unterminated")):
        return f"the record ends early (truncated at byte {len(e.doc.encode())}: {e.msg})"
    if isinstance(e, json.JSONDecodeError):
        return f"not a JSON record ({e})" if e.doc.strip() else "the file is empty"
    return f"not text ({e})"


def _warn_newer_schema(raws: list[dict[str, Any]], where: Path) -> None:
    """Records of a schema this version does not know are read (what it knows of them) with
    one warning, not shown as if nothing were missing."""
    newer = sorted({str(r.get("schema")) for r in raws if "schema" in r and not (
        isinstance(r["schema"], int) and not isinstance(r["schema"], bool)
        and r["schema"] <= SCHEMA)})
    if newer:
        count = sum(1 for r in raws if str(r.get("schema")) in newer and "schema" in r)
        print(f"warning: {where}: {count} record(s) of schema {', '.join(newer)}, which this "
              f"scaleprobe does not know (it reads schema {SCHEMA} and older): read as "
              "far as their fields are known; a newer scaleprobe reads them whole",
              file=sys.stderr)


def colocated_load(recs: list[RunResult]) -> None:
    """Each co-located job's together run gets ``load.colocated_cores``: the cores its
    co-located jobs used themselves in the same repeat (each partner's own ``cpu_util_pct``,
    a share of the cores it could run on, ``env.cores``), weighted by the share of the run's
    timed window that the partner's window covered. Its outside figure holds them by design,
    so the load the report judges is net of them (``report.reading.machine_load.run_load``). Only finished
    partners with a known window count, one record per partner job (the most overlap): a
    failed or rerun attempt is not subtracted again."""
    groups: dict[tuple[Any, ...], list[RunResult]] = {}
    for r in recs:
        if r.exp_kind != "colocate" or r.point.get("phase") != "together":
            continue
        groups.setdefault((r.source, r.exp_id, r.repeat), []).append(r)
    for group in groups.values():
        for r in group:
            best: dict[str, tuple[float, float]] = {}  # partner job -> (overlap share, cores)
            for o in group:
                pct = o.metrics.cpu_util_pct
                cores = o.env_number("cores") or (o.load.machine_cores if o.load else None)
                share = _overlap_share(r, o)
                if _job(o) == _job(r) or o.status != "ok" or pct is None or not cores \
                        or not share:
                    continue
                if share > best.get(_job(o), (0.0, 0.0))[0]:
                    best[_job(o)] = (share, pct / 100.0 * cores * share)
            if best:
                r.load = r.load or Load()
                r.load.colocated_cores = sum(c for _, c in best.values())
                r.load.colocated_jobs = sorted(best)


def _job(r: RunResult) -> str:
    return str(r.point.get("job"))


def _overlap_share(a: RunResult, b: RunResult) -> float:
    """The share of run ``a``'s timed window (wall clock) that ``b``'s covered; 0 when either
    window is unknown."""
    wa, wb = a.metrics.window_clock, b.metrics.window_clock
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


def _unique(found: list[tuple[dict[str, Any], str]]) -> list[tuple[dict[str, Any], str]]:
    """Drop repeats of the same record, e.g. from a results file copied into a subfolder of
    the folder being read: a run by run id and finish time, any other record by its
    content. The first one read is kept."""
    seen: set[Any] = set()
    out = []
    for r, folder in found:
        rid = r.get("run_id")
        if r.get("kind") == "run" and isinstance(rid, str):
            key: Any = (rid, str(r.get("finished_at")))
        else:
            key = json.dumps(r, sort_keys=True, default=str)
        if key in seen:
            continue
        seen.add(key)
        out.append((r, folder))
    return out


def _result_jsons(folder: Path) -> tuple[list[tuple[dict[str, Any], str]], list[str]]:
    """The records of the result.json files under ``folder``, and a line for each file that
    could not be read (truncated, not JSON, unreadable)."""
    out: list[tuple[dict[str, Any], str]] = []
    bad: list[str] = []
    for f in sorted(folder.rglob("result.json")):
        try:
            out.extend((r, _folder(folder, f.parent)) for r in res.find_results(f))
        except OSError as e:
            bad.append(f"{f}: {e.strerror or e}")
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            bad.append(f"{f}: {_why(e)}")
    return out, bad


def of_type(records: Iterable[Record], cls: type[_T]) -> list[_T]:
    return [r for r in records if isinstance(r, cls)]


def runs(records: Iterable[Record]) -> list[RunResult]:
    return of_type(records, RunResult)


def sweeps(records: Iterable[Record]) -> list[SweepRecord]:
    return of_type(records, SweepRecord)


def shared_ids(records: Iterable[Record]) -> dict[str, list[str]]:
    """Experiment ids found in more than one folder: ``{id: [folders]}``. Both are kept and
    told apart by folder (``exp_label``)."""
    folders: dict[str, dict[str, None]] = {}
    for r in records:
        eid = getattr(r, "exp_id", None)
        if eid is not None:
            folders.setdefault(eid, {})[r.source] = None
    return {eid: list(f) for eid, f in folders.items() if len(f) > 1}


def exp_label(rec: RunResult | SweepRecord | ColocateRecord | ParityRecord,
              shared: dict[str, list[str]]) -> str | None:
    """The experiment's name in a report: its id, with the folder when the id is shared."""
    eid = rec.exp_id
    if eid is None:
        return None
    return f"{eid} ({rec.source or '?'})" if eid in shared else eid


def by_experiment(records: list[Record], kind: str) -> dict[str, list[RunResult]]:
    """Run records of experiments of one kind, by experiment label (the id, with the folder
    when two folders hold the same id: both are kept), in file order. A point that a sweep
    reused from a run of another experiment (same configuration, measured once) is listed
    under each: the sweep's summary record names its run id and point."""
    out: dict[str, list[RunResult]] = {}
    shared = shared_ids(records)
    all_runs = runs(records)
    for r in all_runs:
        if r.exp_kind == kind:
            out.setdefault(exp_label(r, shared) or "(unnamed)", []).append(r)
    by_id = {(r.source, r.run_id): r for r in all_runs if r.run_id}
    by_run_id = {r.run_id: r for r in all_runs if r.run_id}
    for s in sweeps(records):
        label = exp_label(s, shared)
        if s.exp_kind != kind or label is None:
            continue
        have = {r.run_id for r in out.get(label, [])}
        for pt in dicts(s.points):
            rid = pt.get("run_id")
            run = (by_id.get((s.source, rid)) or by_run_id.get(rid)) if isinstance(rid, str) \
                else None
            if run is not None and run.run_id not in have:
                reused = copy.copy(run)
                reused.experiment = Experiment(id=s.exp_id, kind=kind,
                                               point=dict_of(pt.get("point")),
                                               reused=run.run_id)
                reused.source = s.source
                out.setdefault(label, []).append(reused)
                have.add(run.run_id)
    return out


def summaries(records: Iterable[Record], cls: type[_T], label: str) -> list[_T]:
    """Summary records of one type (SweepRecord, ColocateRecord, ...) of the experiment
    ``label``."""
    records = list(records)
    shared = shared_ids(records)
    return [r for r in of_type(records, cls)
            if exp_label(r, shared) == label]  # type: ignore[arg-type]


def latest_per_point(recs: list[RunResult]) -> list[RunResult]:
    """One record per run identity (folder, experiment, point, repeat): the last one that
    finished ok, else the last one (a resumed sweep may have appended a point twice). Keeps
    first-seen order."""
    chosen: dict[str, RunResult] = {}
    for r in recs:
        k = r.identity
        prev = chosen.get(k)
        if prev is None or r.status == "ok" or prev.status != "ok":
            chosen[k] = r
    return list(chosen.values())


def find_run_file(rec: RunResult, path_key: str, default_name: str,
                  bases: list[Path]) -> Path | None:
    """A run's file (``paths.<path_key>``), also when the results folder was moved: tried as
    written, then under each base folder by run id, then by the file's own name."""
    paths = rec.paths
    written = paths.get(path_key)
    cands: list[Path] = []
    if isinstance(written, str) and written:
        cands.append(Path(written))
        cands += [b / written for b in bases if not Path(written).is_absolute()]
    if rec.run_id:
        cands += [b / rec.run_id / default_name for b in bases]
    if isinstance(paths.get("dir"), str):
        cands.append(Path(paths["dir"]) / default_name)
    return next((c for c in cands if _is_file(c)), None)


def _is_file(p: Path) -> bool:
    try:
        return p.is_file()
    except OSError:  # a name too long, a permission problem: not a file we can read
        return False
