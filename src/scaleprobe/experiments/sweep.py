"""Run a sweep: every grid point in its own process, resumable, with tables at the end.

    records = run_sweep("examples/sweep_batch_mobilenet_v2.toml", "out")
    records = run_sweep({"base": {"model": "digits_cnn", "steps": 3},
                         "grid": {"batch_size": [16, 32]}}, "out", progress=False)

Every point runs ``repeats`` times (``[sweep] repeats`` or ``--repeats``, default 3), repeat by
repeat (A B C A B C), each run in its own process; the tables show each point's median repeat
and the verdicts carry intervals from the repeats (``scaleprobe.core.metrics``). Runs of the same
experiment (its id) already in ``OUT/results.jsonl`` (same ``RunConfig.key()``, status ok,
oom, target not reached or audit failed) count as repeats and are not run again; failed ones
are, and so is a point only measured by a separate run or another experiment. A point that runs out of memory skips the larger batch sizes of
its group (the points that differ from it only in batch size). Ctrl+C stops the running point
and everything it started within seconds; finished points stay on disk.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from scaleprobe.core import metrics as M
from scaleprobe.core import results as res
from scaleprobe.core.errors import ConfigError
from scaleprobe.core.experiment_records import SkippedPoint, SweepRecord
from scaleprobe.core.result_model import Experiment, RunResult
from scaleprobe.experiments import executor as executors
from scaleprobe.experiments.batch_search import BatchSearch
from scaleprobe.experiments.point import PointPayload
from scaleprobe.experiments.procs import ProcessSet, point_experiment, run_in_process
from scaleprobe.experiments.spec import (
    Point,
    SweepSpec,
    check_points,
    describe,
    group_key,
    load_spec,
)
from scaleprobe.experiments.sweep_bar import SweepProgress
from scaleprobe.features.target import repeat_config
from scaleprobe.measure.progress import PROGRESS_ENV
from scaleprobe.run.driver import RUN_OUTPUT_BYTES
from scaleprobe.run.resources import check_config, launches

try:  # POSIX; elsewhere sweeps into one folder are not kept apart
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

# How a sweep's tables are made (report/render/sweep_tables.write_tables, which the commands pass):
# (out folder, run records typed, skipped points, batch searches, spec, partial) -> the
# report, whose "recommendation" goes into the sweep record. The sweep itself renders nothing.
Tables = Callable[[Path, list[RunResult], list[SkippedPoint], list[dict[str, Any]],
                   SweepSpec, bool], dict[str, Any]]

# measured: not run again on resume (a failed shard audit would fail again)
DONE = ("ok", "oom", "target_not_reached", "audit_failed")


@dataclass
class SweepState:
    spec: SweepSpec
    out: Path
    bar: SweepProgress
    procs: ProcessSet  # or executor.SlurmProcessSet: the same calls
    done: dict[str, list[RunResult]] = field(default_factory=dict)  # key -> ok/oom runs
    records: list[RunResult] = field(default_factory=list)  # this sweep's, in run order
    skipped: list[SkippedPoint] = field(default_factory=list)  # points not run, and why
    searches: list[dict[str, Any]] = field(default_factory=list)  # batch_size = "auto"
    started: int = 0  # point processes started by this call
    spec_path: str | None = None  # the spec file, for the report's rerun commands
    tables: Tables | None = None  # writes sweep.md / sweep.csv (None: no tables)

    @property
    def results_path(self) -> Path:
        return self.out / res.RESULTS_FILE


def completed_runs(results_path: Path, exp_id: str | None = None
                   ) -> dict[str, list[RunResult]]:
    """``{config key: [records]}`` of the runs that need no rerun (ok, or out of memory), in
    file order: the first is repeat 0, the next repeat 1, and so on. With ``exp_id``, only
    the runs of that experiment: a run of the same configuration made on its own or by
    another experiment was measured at another time, under another load, so it cannot stand
    in a pairing of this one's interleaved repeats (A B A B)."""
    done: dict[str, list[RunResult]] = {}
    for rec in map(RunResult.from_dict, res.runs(res.read_jsonl(results_path))):
        if (exp_id is None or rec.exp_id == exp_id) and rec.status in DONE and rec.key:
            done.setdefault(rec.key, []).append(rec)
    return done


def _slug(point: Point) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", describe(point.axes).replace(", ", "-"))[:80]


def run_point(st: SweepState, point: Point, repeat: int = 0) -> RunResult:
    """Run repeat ``repeat`` of one point in its own process (or reuse this experiment's run
    of the same configuration, measured before it was stopped) and return its record. A point that ran out of memory is
    not repeated: its out-of-memory record stands for every repeat."""
    cfg, index = repeat_config(st.spec.config(point, str(st.out)), repeat)
    key = cfg.key()
    prior = st.done.get(key, [])
    oom = next((r for r in prior if r.status == "oom"), None)
    reuse = oom if oom is not None else (prior[index] if len(prior) > index else None)
    exp = point_experiment(st.spec.sweep_id, st.spec.kind, dict(point.axes), repeat)
    if reuse is not None:  # shown as this sweep's point, whichever run measured it
        rec = replace(reuse, experiment=replace(exp, reused=reuse.run_id, extra={}))
        if oom is None or repeat == 0:
            st.records.append(rec)
            st.bar.point_done(point, rec, resumed=True, repeat=repeat)
        return rec
    label = f"{_slug(point)}-r{repeat}"
    steps = st.out / "points" / f"{label}-{exp.extra['attempt']}.progress"  # its own steps
    st.bar.point_started(point, str(steps), repeat)
    st.started += 1
    rec = run_in_process(st.procs, PointPayload(cfg, exp), st.out / "points", label,
                         {PROGRESS_ENV: str(steps)})
    if rec.status in DONE:
        st.done.setdefault(key, []).append(rec)
    st.records.append(rec)
    st.bar.point_done(point, rec, repeat=repeat)
    return rec


def _skip(st: SweepState, point: Point, reason: str) -> None:
    st.skipped.append(SkippedPoint(point=dict(point.axes), status="oom", reason=reason))
    st.bar.point_skipped(point, reason)


def _run_grid(st: SweepState, pts: list[Point]) -> None:
    """Every point, repeat by repeat (A B C A B C): slow drift of the machine falls on every
    point alike instead of on the last ones."""
    axis = st.spec.batch_axis
    label = axis.label if axis else None
    oom_at: dict[Any, int] = {}
    for repeat in range(st.spec.repeats):
        for p in pts:
            group = group_key(p, label)
            size = p.axes.get(label) if label else None
            if size is not None and group in oom_at and size >= oom_at[group]:
                if repeat == 0:
                    _skip(st, p, f"not run: batch {oom_at[group]} already ran out of memory")
                continue
            rec = run_point(st, p, repeat)
            if rec.status == "oom" and size is not None:
                oom_at[group] = min(size, oom_at.get(group, size))


def _with_batch(p: Point, label: str, key: str, size: int) -> Point:
    return Point({**p.axes, label: size}, {**p.overrides, key: size})


def _run_auto(st: SweepState, groups: list[Point]) -> None:
    """Bisect each group's batch size to out of memory (one run per probe), then repeat the
    sizes that fit, interleaved, so the batch rule has its spread."""
    sp = st.spec
    axis = sp.batch_axis
    assert axis is not None
    per_search = BatchSearch(sp.batch_start, sp.batch_max, sp.max_probes,
                             sp.batch_round).estimate_remaining()
    fits: list[Point] = []
    for n, base_point in enumerate(groups):
        search = BatchSearch(sp.batch_start, sp.batch_max, sp.max_probes, sp.batch_round)
        while (size := search.next_size()) is not None:
            st.bar.set_remaining(search.estimate_remaining()
                                 + per_search * (len(groups) - n - 1))
            pt = _with_batch(base_point, axis.label, axis.key, size)
            rec = run_point(st, pt)
            status = rec.status if rec.status in DONE else "failed"
            search.report(size, status)
            if status == "ok":
                fits.append(pt)
                search.hold_to_data(M.data_share(rec.metrics.train_samples,
                                                 rec.batch.training_ranks))
        others = {k: v for k, v in base_point.axes.items() if k != axis.label}
        st.searches.append({"group": others, "largest_fit": search.largest_fit,
                            "first_oom": search.first_oom, "probes": search.probes,
                            "summary": search.summary()})
        st.bar.note(f"{describe(others) or 'search'}: {search.summary()}")
    st.bar.set_remaining(len(fits) * (sp.repeats - 1))
    for repeat in range(1, sp.repeats):
        for pt in sorted(fits, key=lambda q: q.axes[axis.label]):
            run_point(st, pt, repeat)
    st.bar.set_remaining(0)


def _sweep_record(st: SweepState, recommendation: Any) -> SweepRecord:
    return SweepRecord(
        kind="sweep",
        experiment=Experiment(id=st.spec.sweep_id, kind=st.spec.kind),
        axes={a.label: ("auto" if a.auto else list(a.values)) for a in st.spec.axes},
        points=[{"point": r.experiment.point if r.experiment else None, "key": r.key,
                 "repeat": r.repeat or 0, "run_id": r.run_id, "status": r.status}
                for r in st.records],
        skipped=st.skipped,
        searches=st.searches,
        dropped=st.spec.dropped,
        repeats=st.spec.repeats,
        points_run=st.started,  # processes started by this invocation (0: all resumed)
        recommendation=recommendation,
        finished_at=res.utc_now(),
        spec_path=st.spec_path)


def spec_file(spec: str | Path | dict[str, Any]) -> str | None:
    """The spec's file as an absolute path (recorded so the report's rerun commands name it);
    None for a spec given as a dict."""
    return str(Path(spec).resolve()) if isinstance(spec, (str, Path)) else None


def sweep_out_dir(spec: str | Path | dict[str, Any], out_dir: str | Path | None = None,
                  overrides: dict[str, Any] | None = None) -> Path:
    """Where a sweep writes: ``out_dir``, else the base configuration's ``out``."""
    if out_dir is not None:
        return Path(out_dir)
    return Path(load_spec(spec, overrides).base_config().out)


def preflight(configs: list[Any]) -> None:
    """Names that build nothing (a model or dataset typo) and process counts this host cannot
    take (run/resources.py) fail here, in one line, before any point runs; each distinct
    (model, dataset) pair and process count is checked once."""
    # heavy: torch: the preflight builds configs only when points are run
    from scaleprobe.run.workloads import preflight as check  # imports torch

    seen: set[tuple[str, str]] = set()
    counts: set[int] = set()
    for cfg in configs:
        pair = (cfg.model.name, cfg.data.dataset)
        if pair not in seen:
            seen.add(pair)
            check(cfg)
        if launches(cfg) and cfg.dist.nproc not in counts:  # every process count fits
            counts.add(cfg.dist.nproc)
            check_config(cfg, True)


def run_sweep(spec: str | Path | dict[str, Any], out_dir: str | Path | None = None,
              overrides: dict[str, Any] | None = None, progress: bool = True,
              console: Console | None = None, repeats: int | None = None,
              executor: Any = None, tables: Tables | None = None) -> list[RunResult]:
    """Run (or resume) a sweep; returns the records of its points in run order.

    Appends a ``kind: sweep`` summary record to the output folder's results.jsonl; with
    ``tables`` (``scaleprobe.report.render.sweep_tables.write_tables``, as the commands pass it),
    writes ``sweep.md`` and ``sweep.csv`` there too (the points finished so far, marked
    partial, when the sweep is stopped) and records their recommendation. Raises ConfigError
    for a bad spec before anything runs, OutputError for an output folder that cannot take
    the runs (read-only, full) or that another sweep is writing to, and KeyboardInterrupt
    (after stopping every point process) on Ctrl+C. ``repeats`` (``--repeats``) replaces the
    spec's ``[sweep] repeats``.
    ``executor`` (experiments/executor.py): where the points run; None: here.
    """
    sp = load_spec(spec, overrides, repeats)
    out = Path(out_dir) if out_dir is not None else Path(sp.base_config().out)
    pts = check_points(sp, str(out))
    res.check_writable(out, RUN_OUTPUT_BYTES, "a run's files")  # all points: once locked
    with sweep_lock(out):
        try:
            st = SweepState(sp, out, SweepProgress(progress, console, sp.sweep_id),
                            executors.process_set(executor, out),
                            spec_path=spec_file(spec), tables=tables)
            return _run_locked(st, pts)
        except OSError as e:  # a write failed mid-sweep: the disk filled, the folder went away
            if e.errno in res.OUTPUT_REASONS and e.filename:
                raise res.output_error(e.filename, e) from None
            raise


def _run_locked(st: SweepState, pts: list[Point]) -> list[RunResult]:
    sp, out = st.spec, st.out
    st.done = completed_runs(st.results_path, sp.sweep_id)
    todo = [c for c in (sp.config(p, str(out)) for p in pts)
            if sp.auto or len(st.done.get(c.key(), [])) < sp.repeats]
    preflight(todo)
    runs_left = sum(sp.repeats - min(sp.repeats, len(st.done.get(c.key(), []))) for c in todo)
    res.check_writable(out, RUN_OUTPUT_BYTES * max(1, runs_left), f"{runs_left} runs' files")
    for line in sp.dropped:
        st.bar.note(f"left out (invalid): {line}")
    for line in sp.unused:
        st.bar.note(f"warning: {line}")
    st.bar.start(0 if sp.auto else len(pts) * sp.repeats)
    try:
        if sp.auto:
            _run_auto(st, pts)
        else:
            _run_grid(st, pts)
    except BaseException:
        st.procs.stop_all()
        st.bar.stop()
        try:  # the tables of the points finished so far; never hide why the sweep stopped
            keys = None if sp.auto else {sp.config(p, str(out)).key() for p in pts}
            if st.tables is not None:
                st.tables(out, _finished(st, keys), st.skipped, st.searches, sp, True)
        except Exception as e:  # noqa: BLE001
            st.bar.note(f"could not write the partial tables: {type(e).__name__}: {e}")
        raise
    finally:
        st.procs.close()
    st.bar.stop()
    best = (None if st.tables is None else
            st.tables(out, st.records, st.skipped, st.searches, sp, False).get("recommendation"))
    res.append_jsonl(st.results_path, _sweep_record(st, best).to_dict())
    return st.records


def _finished(st: SweepState, keys: set[str] | None) -> list[RunResult]:
    """This call's records, then the finished runs of this sweep found on disk that it had
    not reached yet: a resumed sweep stopped while it was still listing finished points
    writes the tables of everything finished, not of the points it had listed. ``keys``: the
    grid's points (their first ``repeats`` runs each); None (a batch search): every finished
    run of this sweep id."""
    seen = {r.run_id for r in st.records}
    earlier = []
    for key, recs in st.done.items():
        if keys is not None and key not in keys:
            continue
        mine = [r for r in recs if r.exp_id == st.spec.sweep_id]
        earlier += [r for r in (mine[:st.spec.repeats] if keys is not None else mine)
                    if r.run_id not in seen]
    return st.records + earlier


LOCK_FILE = ".sweep.lock"


@contextmanager
def sweep_lock(out: Path) -> Iterator[None]:
    """One sweep at a time in a folder: a second sweep into it (the same spec or another)
    refuses in one line naming the folder and the PID of the sweep holding it. The lock is an
    ``fcntl`` lock on ``OUT/.sweep.lock``, so the kernel releases it when its holder ends,
    however it ends; the PID written into the file is only for that message."""
    path = out / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise res.output_error(path, e) from None
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pid = os.pread(fd, 32, 0).decode(errors="replace").strip()
                who = f" (PID {pid})" if pid.isdigit() else ""
                raise ConfigError(f"another sweep{who} is writing to {out}; wait for it to end "
                                  "or use another --out") from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:  # only the message of a second sweep would miss the PID
            pass
        yield
    finally:
        os.close(fd)  # closing releases the lock
