"""Co-located jobs: K training jobs run first alone (one after another), then all at once, on
one shared device or each pinned to its own (a GPU each, or on a CPU host a CPU set each).
The spec (``[colocate]``, ``[base]``, one ``[[job]]`` table per job) is docs/EXPERIMENTS.md's.

Together, the jobs start their training at the same moment: each point process finishes its
imports, announces it is ready, and waits for a start file. A time-boxed window (``seconds``)
keeps every job training for the whole time the others do, so the steps compared really
overlapped; with fixed ``steps`` a fast job may finish while a slow one is still running.
In both phases each job has the same placement, so a slowdown is interference, not fewer cores.

Repeats are interleaved: alone A, alone B, together; alone A, alone B, together; ... (each job
in its own process every time), so slow drift of the machine falls on both phases alike. Each
run record carries ``experiment.repeat``; repeat ``i`` alone is paired with repeat ``i``
together for the slowdown's interval (``experiments.colocate_verdict``).
"""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console

from scaleprobe.config import runconfig as C
from scaleprobe.config.keys import flatten_in, resolve_key
from scaleprobe.config.sections import RunConfig
from scaleprobe.core import results as res
from scaleprobe.core.claim import Source
from scaleprobe.core.errors import ConfigError
from scaleprobe.core.experiment_records import ColocateRecord
from scaleprobe.core.fmt import duration
from scaleprobe.core.machine_load import colocate_sources
from scaleprobe.core.result_model import Experiment, RunResult
from scaleprobe.experiments.colocate_verdict import (
    JobFigures,
    throughput_line,
    total_interval,
    totals,
    verdict,
)
from scaleprobe.experiments.placement import Place, gpu_count, gpu_sampler, plan_placement
from scaleprobe.experiments.point import PointPayload
from scaleprobe.experiments.procs import (
    ProcessSet,
    collect_record,
    point_experiment,
    run_in_process,
)
from scaleprobe.experiments.spec import read_doc
from scaleprobe.experiments.sweep import preflight, spec_file
from scaleprobe.measure.outside import open_gate

OPTIONS: dict[str, type | tuple[type, ...]] = {
    "id": str, "placement": str, "seconds": (int, float), "steps": int, "warmup_steps": int,
    "repeats": int}
DEFAULT_REPEATS = 3
READY_TIMEOUT_S = 300.0
# A job's samples/s is its batch over its MEDIAN step, so it is a "together" figure when most
# of its steps ran with every job running: a job whose window had every job running for less
# than this share of it (a window opened late, a long last step past the others' time box)
# may have a median step run alone, and that repeat's together figure of that job feeds
# nothing. One step past the box is harmless: a 490 ms step in a 1 s window still leaves
# two thirds of the window shared.
MIN_WINDOW_OVERLAP = 0.6
SAMPLE_EVERY_S = 0.5


@dataclass(frozen=True)
class ColocateSpec:
    colocate_id: str
    placement: str  # shared | pinned
    jobs: list[tuple[str, RunConfig]]
    repeats: int = DEFAULT_REPEATS  # alone/together phases, interleaved


def _timing(opts: dict[str, Any]) -> dict[str, Any]:
    common = {"train.epochs": None, "train.warmup_steps": opts.get("warmup_steps", 2),
              "measure.progress": False}
    if "steps" in opts:
        return {**common, "train.steps": opts["steps"]}
    seconds = float(opts.get("seconds", 15))
    if seconds <= 0:
        raise ConfigError("[colocate] seconds must be positive")
    # a time-boxed window: never "stable" early, stop after `seconds` of timed steps
    return {**common, "train.steps": "auto", "train.max_seconds": seconds,
            "train.max_steps": 1_000_000, "train.min_steps": 3, "measure.stable_rel_ci": 0.0}


def _options(doc: dict[str, Any], where: str) -> dict[str, Any]:
    opts = doc.get("colocate", {})
    if not isinstance(opts, dict):
        raise ConfigError(f"{where}: [colocate] must be a table")
    for k, v in opts.items():
        if k not in OPTIONS:
            raise ConfigError(f"{where}: unknown [colocate] option '{k}' "
                              f"(options: {', '.join(OPTIONS)})")
        if not isinstance(v, OPTIONS[k]) or isinstance(v, bool):
            raise ConfigError(f"{where}: [colocate] {k} has the wrong type: {v!r}")
    if opts.get("repeats", DEFAULT_REPEATS) < 1:
        raise ConfigError(f"{where}: [colocate] repeats must be at least 1, "
                          f"got {opts['repeats']}")
    if "steps" in opts and "seconds" in opts:
        raise ConfigError(f"{where}: give [colocate] seconds or steps, not both")
    if opts.get("placement", "shared") not in ("shared", "pinned"):
        raise ConfigError(f"{where}: placement must be 'shared' or 'pinned', "
                          f"got '{opts['placement']}'")
    return opts


def load_colocate_spec(spec: str | Path | dict[str, Any],
                       overrides: dict[str, Any] | None = None,
                       placement: str | None = None,
                       repeats: int | None = None) -> ColocateSpec:
    """Read and check a colocate spec; ``overrides`` (flat run options) apply to every job,
    ``placement`` and ``repeats`` replace the spec's."""
    doc, where, stem = read_doc(spec, "colocate", ("[colocate]", "[base]", "[[job]]"))
    if placement is not None:
        doc = {**doc, "colocate": {**doc.get("colocate", {}), "placement": placement}}
    if repeats is not None:
        doc = {**doc, "colocate": {**doc.get("colocate", {}), "repeats": repeats}}
    opts = _options(doc, where)
    jobs_doc = doc.get("job")
    if not isinstance(jobs_doc, list) or len(jobs_doc) < 2:
        raise ConfigError(f"{where}: give at least two [[job]] tables")
    base = flatten_in(doc.get("base", {}), f"{where}: [base]")
    base.update({resolve_key(k): v for k, v in (overrides or {}).items()})
    timing = _timing(opts)
    jobs: list[tuple[str, RunConfig]] = []
    for i, job in enumerate(jobs_doc):
        flat = {**base, **flatten_in(job, f"{where}: [[job]] {i + 1}"), **timing}
        name = str(flat.get("name") or f"job{i + 1}")
        flat["name"] = name
        try:
            jobs.append((name, C.build(flat)))
        except ConfigError as e:
            raise ConfigError(f"{where}: job '{name}': {e}") from None
    names = [n for n, _ in jobs]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: job names must differ, got {names}")
    return ColocateSpec(opts.get("id", stem), opts.get("placement", "shared"), jobs,
                        opts.get("repeats", DEFAULT_REPEATS))


@dataclass
class _Ctx:
    spec: ColocateSpec
    out: Path
    procs: ProcessSet
    console: Console | None

    def say(self, text: str) -> None:
        if self.console is not None:
            self.console.print(text, markup=False, highlight=False)


@dataclass
class _Machine:
    """The machine while the jobs ran together, in one repeat."""

    cpu_util_pct: float | None
    gpu_util_pct: float | None
    overlap_s: float


def _payload(ctx: _Ctx, name: str, cfg: RunConfig, phase: str, place: Place,
           repeat: int, barrier: dict[str, str] | None = None) -> PointPayload:
    """Job ``name``'s point in ``phase`` of ``repeat``."""
    exp = point_experiment(ctx.spec.colocate_id, "colocate", {"job": name, "phase": phase},
                           repeat)
    return PointPayload(cfg, exp, place.cpus, barrier)


def _tag(ctx: _Ctx, repeat: int) -> str:
    n = ctx.spec.repeats
    return f"[{repeat + 1}/{n}] " if n > 1 else ""


def _run_alone(ctx: _Ctx, plan: list[Place], repeat: int) -> list[RunResult]:
    recs = []
    for (name, cfg), place in zip(ctx.spec.jobs, plan, strict=True):
        t0 = time.monotonic()
        rec = run_in_process(ctx.procs, _payload(ctx, name, cfg, "alone", place, repeat),
                             ctx.out / "points", f"{name}-alone-r{repeat}", place.env)
        ctx.say(f"{_tag(ctx, repeat)}alone    {name}: {rec.status} "
                f"({duration(time.monotonic() - t0)})")
        recs.append(rec)
    return recs


def _run_together(ctx: _Ctx, plan: list[Place], repeat: int
                  ) -> tuple[list[RunResult], _Machine]:
    gate = ctx.out / "points" / f"together-{uuid.uuid4().hex[:12]}"
    gate.mkdir(parents=True, exist_ok=True)
    started = []
    for (name, cfg), place in zip(ctx.spec.jobs, plan, strict=True):
        barrier = {"ready": str(gate / f"{name}.ready"), "go": str(gate / "go")}
        payload = _payload(ctx, name, cfg, "together", place, repeat, barrier)
        started.append((name, ctx.procs.start(payload, ctx.out / "points",
                                              f"{name}-together-r{repeat}", place.env)))
    procs = [proc for _, proc in started]
    open_gate([gate / f"{n}.ready" for n, _ in started], gate / "go", procs, READY_TIMEOUT_S)
    gpu = gpu_sampler(plan)
    psutil.cpu_percent(None)  # prime the machine-wide counter
    t_go, cpu, gpus, overlap_s = time.monotonic(), [], [], 0.0
    while any(p.poll() is None for p in procs):
        time.sleep(SAMPLE_EVERY_S)
        if all(p.poll() is None for p in procs):
            cpu.append(psutil.cpu_percent(None))
            g = gpu()
            if g is not None:
                gpus.append(g)
            overlap_s = time.monotonic() - t_go
    recs = []
    for name, proc in started:
        rec = collect_record(proc, ctx.procs.wait(proc))
        ctx.say(f"{_tag(ctx, repeat)}together {name}: {rec.status}")
        recs.append(rec)
    return recs, _Machine(_mean(cpu), _jobs_gpu_util(recs) or _mean(gpus), overlap_s)


def _jobs_gpu_util(recs: list[RunResult]) -> float | None:
    """GPU utilisation over the jobs' own timed windows (NVML reads the whole device, so on a
    shared GPU each job sees everyone's work); None unless every job has a reading."""
    vals = [r.metrics.gpu_util_pct for r in recs]
    known = [v for v in vals if v is not None]
    return sum(known) / len(known) if known and len(known) == len(vals) else None


def window_shares(recs: list[RunResult]) -> list[float | None] | None:
    """Per job, the share of its own timed window during which every job's window was open
    (1.0: it never ran alone); None when a job has no window clock."""
    clocks = [r.metrics.window_clock for r in recs]
    known = [c for c in clocks if c is not None and len(c) == 2]
    if not clocks or len(known) != len(clocks):
        return None
    shared = max(0.0, min(c[1] for c in known) - max(c[0] for c in known))
    return [shared / (c[1] - c[0]) if c[1] > c[0] else None for c in known]


def _figures(name: str, alone: list[RunResult], together: list[RunResult],
             left_out: Collection[int] = (), sources: tuple[Source, ...] = ()) -> JobFigures:
    """One job's figures over the repeats (``alone[i]``, ``together[i]``: repeat i's runs);
    the repeats in ``left_out`` (its window was not shared enough) give none together.
    Epochs are on the timed window's basis, as the samples/s beside them: the slowdowns by
    samples/s and by epoch time agree (bug caught: 1.45x by samples/s, 1.81x by epoch time).
    ``sources``: the runs its slowdown stands on (``_job_sources``)."""
    figures: list[Callable[[RunResult], float | None]] = [
        lambda r: r.metrics.samples_per_s, lambda r: r.window_epoch_s,
        lambda r: r.metrics.step_time_s.rel_ci if r.metrics.step_time_s else None]
    cols = [tuple(f(r) if r.status == "ok" and i not in drop else None
                  for i, r in enumerate(recs))
            for f in figures for recs, drop in ((alone, ()), (together, left_out))]
    rate, rate_t, epoch, epoch_t, ci, ci_t = cols
    return JobFigures(name, rate, rate_t, epoch, epoch_t, ci, ci_t, sources)


def _job_sources(cs: ColocateSpec, alone: list[list[RunResult]],
                 together: list[list[RunResult]]) -> list[tuple[Source, ...]]:
    """Per job, the runs its slowdown stands on: alone and together in every repeat, each
    with its load judged as the report judges it (``core.machine_load.colocate_sources``: a
    run together net of its partner jobs' own CPU use), so colocate.md, the terminal and the
    report name the same runs measured under load."""
    runs = [r for i in range(len(alone))
            for r in (*alone[i], *(together[i] if i < len(together) else []))]
    return [colocate_sources(runs, name) for name, _ in cs.jobs]


def _threads(recs: list[RunResult]) -> int | None:
    n = [r.env.get("threads") for r in recs]
    ints = [v for v in n if isinstance(v, int)]
    return sum(ints) if n and len(ints) == len(n) else None


def _mean(vals: Sequence[float | None]) -> float | None:
    got = [v for v in vals if v is not None]
    return sum(got) / len(got) if got else None


def _run_repeats(ctx: _Ctx, plan: list[Place]
                 ) -> tuple[list[list[RunResult]], list[list[RunResult]], list[_Machine]]:
    """alone A, alone B, together; alone A, alone B, together; ... -> (alone[repeat][job],
    together[repeat][job], machine[repeat])."""
    alone, together, machine = [], [], []
    try:
        for r in range(ctx.spec.repeats):
            alone.append(_run_alone(ctx, plan, r))
            recs, mach = _run_together(ctx, plan, r)
            together.append(recs)
            machine.append(mach)
    except BaseException:
        ctx.procs.stop_all()
        raise
    finally:
        ctx.procs.close()
    return alone, together, machine


def _record(cs: ColocateSpec, plan: list[Place], note: str, cores: int,
            alone: list[list[RunResult]], together: list[list[RunResult]],
            machine: list[_Machine]) -> ColocateRecord:
    # time-boxed windows only: with fixed steps a fast job ends first by design (said in the
    # docs), so the check would leave every repeat out
    boxed = not any(isinstance(cfg.train.steps, int) for _, cfg in cs.jobs)
    shares = [window_shares(t) if boxed else None for t in together]
    short = [(i, cs.jobs[k][0], v) for i, sh in enumerate(shares)
             for k, v in enumerate(sh or []) if v is not None and v < MIN_WINDOW_OVERLAP]
    srcs = _job_sources(cs, alone, together)
    jobs = [_figures(n, [a[k] for a in alone], [t[k] for t in together],
                     {i for i, job, _ in short if job == n}, srcs[k])
            for k, (n, _) in enumerate(cs.jobs)]
    cpu = _mean([m.cpu_util_pct for m in machine])
    gpu = _mean([m.gpu_util_pct for m in machine])
    n_gpus = gpu_count()
    share_gpu = n_gpus > 0 and (cs.placement == "shared" or len(cs.jobs) > n_gpus)
    threads = [_threads(t) for t in together]
    v, evidence = verdict(jobs, cpu, gpu, share_gpu=share_gpu, cores=cores,
                          threads_total=max((t for t in threads if t), default=None),
                          placement=cs.placement)
    evidence += "".join(
        f"; {job} repeat {i + 1} left out: only {share:.0%} of its timed window had every "
        f"job running (below {MIN_WINDOW_OVERLAP:.0%})" for i, job, share in short)
    tot, tot_iv = totals(jobs), total_interval(jobs)
    tot_iv_d = tot_iv.to_dict() if tot_iv is not None else None
    return ColocateRecord(
        experiment=Experiment(id=cs.colocate_id, kind="colocate"),
        placement=cs.placement, placement_note=note,
        cpu_sets=[p.cpus for p in plan], repeats=cs.repeats,
        jobs=[j.to_dict() for j in jobs],
        total_samples_per_s_alone_sum=tot["total_samples_per_s_alone_sum"],
        total_samples_per_s_together=tot["total_samples_per_s_together"],
        total_throughput_interval=tot_iv_d,
        cpu_util_pct_together=cpu, gpu_util_pct_together=gpu,
        cpu_util_pct_together_repeats=[m.cpu_util_pct for m in machine],
        gpu_util_pct_together_repeats=[m.gpu_util_pct for m in machine],
        overlap_s=min((m.overlap_s for m in machine), default=None),
        overlap_s_repeats=[m.overlap_s for m in machine],
        window_overlap_repeats=[min((v for v in sh if v is not None), default=None)
                                if sh else None for sh in shares],
        repeats_left_out=[{"repeat": i, "job": job, "window_share": share}
                          for i, job, share in short],
        verdict=v, evidence=evidence,
        throughput=throughput_line(tot, len(jobs), tot_iv_d),
        run_ids={"alone": [r.run_id for rs in alone for r in rs],
                 "together": [r.run_id for rs in together for r in rs]},
        finished_at=res.utc_now())


def run_colocate(spec: str | Path | dict[str, Any], out_dir: str | Path | None = None,
                 overrides: dict[str, Any] | None = None, progress: bool = True,
                 console: Console | None = None, placement: str | None = None,
                 repeats: int | None = None,
                 render: Callable[[ColocateRecord], str] | None = None
                 ) -> ColocateRecord:
    """Run every job alone, then all together, ``repeats`` times interleaved; append and
    return the ``kind: colocate`` record (its point runs are run records with
    ``experiment.kind == "colocate"`` and ``experiment.repeat``). ``render``: the record as
    Markdown (``report.render.colocate.render_colocate``, as the command passes it), written to
    ``colocate.md``; the experiment renders nothing itself."""
    cs = load_colocate_spec(spec, overrides, placement, repeats)
    out = Path(out_dir) if out_dir is not None else Path(cs.jobs[0][1].out)
    cs = dataclasses.replace(cs, jobs=[(n, C.build({"out": str(out)}, cfg))
                                       for n, cfg in cs.jobs])
    preflight([cfg for _, cfg in cs.jobs])
    out.mkdir(parents=True, exist_ok=True)
    con = (console or Console(stderr=True)) if progress else None
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
        else list(range(os.cpu_count() or 1))
    plan, note = plan_placement(len(cs.jobs), cs.placement, cpus, gpu_count())  # no CUDA init
    ctx = _Ctx(cs, out, ProcessSet(), con)
    ctx.say(f"placement: {note}; {cs.repeats} repeat(s), interleaved")
    alone, together, machine = _run_repeats(ctx, plan)
    rec = _record(cs, plan, note, len(cpus), alone, together, machine)
    rec.spec_path = spec_file(spec)
    res.append_jsonl(out / res.RESULTS_FILE, rec.to_dict())
    if render is not None:
        (out / "colocate.md").write_text(render(rec))
    return rec
