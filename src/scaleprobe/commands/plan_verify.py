"""``scaleprobe plan --verify``: the fastest pick and its runner-up run here for a few steps,
through the normal run machinery (ranks as processes, the plan's source run's configuration
with the row's strategy, processes and batch per device), each measured step set beside the
step the plan predicted for the link those ranks cross here (loopback on one host), as
``predict --check`` sets a run beside its prediction."""

from __future__ import annotations

import argparse
import math
import os
import sys
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from scaleprobe.commands.predict_memory_check import memory_point
from scaleprobe.config.keys import flatten
from scaleprobe.config.runconfig import build
from scaleprobe.core import claim as CL
from scaleprobe.core import claim_kinds as CK
from scaleprobe.core.errors import ConfigError
from scaleprobe.core.metrics import Interval
from scaleprobe.core.result_model import RunResult
from scaleprobe.experiments.point import PointPayload
from scaleprobe.experiments.procs import ProcessSet, collect_record, point_experiment
from scaleprobe.measure.outside import COMPANIONS_ENV, open_gate, write_companions
from scaleprobe.predict import check as C
from scaleprobe.predict import plan as P
from scaleprobe.report.reading.machine_load import source

GOAL = 0.10  # a verified step within +-10% of its prediction
WARMUP_STEPS = 3


def _cannot(r: P.Row, like: RunResult) -> str | None:
    """Why the row cannot be run here as it was planned, or None."""
    if r.nnodes > 1:
        return f"{r.nnodes} hosts: this machine is one"
    gpus = like.env.get("gpus") or []
    if str(like.env.get("cuda_available")).lower() == "true":
        return None if r.devices <= len(gpus) else f"{r.devices} GPUs; this host has {len(gpus)}"
    threads = int(like.env.get("threads") or 1)
    cores = os.cpu_count() or 1
    if r.devices * threads > cores:
        fit = cores // r.devices
        return (f"{r.devices} processes x {threads} thread(s), as the run it is planned "
                f"from had, need {r.devices * threads} cores; this host has {cores}"
                + (f" (plan from one-rank runs with --set dist.threads_per_rank={fit} to "
                   "verify it here)" if fit >= 1 else ""))
    return None


def config_for(like: RunResult, r: P.Row, steps: int, out: str, copy: str = "") -> Any:
    """The source run's configuration with the row's strategy, processes and batch per
    device, the threads per rank the source run had, a few steps and no extras (``copy``:
    a suffix for one of several one-rank runs made side by side)."""
    flat = flatten(like.config_dict())
    flat.update({"dist.strategy": r.strategy, "dist.nproc": r.nproc, "dist.nnodes": 1,
                 "dist.node_rank": 0, "dist.rdzv_endpoint": None, "dist.master_port": None,
                 "dist.link": None, "dist.parity": False,
                 "dist.threads_per_rank": int(like.env.get("threads") or 1),
                 "train.batch_size": r.batch, "train.global_batch": None,
                 "train.steps": steps, "train.warmup_steps": WARMUP_STEPS,
                 "train.epochs": None, "train.target": None, "train.eval": False,
                 "measure.gns": False, "measure.progress": False, "out": out,
                 "name": f"plan-{r.strategy}-{r.devices}x{r.batch}{copy}"})
    return build({k: v for k, v in flat.items() if k != "dist.calibrate_comm"})


VERIFY_STEPS = 20  # timed steps per verified row at least (3 warm-up steps before them)
MIN_WINDOW_S = 2.0  # a verified row's timed steps last this long at least, as predicted
MAX_AUTO_STEPS = 500


def steps_for(r: P.Row, given: int | None, least: int) -> int:
    """Timed steps for a verified row: ``given``, else at least ``least`` and enough for
    ``MIN_WINDOW_S`` at the row's predicted step (at most ``MAX_AUTO_STEPS``): 20 steps of
    gpt_tiny's 15 ms, a 0.3 s window, measured its 2-rank step at 16.3, 19.2 and 23.5 ms in
    three tries on a quiet machine."""
    if given:
        return given
    p = r.prediction
    step = p.step_s.value if p is not None else None
    if not step or step <= 0:
        return least
    return max(least, min(MAX_AUTO_STEPS, math.ceil(MIN_WINDOW_S / step)))


def side_by_side(r: P.Row, like: RunResult) -> int:
    """How many one-rank runs of the row's basis to make at once before it: on the CPU one
    per rank the row puts on this host, so that they share its cores as the row's ranks will
    (each other's compute, and the other jobs'); on CUDA one (each rank has its device)."""
    if str(like.env.get("cuda_available")).lower() == "true":
        return 1
    return max(1, r.nproc)


def _predicted_here(got: dict[str, Any], r: P.Row, bases: dict[int, P.Basis] | None = None
                    ) -> P.Row:
    """The row predicted for the link its ranks cross here (one host: loopback), from
    ``bases`` (default: the plan's own one-rank runs)."""
    q = got["question"]
    if bases is None and q.link is None and q.nnodes == 1:
        return r
    one = P.Question([r.strategy], [r.nproc], [r.batch], {r.nproc: r.device_bytes}, 1, None,
                     q.prefetch, q.units, q.target, train_samples=q.train_samples)
    (again,) = P.plan(got["inputs"], bases or got["bases"][r.strategy], one)
    return again


def _measured(res: RunResult) -> tuple[float | None, tuple[float, float] | None]:
    st = res.metrics.step_time_s
    if res.status != "ok" or st is None or st.median is None:
        return None, None
    iv = (st.median * (1 - st.rel_ci), st.median * (1 + st.rel_ci)) if st.rel_ci else None
    return st.median, iv


def _base_row(r: P.Row) -> P.Row:
    """The one-rank run to predict the row from, as a row to run: the row's own strategy on
    one launched process, so that its compute and its per-step costs (the strategy's hooks
    and copies, its collective on a world of one, the launcher's bookkeeping) are those of
    each of the row's ranks. A one-process ``single`` run has none of them: gpt_tiny's DDP
    on one rank took 12% longer than it (docs/PLAN.md)."""
    return replace(r, nproc=1, nnodes=1)


def plan_basis(got: dict[str, Any], r: P.Row) -> str:
    """The strategy of the plan's own one-rank runs the row's step was drawn from."""
    basis = got["bases"][r.strategy]
    near = basis.get(r.batch) or P.nearest(basis, r.batch)
    return near.sample.strategy


def _fig(row: P.Row) -> dict[str, Any]:
    p = row.prediction
    assert p is not None
    return {"value": p.step_s.value, "interval": (p.step_s.lo, p.step_s.hi), "link": p.link}


Runner = Callable[[list[Any]], list[RunResult]]
MEMORY_KEYS = ("predicted_peak_bytes", "predicted_peak_low_bytes", "predicted_peak_high_bytes",
               "measured_peak_bytes", "memory_ratio", "memory_reason")


def point_runner(procs: ProcessSet, exp_id: str) -> Runner:
    """Configurations run at once, each as an experiment's point: in its own process (a
    process that has run tensor operations cannot fork ranks that use OpenMP), its record
    appended to its results folder once all have ended. Several at once share one session,
    as the ranks of one job do: with autogroup scheduling (Linux) the CPU is shared between
    sessions, and a 2-rank job in one session got the share one one-rank run of its own
    session got (docs/PLAN.md). Several at once are each other's companions: each run's
    outside load leaves the others' CPU out (measure/outside.py), as it is part of what
    they measure, and they start their timed windows together (its gate): started at once
    without it, the validation grid's copies opened theirs up to 2 s apart."""
    def run(cfgs: list[Any]) -> list[RunResult]:
        started, env = [], None
        mates = Path(cfgs[0].out) / "points" / f"companions-{uuid.uuid4().hex[:8]}"
        ready = [Path(f"{mates}.{i}.ready") for i in range(len(cfgs))]
        if len(cfgs) > 1:
            mates.parent.mkdir(parents=True, exist_ok=True)
            env = {COMPANIONS_ENV: str(mates)}
        for i, cfg in enumerate(cfgs):
            label = str(cfg.name)
            exp = point_experiment(exp_id, "plan-verify", {"label": label})
            gate = ({"ready": str(ready[i]), "go": f"{mates}.go"} if env is not None else None)
            started.append(procs.start(PointPayload(cfg, exp, barrier=gate),
                                       Path(cfg.out) / "points", label, env=env,
                                       own_session=len(cfgs) == 1))
        if env is not None:
            write_companions(mates, [p.pid for p in started])
            open_gate(ready, Path(f"{mates}.go"), started)
        return [collect_record(proc, procs.wait(proc)) for proc in started]
    return run


def _say(x: P.Row, steps: int, copies: int = 1) -> None:
    many = f" ({copies} at once, as the row's ranks will share this host)" if copies > 1 else ""
    print(f"verifying: {x.strategy} on {x.devices}, batch {x.batch} per device, {steps} "
          f"timed steps{many} ...", file=sys.stderr, flush=True)


def _one(got: dict[str, Any], r: P.Row, args: argparse.Namespace,
         run_config: Runner) -> dict[str, Any]:
    """One row run here after fresh one-rank runs of its basis, as many at once as the row
    has ranks on this host (``side_by_side``); each prediction (the plan's, and one from the
    fresh runs, which shared the machine as the row's ranks did) beside the measured step."""
    out: dict[str, Any] = {"label": r.label(), "strategy": r.strategy, "devices": r.devices,
                           "batch_per_device": r.batch, "global_batch": r.global_batch,
                           "plan_link": r.prediction.link if r.prediction else None}
    like = got["like"]
    why = _cannot(r, like)
    if why:
        return out | {"reason": f"not run here: {why}"}
    base, n = _base_row(r), side_by_side(r, like)
    out |= {"one_rank_strategy": base.strategy, "plan_basis_strategy": plan_basis(got, r)}
    steps = steps_for(r, args.verify_steps, VERIFY_STEPS)
    out["timed_steps"] = steps
    _say(base, steps, n)
    fresh = run_config([config_for(like, base, steps, args.out,
                                   f"-{i + 1}of{n}" if n > 1 else "") for i in range(n)])
    if r.devices == 1:
        res = fresh[0]  # the row is its own one-rank run
    else:
        _say(r, steps)
        (res,) = run_config([config_for(like, r, steps, args.out)])
    m, iv = _measured(res)
    out |= {"run_id": res.run_id, "status": res.status, "measured_s": m,
            "measured_interval_s": iv, "run_dir": res.paths.get("dir"),
            "one_rank_run_ids": [f.run_id for f in fresh], "one_rank_side_by_side": n,
            "record": res, "under_load": CL.load_caveat(
                tuple(source(x) for x in (*fresh, res))) or None}
    out["cpu_share_pct"] = cpu_share(fresh, res)
    # the row's peak per rank as measured beside the plan's prediction (from the plan's run)
    out["memory"] = {k: v for k, v in memory_point(res, like).items() if k in MEMORY_KEYS}
    bad = next((f for f in fresh if f.status != "ok"), None)
    if m is None or bad is not None:
        return out | {"reason": res.error or (bad.error if bad else None)
                      or f"the run ended {res.status}"}
    plan_row = _predicted_here(got, r)
    # re-made from the fresh one-rank runs, at the outside load the row was measured under
    sample, out["load_factor"] = C.as_measured(res, fresh)
    here = _predicted_here(got, r, {r.batch: P.Basis(r.batch, sample, len(fresh),
                                                      tuple(f.label for f in fresh),
                                                      tuple(f.run_id for f in fresh))})
    out |= {"predicted_plan": _fig(plan_row), "predicted_here": _fig(here)}
    for key, row in (("ratio_plan", plan_row), ("ratio", here)):
        v = row.prediction.step_s.value if row.prediction else None
        out[key] = v / m if v else None
    goal = goal_claim(here, m, iv, res.metrics.steps_timed or steps,
                      tuple(source(x) for x in (*fresh, res)))
    out["goal"] = goal.to_dict()
    # true / false where the claim decided it; null where inconclusive or without an interval
    out["within_goal"] = goal.rule == CL.RULE_INSIDE_BAND if goal.decided else None
    return out


def goal_claim(here: P.Row, measured: float, measured_iv: tuple[float, float] | None,
               steps: int, sources: tuple[CL.Source, ...] = ()) -> CL.Claim:
    """Whether the measured step came within +-``GOAL`` of the prediction from the fresh
    one-rank runs, as a claim (``claim_kinds.prediction_check``): predicted / measured, its interval
    the prediction's low end over the measured median's high end and back (a prediction
    without an interval: its value at both ends); without the measured median's interval,
    no interval, never a verdict. One run measured: its interval holds its steps' spread,
    not the drift between runs."""
    p = here.prediction
    v = p.step_s.value if p is not None else None
    ratio = v / measured if v and measured else None
    iv = None
    if ratio is not None and measured_iv is not None and v is not None and p is not None:
        lo, hi = p.step_s.lo or v, p.step_s.hi or v
        m_lo, m_hi = measured_iv
        if m_lo > 0 and m_hi > 0:
            iv = Interval(ratio, lo / m_hi, hi / m_lo, steps,
                          "the prediction's interval over the measured median step's")
    return CK.prediction_check(
        "predicted from the one-rank runs just before / measured", ratio, iv, GOAL,
        f"one run measured, its {steps} timed steps, against the prediction's interval",
        sources)


def cpu_share(fresh: list[RunResult], row: RunResult) -> dict[str, float] | None:
    """The share of the machine's CPU (% of all cores, each run's process tree) the row's
    run got, and its one-rank runs together: on a shared CPU the two can differ by more than
    any model's error, and the comparison then says so. None where a run's timed window
    held fewer than ``check.MIN_SAMPLES`` of its monitor's samples (too short to read)."""
    if not all(C.readable_window(r) for r in (*fresh, row)):
        return None
    got = [f.metrics.cpu_util_pct for f in fresh]
    mine = row.metrics.cpu_util_pct
    if mine is None or any(g is None for g in got):
        return None
    return {"row": float(mine), "one_rank_runs": float(sum(g for g in got if g is not None))}


def verify(args: argparse.Namespace, got: dict[str, Any]) -> list[dict[str, Any]]:
    """The fastest pick and its runner-up, each run here beside its prediction; then the
    measured samples/s of the pick over the runner-up's as a claim (one run each)."""
    pk = next((p for p in got["picks"] if p is not None and p.kind == CL.FASTEST), None)
    if pk is None:
        raise ConfigError("--verify: no configuration fits, nothing to run")
    procs = ProcessSet()
    try:
        run = point_runner(procs, f"plan-{uuid.uuid4().hex[:8]}")
        done = [_one(got, r, args, run) for r in (pk.row, pk.runner_up) if r is not None]
    except BaseException:
        procs.stop_all()
        raise
    finally:
        procs.close()
    if len(done) == 2 and all(d.get("measured_s") is not None for d in done):
        done[0]["pair"] = _pair(pk, done).to_dict()
    for d in done:
        d.pop("record", None)
    return done


def _pair(pk: P.Pick, done: list[dict[str, Any]]) -> CL.Claim:
    """The pick over the runner-up on what the pick was chosen by, with the measured steps:
    samples/s (median step), or where both rows have predicted steps to the target, 1 / time
    to it (the measured step x the predicted steps); the interval from the two runs'
    median-step intervals (and the step counts' own), one run each."""
    a, b = done
    assert pk.runner_up is not None
    na, nb = pk.row.steps_to_target, pk.runner_up.steps_to_target
    if na is not None and nb is not None and na.value and nb.value:
        ka, kb = (na.value, na.lo or na.value, na.hi or na.value), (
            nb.value, nb.lo or nb.value, nb.hi or nb.value)
        what = "1 / time to the target: the measured median step x the predicted steps to it"
    else:  # samples/s: per step, the global batch
        ka = (1 / a["global_batch"],) * 3
        kb = (1 / b["global_batch"],) * 3
        what = "measured samples/s (median step)"
    ratio = (kb[0] * b["measured_s"]) / (ka[0] * a["measured_s"])
    iv = None
    if a.get("measured_interval_s") and b.get("measured_interval_s"):
        (alo, ahi), (blo, bhi) = a["measured_interval_s"], b["measured_interval_s"]
        iv = Interval(ratio, (kb[1] * blo) / (ka[2] * ahi), (kb[2] * bhi) / (ka[1] * alo), 1,
                      "the two runs' median-step intervals")
    return CK.plan_pick(CL.FASTEST, pk.row.label(), pk.runner_up.label(), ratio, iv, (1, 1),
                        (source(a["record"]), source(b["record"])), what, "one run each, here")
