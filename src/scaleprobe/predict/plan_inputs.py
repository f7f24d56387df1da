"""A plan's inputs read from the records (``scaleprobe plan --from RUNS``): the one-rank runs
each strategy's rows draw their step from, per batch per device (``bases_for``), and the
steps to a target with the critical batch of the run that measured both (``target_from``).
The plan itself: ``plan.py``. No torch.
"""

from __future__ import annotations

import math

from scaleprobe.core.errors import ConfigError
from scaleprobe.core.result_model import RunResult
from scaleprobe.features import target as TG
from scaleprobe.predict import check as C
from scaleprobe.predict import plan as P


def _setting(r: RunResult) -> tuple[object, ...]:
    """What rows of one plan share: ``check.setting`` less the batch per device."""
    return (*C.setting_values(r), r.env.get("threads"), r.env.get("cpu_model"))


def two_halves(r: RunResult) -> bool:
    """The run's steps were two half-batches (``--gns`` on one process): not a plain step."""
    return r.gns is not None and r.gns.method == "micro_batches"


def bases_for(runs: list[RunResult], like: RunResult, strategy: str) -> dict[int, P.Basis]:
    """The one-rank runs of ``like``'s setting a ``strategy`` row draws its step from, per
    batch per device (``check.PREFER``: DDP's own runs for DDP, then the others), each
    batch's runs pooled; runs whose step was two half-batches are left out."""
    ones = [r for r in runs if (r.world_size or 1) == 1 and r.status == "ok"
            and r.step_median_s is not None and r.batch.per_device
            and _setting(r) == _setting(like) and not two_halves(r)]
    for want in C.PREFER.get(strategy, ("single", "ddp", "fsdp")):
        got = [r for r in ones if str(r.cfg("dist.strategy") or "single") == want]
        if got:
            by: dict[int, list[RunResult]] = {}
            for r in got:
                by.setdefault(int(r.batch.per_device or 0), []).append(r)
            return {b: P.Basis(b, C.pooled(rs), len(rs), tuple(r.label for r in rs),
                             tuple(r.run_id for r in rs))
                    for b, rs in sorted(by.items())}
    return {}


def _steps_to(r: RunResult, tg: TG.Target) -> tuple[int, int | None] | None:
    """The step of the run's first evaluation that reached ``tg``, and of the evaluation
    before it (0 when it was the first; None: not recorded): the target was crossed between
    the two."""
    t = r.target
    if t is None or t.metric != tg.metric:
        return None
    steps = [int(c["step"]) if c.get("step") is not None else None for c in t.curve]
    hit = next((i for i, c in enumerate(t.curve) if tg.reached(c.get("value"))), None)
    at = steps[hit] if hit is not None else None
    if hit is not None and at is not None:
        return at, (steps[hit - 1] or 0) if hit > 0 else 0
    if t.target == tg.value and t.reached and t.steps_to_target is not None:  # no curve kept
        return t.steps_to_target, t.steps_to_target_lo
    return None



def _b_crit(r: RunResult) -> tuple[float, float, float] | None:
    """B_noise at the run's end (its series' last block) with an interval: the whole
    window's, relative; the window's own figure when the series has no last block."""
    g = r.gns
    if g is None or not g.b_simple or not g.b_simple_lo:
        return None
    end = g.series[-1].b_simple if g.series and g.series[-1].b_simple else g.b_simple
    hi = g.b_simple_hi if g.b_simple_hi and math.isfinite(g.b_simple_hi) else math.inf
    return end, end * g.b_simple_lo / g.b_simple, end * hi / g.b_simple


def target_from(runs: list[RunResult], text: str | None) -> P.Target | None:
    """The steps to ``text`` (``--target METRIC=VALUE``; None: a measured run's own reached
    target) at a run's batch, with its B_noise, from the latest run that measured both; a
    ConfigError says what is missing when a target was asked for."""
    gns = sorted((r for r in runs if r.status in ("ok", "target_not_reached")
                  and _b_crit(r) is not None), key=lambda r: str(r.started_at or ""))
    want = TG.parse_target(text) if text is not None else None
    for r in reversed(gns):
        tg = want or (TG.Target(str(r.target.metric), float(r.target.target))
                      if r.target is not None and r.target.reached and r.target.metric
                      and r.target.target is not None else None)
        got = _steps_to(r, tg) if tg is not None else None
        bc = _b_crit(r)
        if tg is None or got is None or bc is None or not r.batch.global_:
            continue
        steps, lo = got
        where = (f"it was crossed between its evaluations at step {lo:,} and {steps:,}" if lo
                 else f"its first evaluation reached it: it was crossed in steps 0-{steps:,}")
        said = (f"; {where}, so every row's steps and time to it may be up to "
                f"{(steps - lo) / steps:.0%} lower: evaluate more often to narrow it "
                f"({TG.more_often(steps)})" if lo is not None and TG.wide_bracket(steps, lo)
                else "")
        return P.Target(tg.text(), float(steps), int(r.batch.global_), *bc,
                      f"{r.label}: {steps:,} steps to {tg.text()} at global batch "
                      f"{r.batch.global_}, B_noise {bc[0]:,.0f} at its end{said}",
                      None if lo is None else float(lo))
    if want is None:
        return None
    if not gns:
        raise ConfigError("--target needs a run that measured the gradient noise scale and "
                          "evaluated towards the target: scaleprobe run ... --gns --target "
                          f"{text} --eval-every N (none in --from)")
    raise ConfigError(f"no run in --from that measured the gradient noise scale reached "
                      f"{want.text()}: train one to it (--target {text} --gns --eval-every "
                      "N: without it, it is evaluated once an epoch)")
