"""``scaleprobe plan --verify``: the fastest pick and its runner-up run here for a few steps,
through the normal run machinery (ranks as processes, the plan's source run's configuration
with the row's strategy, processes and batch per device), each measured step set beside the
step the plan predicted for the link those ranks cross here (loopback on one host), as
``predict --check`` sets a run beside its prediction."""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from scaleprobe.comm import check as C
from scaleprobe.comm import plan as P
from scaleprobe.comm import sample as S
from scaleprobe.core import claim as CL
from scaleprobe.core import results as res
from scaleprobe.core.config import build, flatten
from scaleprobe.core.errors import ConfigError
from scaleprobe.core.metrics import Interval
from scaleprobe.core.results import RunResult
from scaleprobe.experiments.procs import ProcessSet, collect_record, new_attempt
from scaleprobe.report.load import source

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
        return (f"{r.devices} processes x {threads} thread(s), as the run it is planned "
                f"from had, need {r.devices * threads} cores; this host has {cores}")
    return None


def config_for(like: RunResult, r: P.Row, steps: int, out: str) -> Any:
    """The source run's configuration with the row's strategy, processes and batch per
    device, the threads per rank the source run had, a few steps and no extras."""
    flat = flatten(like.config_dict())
    flat.update({"dist.strategy": r.strategy, "dist.nproc": r.nproc, "dist.nnodes": 1,
                 "dist.node_rank": 0, "dist.rdzv_endpoint": None, "dist.master_port": None,
                 "dist.link": None, "dist.parity": False,
                 "dist.threads_per_rank": int(like.env.get("threads") or 1),
                 "train.batch_size": r.batch, "train.global_batch": None,
                 "train.steps": steps, "train.warmup_steps": WARMUP_STEPS,
                 "train.epochs": None, "train.target": None, "train.eval": False,
                 "measure.gns": False, "measure.progress": False, "out": out,
                 "name": f"plan-{r.strategy}-{r.devices}x{r.batch}"})
    return build({k: v for k, v in flat.items() if k != "dist.calibrate_comm"})


def _predicted_here(got: dict[str, Any], r: P.Row, bases: dict[int, P.Basis] | None = None
                    ) -> P.Row:
    """The row predicted for the link its ranks cross here (one host: loopback), from
    ``bases`` (default: the plan's own one-rank runs)."""
    q = got["question"]
    if bases is None and q.link is None and q.nnodes == 1:
        return r
    one = P.Question([r.strategy], [r.nproc], [r.batch], {r.nproc: r.device_bytes}, 1, None,
                     q.prefetch, q.units, q.target)
    (again,) = P.plan(got["inputs"], bases or got["bases"][r.strategy], one)
    return again


def _measured(res: RunResult) -> tuple[float | None, tuple[float, float] | None]:
    st = res.metrics.step_time_s
    if res.status != "ok" or st is None or st.median is None:
        return None, None
    iv = (st.median * (1 - st.rel_ci), st.median * (1 + st.rel_ci)) if st.rel_ci else None
    return st.median, iv


def _base_row(got: dict[str, Any], r: P.Row) -> P.Row:
    """The one-rank run the row's step is drawn from, as a row to run: the strategy of the
    plan's own runs at that batch, one process."""
    basis = got["bases"][r.strategy]
    near = basis.get(r.batch) or P.nearest(basis, r.batch)
    return replace(r, strategy=near.sample.strategy, nproc=1, nnodes=1)


def _fig(row: P.Row) -> dict[str, Any]:
    p = row.prediction
    assert p is not None
    return {"value": p.step_s.value, "interval": (p.step_s.lo, p.step_s.hi), "link": p.link}


Runner = Callable[[Any, str], RunResult]


def point_runner(procs: ProcessSet, exp_id: str) -> Runner:
    """Each configuration run as an experiment's point: in its own process (a process that
    has run tensor operations cannot fork ranks that use OpenMP), its record appended to its
    results folder."""
    def run(cfg: Any, label: str) -> RunResult:
        exp = {"id": exp_id, "kind": "plan-verify", "point": {"label": label},
               "attempt": new_attempt()}
        proc = procs.start({"config": cfg.to_dict(), "experiment": exp},
                           Path(cfg.out) / "points", label)
        return RunResult.from_dict(collect_record(proc, procs.wait(proc), cfg, exp,
                                                  Path(cfg.out) / res.RESULTS_FILE))
    return run


def _one(got: dict[str, Any], r: P.Row, args: argparse.Namespace,
         run_config: Runner) -> dict[str, Any]:
    """One row run here after a fresh one-rank run of its basis, each prediction (the
    plan's, and one from the fresh run, which saw the machine as the row's run did) beside
    the measured step."""
    out: dict[str, Any] = {"label": r.label(), "strategy": r.strategy, "devices": r.devices,
                           "batch_per_device": r.batch, "global_batch": r.global_batch}
    why = _cannot(r, got["like"])
    if why:
        return out | {"reason": f"not run here: {why}"}
    base = _base_row(got, r)
    ran = []
    for x in (base, r):
        print(f"verifying: {x.strategy} on {x.devices}, batch {x.batch} per device, "
              f"{args.verify_steps} timed steps ...", file=sys.stderr, flush=True)
        cfg = config_for(got["like"], x, args.verify_steps, args.out)
        ran.append(run_config(cfg, str(cfg.name)))
        if x is base and r.devices == 1 and r.strategy == base.strategy:
            ran.append(ran[0])  # the row is its own one-rank run
            break
    fresh, res = ran
    m, iv = _measured(res)
    out |= {"run_id": res.run_id, "status": res.status, "measured_s": m,
            "measured_interval_s": iv, "run_dir": res.paths.get("dir"),
            "one_rank_run_id": fresh.run_id, "record": res,
            "under_load": CL.load_caveat((source(fresh), source(res))) or None}
    if m is None or fresh.status != "ok":
        return out | {"reason": res.error or fresh.error or f"the run ended {res.status}"}
    plan_row = _predicted_here(got, r)
    here = _predicted_here(got, r, {r.batch: P.Basis(r.batch, S.from_run(fresh), 1,
                                                      (fresh.label,), (fresh.run_id,))})
    out |= {"predicted_plan": _fig(plan_row), "predicted_here": _fig(here)}
    for key, row in (("ratio_plan", plan_row), ("ratio", here)):
        v = row.prediction.step_s.value if row.prediction else None
        out[key] = v / m if v else None
    out["within_goal"] = out["ratio"] is not None and C.error(out["ratio"]) <= GOAL
    return out


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
    """The measured samples/s (median step) of the pick over the runner-up's, with the
    interval of the two runs' median steps, one run each."""
    a, b = done
    assert pk.runner_up is not None
    sa, sb = a["global_batch"] / a["measured_s"], b["global_batch"] / b["measured_s"]
    iv = None
    if a.get("measured_interval_s") and b.get("measured_interval_s"):
        (alo, ahi), (blo, bhi) = a["measured_interval_s"], b["measured_interval_s"]
        iv = Interval(sa / sb, (a["global_batch"] / ahi) / (b["global_batch"] / blo),
                      (a["global_batch"] / alo) / (b["global_batch"] / bhi), 1,
                      "the two runs' median-step intervals")
    return CL.plan_pick(CL.FASTEST, pk.row.label(), pk.runner_up.label(), sa / sb, iv, (1, 1),
                        (source(a["record"]), source(b["record"])),
                        "measured samples/s (median step)", "one run each, here")
