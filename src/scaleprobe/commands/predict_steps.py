"""``scaleprobe predict --from RUN`` (the step model: a step's timeline from one measured
one-rank run) and ``scaleprobe predict --check RUNS`` (each measured multi-rank run beside
its prediction). The figures come from ``predict/stepmodel.py``, ``predict/whatif.py`` and
``predict/check.py``; this module reads the records and prints.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from scaleprobe.commands import predict_memory_check as PMC
from scaleprobe.core.claim import UNDER_LOAD
from scaleprobe.core.errors import ConfigError
from scaleprobe.core.machine_load import run_load
from scaleprobe.core.result_model import RunResult
from scaleprobe.features.links import UNDER_LOAD_HEAD
from scaleprobe.predict import check as C
from scaleprobe.predict import sample as S
from scaleprobe.predict import whatif as W
from scaleprobe.predict.stepmodel import NEEDED_FLOOR_GBIT_S, Prediction
from scaleprobe.predict.timeline import Unit
from scaleprobe.report.reading.records import load_records, runs
from scaleprobe.report.render.whatif import ceiling_caveat


def load_runs(path: str) -> list[RunResult]:
    return runs(load_records(path))


def one_rank_run(path: str) -> RunResult:
    """The one-rank run ``path`` names (a result.json, a run folder, or a folder of runs:
    then its latest one-rank run)."""
    every = load_runs(path)
    got = [r for r in every if r.status == "ok" and r.step_median_s is not None]
    ones = [r for r in got if (r.world_size or 1) == 1]
    if not ones:
        many = f" (it holds runs of {sorted({r.world_size or 1 for r in got})} processes)" if got \
            else ""
        ended = sorted({str(r.status) for r in every if r.status != "ok"})
        if not got and ended:  # a run that did not finish: say so, not "not one rank"
            many = f" (it holds runs that did not finish: {', '.join(ended)})"
        raise ConfigError(f"no measured one-rank run in {path}{many}: --from takes a run of "
                          "one process that ended ok; --check sets multi-rank runs beside "
                          "their prediction")
    return max(ones, key=lambda r: str(r.started_at or ""))


def fsdp_units(run: RunResult) -> tuple[Any, ...]:
    """FSDP's units of the run's model (strategies/fsdp.py's rule, then the root): as the run
    recorded them, else from the model built on the meta device by name (a language model's
    or a user's model built so may differ from the run's); () when it cannot be built here."""
    if got := S.recorded_units(run):
        return got
    # heavy: torch: only when a model is built to count its parameters
    import torch  # the model is built on the meta device: no memory, no weights

    # heavy: torch: only when a model is built to count its parameters
    from scaleprobe.models.build import build_model
    from scaleprobe.strategies.fsdp import shard_units

    name = run.cfg("model.name")
    size = (run.resolved or {}).get("data.image_size") or run.cfg("data.image_size") or 32
    classes = (run.resolved or {}).get("data.num_classes") or 10
    try:
        with torch.device("meta"):
            model = build_model(str(name), int(classes), int(size))
    except Exception:  # noqa: BLE001  (a user's builder may not build on meta: one unit)
        return ()
    units, _ = shard_units(model)
    counts = [sum(p.numel() for p in u.parameters()) for u in units]
    total = sum(p.numel() for p in model.parameters())
    counts.append(total - sum(counts))  # the root: what no unit holds, kept gathered
    last = len(counts) - 1
    return tuple(Unit(S.FP32_BYTES * c, c / total, regather=i != last)
                 for i, c in enumerate(counts) if c > 0)


def run_from(args: argparse.Namespace) -> int:
    run = one_rank_run(args.from_result)
    sample = S.from_run(run)
    strategies = W.parse_strategies(args.strategy)
    like = W.as_run(run)
    on_cuda = like["prefetch"]
    grid = W.Grid(strategies, W.parse_counts(args.nproc, "--nproc"),
                  W.parse_counts(args.nnodes, "--nnodes"), args.link or [None],
                  args.average_every, **like)
    W.check_grid(grid)  # before the model is built for its units
    W.check_gpu_link(on_cuda, grid.links, grid.nnodes, grid.nprocs)
    if "fsdp" in strategies:
        grid = replace(grid, units=fsdp_units(run))
    rows = W.plan(sample, grid, args.target)
    if args.json:
        print(json.dumps({"from": _from_dict(run, sample),
                          "rows": [_row_dict(r) for r in rows]}, indent=2, default=str))
    else:
        print_rows(run, sample, rows, args.target)
    return 0


def _from_dict(run: RunResult, s: S.RunSample) -> dict[str, Any]:
    caveat = ceiling_caveat(run)
    return {"run": run.label, "strategy": s.strategy, "threads": s.threads,
            "grad_bytes": s.grad_bytes, "steps": s.rows_source, "buckets": len(s.buckets or []),
            "step_median_s": s.step_median_s, "pass_s_per_byte": s.pass_s_per_byte,
            "under_load": bool(caveat), "load_caveat": caveat or None}


def _row_dict(r: W.Row) -> dict[str, Any]:
    return {"link_spec": r.link_spec, "nproc": r.nproc, "nnodes": r.nnodes,
            "needed_gbit_s": r.needed_gbit_s, "needed_reason": r.needed_reason,
            **r.prediction.to_dict()}


def _fig(v: Any, lo: Any, hi: Any, fmt: Any) -> str:
    if v is None:
        return "n/a"
    return f"{fmt(v)} [{fmt(lo)}, {fmt(hi)}]" if lo is not None and hi is not None else fmt(v)


def time_unit(*values: float | None) -> tuple[str, float]:
    """One unit for a table's times: ms, or seconds when any of them reaches 10 s (so a
    column never holds "9850.1" beside "10.49", nor seconds under a heading of ms)."""
    big = max((v for v in values if v is not None), default=0.0)
    return ("s", 1.0) if big >= 10 else ("ms", 1e3)


def duration(v: float) -> str:
    """A time with its unit: ``53.5 ms``, ``21.39 s``."""
    unit, scale = time_unit(v)
    return f"{v * scale:.2f} s" if unit == "s" else f"{v * scale:.1f} ms"


def _in(unit: tuple[str, float]) -> Any:
    name, scale = unit
    return (lambda v: f"{v * scale:.2f}") if name == "s" else (lambda v: f"{v * scale:.1f}")


def _time_fig(v: float | None, lo: float | None, hi: float | None,
              unit: tuple[str, float] | None = None) -> str:
    """A time with its interval in one unit (the table's, else its own: ms, or seconds
    from 10 s up, said once)."""
    if unit is None:
        unit = time_unit(v, lo, hi)
        text = _fig(v, lo, hi, _in(unit))
        return f"{text} s" if unit[0] == "s" and v is not None else text
    return _fig(v, lo, hi, _in(unit))


def _needed(r: W.Row, loaded: bool = False) -> str:
    """The slowest link for the target, in a cell that keeps the table in 80 columns: under
    load "unreachable*", the star the caveat under the table ("* measured under load")."""
    if r.prediction.world < 2:
        return "-"  # one process: no link
    if r.needed_gbit_s is None:
        return ("unreachable" + ("*" if loaded else "")) if r.needed_reason else "n/a"
    g = r.needed_gbit_s
    if g <= NEEDED_FLOOR_GBIT_S:
        return f"< {NEEDED_FLOOR_GBIT_S * 1e3:g} Mbit/s"
    return f">= {g:.2f} Gbit/s" if g >= 0.1 else f">= {g * 1e3:.1f} Mbit/s"


def _table(title: str) -> Any:
    # heavy: rich: printing only; kept out of the CLI's start-up
    from rich import box
    from rich.table import Table

    return Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)


def print_rows(run: RunResult, s: S.RunSample, rows: list[W.Row], target: float) -> None:
    """Per link, two tables that fit 80 columns: the predicted step, speedup and efficiency;
    then where the step's time goes and the slowest link for ``target``. Times in one unit
    per table, named in its headings."""
    # heavy: rich: printing only; kept out of the CLI's start-up
    from rich.console import Console

    from scaleprobe.commands.terminal import esc  # heavy: rich

    con = Console()
    caveat = ceiling_caveat(run)
    con.print(f"from {run.label}: 1 process, {s.threads or '?'} thread(s) per rank, "
              f"{s.grad_bytes / 1e6:.1f} MB of fp32 gradients, step "
              f"{duration(s.step_median_s or 0)}; compute drawn from {s.rows_source}",
              markup=False, highlight=False)
    for spec in dict.fromkeys(r.link_spec for r in rows):
        part = [r for r in rows if r.link_spec == spec]
        con.print("link: " + W.link_line(None if spec == "default" else spec, part[0].nnodes),
                  markup=False, highlight=False)
        unit = time_unit(*(v for r in part for v in (r.prediction.step_s.hi,
                                                     r.prediction.comm_busy_s,
                                                     *r.prediction.phases.values())))
        u, fig = unit[0], _in(unit)
        t = _table(f"predicted median step ({u}) and speedup in samples/s (of the mean "
                   "step) over the run, 95% intervals (the run's spread, the link fit's and "
                   "the model's own error)")
        for col in ("strategy", "processes", f"step {u}", "speedup", "efficiency"):
            t.add_column(col, justify="left" if col == "strategy" else "right", no_wrap=True)
        for r in part:
            p = r.prediction
            t.add_row(esc(p.strategy), _where(r), _time_fig(p.step_s.value, p.step_s.lo,
                                                            p.step_s.hi, unit),
                      _fig(p.speedup.value, p.speedup.lo, p.speedup.hi, lambda v: f"{v:.2f}"),
                      f"{p.efficiency.value:.0%}")
        con.print(t)
        t = _table(f"where the step goes ({u}), and the slowest link for {target:.0%} "
                   "efficiency")
        for col in ("strategy", "processes", f"compute {u}", f"comm {u}", f"link busy {u}",
                    f"link for {target:.0%}"):
            t.add_column(col, justify="left" if col == "strategy" else "right", no_wrap=True)
        for r in part:
            p = r.prediction
            comp = sum(v for k, v in p.phases.items() if k != "comm")
            t.add_row(esc(p.strategy), _where(r), fig(comp), fig(p.phases["comm"]),
                      fig(p.comm_busy_s), esc(_needed(r, bool(caveat))))
        con.print(t)
    notes = dict.fromkeys([n for r in rows for n in r.prediction.notes] +
                          [m for r in rows if (m := mean_step_note(r.prediction, duration))] +
                          [f"{r.prediction.strategy} on {r.nnodes * r.nproc} processes, link "
                           f"for {target:.0%}: {r.needed_reason}" for r in rows
                           if r.needed_reason])
    if any(r.prediction.oversubscribed for r in rows):
        con.print("  ! not like for like: these ranks on one host need more cores than it has "
                  "at the run's threads per rank (note below)", markup=False, highlight=False)
    for n in notes:
        con.print(f"  note: {n}", markup=False, highlight=False)
    if caveat:
        con.print(f"  * {caveat}.", markup=False, highlight=False)


MEAN_APART = 0.02  # a mean step this far from the median is said beside the speedup


def mean_step_note(p: Prediction, show: Callable[[float], str]) -> str | None:
    """Where the mean step the speedup is of (samples/s: every step counts, local SGD's
    averaging steps included) is more than ``MEAN_APART`` from the median step shown beside
    it, a note says so with both: dividing the shown step into the run's would not give the
    speedup."""
    mean, median = p.step_mean_s, p.step_s.value
    if not mean or not median or abs(mean / median - 1.0) <= MEAN_APART:
        return None
    return (f"{p.strategy} on {p.world} processes: the speedup and efficiency are of the mean "
            f"step, {show(mean)} (every step counts in samples/s), not of the median step "
            f"shown, {show(median)}")


def _where(r: W.Row) -> str:
    """The processes, ``!`` after them where their ranks would share the run's cores (the
    prediction's note says so)."""
    where = f"{r.nnodes} x {r.nproc}" if r.nnodes > 1 else str(r.nproc)
    return where + (" !" if r.prediction.oversubscribed else "")


def _link_label(run: RunResult) -> str:
    name = str(((run.comm.measured_link if run.comm else None) or {}).get("name") or "?")
    if name.startswith("measured:"):
        parts = name.split("/")
        return "measured:" + "/".join(parts[-2:])
    return name


def run_check(args: argparse.Namespace) -> int:
    records = load_runs(args.check)
    points = C.check(records)
    if not points:
        raise ConfigError(f"no measured multi-rank run in {args.check}")
    summ = C.summary(points)
    mem = {id(p): PMC.check_memory(p, records) for p in points}
    pairs = C.order_pairs(points)
    if args.json:
        print(json.dumps({"points": [_point_dict(p) | mem[id(p)] for p in points],
                          "summary": summ.__dict__ | {"goal_met": summ.goal_met,
                                                      "papers_goal_met": summ.papers_goal_met},
                          "order_pairs": [_pair_dict(x) for x in pairs]},
                         indent=2, default=str))
        return 0
    if not getattr(args, "memory", False):
        print_check(points, summ)
        print_order(pairs)
    PMC.print_check_memory(points, mem, always=bool(getattr(args, "memory", False)))
    return 0


def _name(p: C.Point) -> str:
    return f"{p.run.cfg('model.name')} {_link_label(p.run)} {p.run.cfg('dist.strategy')}"


def _pair_dict(x: C.Pair) -> dict[str, Any]:
    return {"fast": x.fast.run.run_id, "slow": x.slow.run.run_id, "fast_name": _name(x.fast),
            "slow_name": _name(x.slow), "measured_ratio": x.measured_ratio,
            "predicted_ratio": x.predicted_ratio, "misordered": x.misordered}


def print_order(pairs: list[C.Pair]) -> None:
    """The pairs of one setting whose measured steps differ by more than the margin, each
    with the prediction's ratio, and the ones it puts in the wrong order."""
    # heavy: rich: printing only; kept out of the CLI's start-up
    from rich.console import Console

    con = Console()
    bad = [x for x in pairs if x.misordered]
    con.print(f"order: {len(pairs)} pairs of one setting whose measured steps differ by more "
              f"than {C.ORDER_MARGIN:.0%}; predicted in the wrong order: {len(bad)}",
              markup=False, highlight=False)
    for x in pairs:
        con.print(f"  {'WRONG ORDER ' if x.misordered else ''}{_name(x.slow)} / "
                  f"{_name(x.fast)}: measured {x.measured_ratio:.2f}, predicted "
                  f"{x.predicted_ratio:.2f}", markup=False, highlight=False)


def _point_dict(p: C.Point) -> dict[str, Any]:
    pred = p.prediction
    return {"run": p.run.label, "run_id": p.run.run_id, "model": p.run.cfg("model.name"),
            "link": _link_label(p.run), "strategy": p.run.cfg("dist.strategy"),
            "world": p.run.world_size, "measured_s": p.measured_s,
            "measured_interval_s": p.measured_interval,
            "predicted": pred.to_dict() if pred else None, "ratio": p.ratio,
            "ratio_interval": p.ratio_interval, "bases": [b.run_id for b in p.bases],
            "measured_comm_s": p.run.metrics.breakdown_s.comm, "reason": p.reason,
            "causes": p.causes(), "started_at": p.run.started_at, "drift": p.drift,
            "load_factor": p.load}


def print_check(points: list[C.Point], summ: C.Summary) -> None:
    # heavy: rich: printing only; kept out of the CLI's start-up
    from rich.console import Console

    from scaleprobe.commands.terminal import esc  # heavy: rich

    con = Console()
    unit = time_unit(*(v for p in points for v in (
        p.measured_s, *(p.measured_interval or ()), p.run.metrics.breakdown_s.comm,
        *((p.prediction.step_s.value, p.prediction.step_s.hi, p.prediction.phases["comm"])
          if p.prediction else ()))))
    u, fig = unit[0], _in(unit)
    t = _table(f"measured step beside its prediction from the matching 1-rank run ({u}, 95% "
               "intervals; ratio: predicted / measured; comm: the step's communication, "
               "measured / predicted)")
    model_w = min(24, max((len(str(p.run.cfg("model.name"))) for p in points), default=5))
    for col in ("model", "link", "ranks", "measured", "predicted", "ratio", "comm"):
        # a model's name keeps its width (up to 24), the figures wrap at their spaces; a
        # narrow terminal wraps a longer name, never cuts it
        t.add_column(col, justify="left" if col in ("model", "link", "ranks") else "right",
                     overflow="fold", min_width=max(5, model_w) if col == "model" else None)
    for p in points:
        pr, iv, ri = p.prediction, p.measured_interval, p.ratio_interval
        lo, hi = iv or (None, None)
        meas = _time_fig(p.measured_s, lo, hi, unit) + ("*" if p.under_load else "")
        pred = (_time_fig(pr.step_s.value, pr.step_s.lo, pr.step_s.hi, unit) if pr
                else esc(p.reason or "n/a"))
        rlo, rhi = ri or (None, None)
        ratio = (_fig(p.ratio, rlo, rhi, lambda v: f"{v:.2f}")
                 if p.ratio is not None else "n/a")
        mc = p.run.metrics.breakdown_s.comm
        comm = f"{fig(mc)} / {fig(pr.phases['comm'])}" if pr and mc is not None else "n/a"
        t.add_row(esc(p.run.cfg("model.name")), esc(_link_label(p.run)),
                  esc(f"{p.run.cfg('dist.strategy')} x{p.run.world_size}"), meas, pred, ratio,
                  comm)
    con.print(t)
    busy = [p for p in points if p.under_load]
    if busy:  # whatever its error: a prediction near a loaded run may match its load
        con.print(f"  * {UNDER_LOAD} ({len(busy)} of {len(points)} points): "
                  + "; ".join(f"{p.run.label} ({run_load(p.run)[1]})" for p in busy),
                  markup=False, highlight=False)
    if summ.points:
        con.print(f"{summ.points} points: median |predicted / measured - 1| "
                  f"{summ.median_abs_error:.1%}, worst {summ.worst_abs_error:.1%}; within "
                  f"+-{C.GOAL_MEDIAN:.0%}: {summ.within_median_goal}, within "
                  f"+-{C.GOAL_EVERY:.0%}: {summ.within_every_goal}; goal (median within "
                  f"+-{C.GOAL_MEDIAN:.0%}, every point within +-{C.GOAL_EVERY:.0%}): "
                  f"{'met' if summ.goal_met else 'not met'}", markup=False, highlight=False)
        con.print(f"|predicted / measured - 1| over {summ.points} points: mean "
                  f"{summ.mean_abs_error:.1%}, median {summ.median_abs_error:.1%}, p90 "
                  f"{summ.p90_abs_error:.1%}; goal (mean and median within "
                  f"{C.GOAL_MEAN:.0%}, p90 within {C.GOAL_P90:.0%}): "
                  f"{'met' if summ.papers_goal_met else 'not met'}", markup=False,
                  highlight=False)
        if len(summ.ratio_by_strategy) > 1:
            con.print("mean predicted / measured by strategy (below 1: predicted short): "
                      + ", ".join(f"{k} {r:.2f} ({n} points)"
                                  for k, (r, n) in summ.ratio_by_strategy.items()),
                      markup=False, highlight=False)
        if summ.with_interval:
            con.print(f"measured step inside its predicted 95% interval: "
                      f"{summ.inside_interval} of {summ.with_interval} points (such an "
                      f"interval holds about {0.95 * summ.with_interval:.0f})",
                      markup=False, highlight=False)
        if summ.drift_points and summ.median_drift is not None and summ.p90_drift is not None:
            con.print(f"the machine's own drift: the 1-rank runs of a point, measured before "
                      f"and after it, differ by median {summ.median_drift:.1%}, p90 "
                      f"{summ.p90_drift:.1%} ({summ.drift_points} points); a perfect model fed "
                      "either would be off by as much", markup=False, highlight=False)
    loaded = [p.load for p in points if p.prediction is not None and abs(p.load - 1) >= 1e-3]
    if loaded:
        con.print(f"outside load: {len(loaded)} point(s) predicted with compute "
                  f"{min(loaded) - 1:+.1%} to {max(loaded) - 1:+.1%} against their 1-rank runs, "
                  "for the CPU that processes outside the run used while it was measured",
                  markup=False, highlight=False)
    fits = Counter(n for p in points if p.prediction is not None
                   for n in p.prediction.notes if n.startswith(UNDER_LOAD_HEAD))
    for note, n in fits.items():
        con.print(f"{n} point(s) predicted from a fit under load: {note}", markup=False,
                  highlight=False)
    unlike = [p for p in points if p.link_gloo_io
              and p.link_gloo_io != (p.run.cfg("dist.gloo_io") or "default")]
    if unlike:
        con.print(f"{len(unlike)} point(s) measured with another --gloo-io than their link's "
                  "benchmark (scaleprobe comm --gloo-io): not like for like; measure the link "
                  "as the runs ran", markup=False, highlight=False)
    for p in points:
        if p.ratio is not None and C.error(p.ratio) > C.GOAL_EVERY:
            con.print(f"  outside +-{C.GOAL_EVERY:.0%}: {p.run.cfg('model.name')} "
                      f"{_link_label(p.run)} {p.run.cfg('dist.strategy')} ({p.ratio:.2f}): "
                      + ("; ".join(p.causes()) or "no single phase stands out"),
                      markup=False, highlight=False)
