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
from scaleprobe.core.machine_load import colocated_load
from scaleprobe.core.record import Record
from scaleprobe.core.result_model import SCHEMA, Experiment, RunResult, dict_of, dicts

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
    rest = e.doc[e.pos:].rstrip() if isinstance(e, json.JSONDecodeError) else ""
    if isinstance(e, json.JSONDecodeError) and e.doc.strip() and (
            e.pos >= len(e.doc.rstrip()) or e.msg.startswith("Unterminated")
            # cut inside a literal: ``"x": nul``
            or any(word.startswith(rest) for word in ("null", "true", "false"))):
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
