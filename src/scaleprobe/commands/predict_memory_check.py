"""``scaleprobe predict --check RUNS``, memory's side: each measured run's peak per rank set
beside its prediction from a matching 1-rank run (``predict/memmodel.py``, as ``predict
--from RUN --memory`` makes it), and the table of them. ``commands/predict_memory.py`` holds
the prediction's own command; docs/MEMORY.md the formulas and the check's figures.
"""

from __future__ import annotations

from typing import Any

from scaleprobe.commands.predict_memory import inputs_of, sharded_caveat, span_text
from scaleprobe.core.errors import ConfigError
from scaleprobe.core.result_model import RunResult
from scaleprobe.predict import check as C
from scaleprobe.predict import memmodel as MM


def memory_bases(run: RunResult, pool: list[RunResult]) -> list[RunResult]:
    """The 1-rank runs of ``pool`` a run's memory is predicted from: same model, data,
    optimizer, precision and batch per device (threads and CPU do not move tensor bytes),
    with memory facts at two batch sizes."""
    want = (*C.setting_values(run, C.MEMORY_SETTING_KEYS), run.batch.per_device)
    return [r for r in pool if (r.world_size or 1) == 1 and r.status == "ok"
            and r.metrics.memory_facts is not None
            and len(r.metrics.memory_facts.fwd_bwd_peak_bytes or []) >= 2
            and (*C.setting_values(r, C.MEMORY_SETTING_KEYS), r.batch.per_device) == want]


def check_memory(pt: C.Point, pool: list[RunResult]) -> dict[str, Any]:
    """A measured run's peak per rank beside the prediction from a matching 1-rank run (its
    latest), for ``predict --check``: predicted_peak_bytes, measured_peak_bytes,
    memory_ratio (or a memory_reason)."""
    run = pt.run
    bases = memory_bases(run, pool)
    if run.metrics.memory_facts is not None and not bases:
        return {**EMPTY, "memory_reason": "no 1-rank run of the same model, data, optimizer, "
                                          "precision and batch recorded memory facts"}
    # the latest; one that shards its state only where there is no other (sharded_caveat)
    plain = [r for r in bases if sharded_caveat(r) is None]
    return memory_point(run, max(plain or bases, key=lambda r: str(r.started_at or ""))
                        if bases else None)


EMPTY: dict[str, Any] = {"predicted_peak_bytes": None, "measured_peak_bytes": None,
                         "memory_ratio": None, "memory_reason": None}


def memory_point(run: RunResult, base: RunResult | None) -> dict[str, Any]:
    """``run``'s measured peak per rank beside its prediction from ``base`` (a run with
    memory facts at two batch sizes; any batch): the check's fields."""
    facts = run.metrics.memory_facts
    out = dict(EMPTY)
    strategy = str(run.cfg("dist.strategy") or "single")
    if facts is None or base is None or strategy not in MM.STRATEGIES:
        out["memory_reason"] = ("the run recorded no memory facts" if facts is None else
                                "no run to predict it from" if base is None
                                else f"no memory model for {strategy}")
        return out
    sb, pm = run.metrics.state_bytes, run.metrics.peak_mem_bytes
    measured, how = MM.measured_peak(facts, sb.params_bytes if sb else None,
                                     sb.grads_bytes if sb else None,
                                     sb.optimizer_bytes if sb else None, pm.device_allocated)
    try:
        inputs = inputs_of(base)
    except ConfigError as e:
        out["memory_reason"] = str(e)
        return out
    p = MM.predict(inputs, strategy, int(run.world_size or 1), int(run.batch.per_device or 1))
    # the CPU figure cannot see DDP's buckets (not reachable as tensors): like for like
    unseen = p.parts["ddp_buckets"] if facts.device != "cuda" else 0
    predicted = p.peak_bytes - unseen
    out.update(memory_base=base.run_id, memory_caveat=sharded_caveat(base),
               predicted_peak_bytes=predicted,
               predicted_peak_low_bytes=None if p.low_bytes is None else p.low_bytes - unseen,
               predicted_peak_high_bytes=(None if p.high_bytes is None
                                          else p.high_bytes - unseen),
               measured_peak_bytes=measured, memory_ratio=MM.ratio(predicted, measured),
               memory_measured_as=how, memory_parts=p.parts)
    if measured is None:
        out["memory_reason"] = how
    return out


def print_check_memory(points: list[C.Point], mem: dict[int, dict[str, Any]],
                       always: bool = False) -> None:
    """The memory table of ``predict --check``: measured peak per rank beside its prediction
    and the prediction's interval (without ``always``, only where some run has both); the
    reasons a point has no prediction below the table, so that it fits 80 columns."""
    rows = [(p, mem[id(p)]) for p in points]
    if not always and not any(m["memory_ratio"] is not None for _, m in rows):
        return
    # heavy: rich: printing only; kept out of the CLI's start-up
    from rich import box
    from rich.console import Console
    from rich.table import Table

    from scaleprobe.commands.terminal import bytes_, esc  # heavy: rich

    t = Table(title="measured peak memory per rank (batch per rank) beside its prediction "
                    "from the matching 1-rank run", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for c in ("model", "strategy", "N", "batch", "measured", "predicted", "interval",
              "pred/meas"):
        named = c in ("model", "strategy")  # a narrow terminal wraps a name, never cuts it
        t.add_column(c, justify="left" if named else "right", overflow="fold",
                     no_wrap=not named)
    errs, inside = [], 0
    why: dict[str, list[C.Point]] = {}
    for p, m in rows:
        r, meas = m["memory_ratio"], m["measured_peak_bytes"]
        lo, hi = m.get("predicted_peak_low_bytes"), m.get("predicted_peak_high_bytes")
        if r is not None:
            errs.append(abs(r - 1))
            inside += lo is not None and hi is not None and lo <= meas <= hi
        else:
            why.setdefault(m["memory_reason"] or "n/a", []).append(p)
        t.add_row(esc(p.run.cfg("model.name")), esc(p.run.cfg("dist.strategy")),
                  str(p.run.world_size), str(p.run.batch.per_device), bytes_(meas),
                  bytes_(m["predicted_peak_bytes"]), span_text(lo, hi),
                  f"{r:.3f}" if r is not None else "n/a")
    con = Console()
    con.print(t)
    if errs:
        errs.sort()
        con.print(f"{len(errs)} points: median |predicted / measured - 1| "
                  f"{errs[len(errs) // 2]:.1%}, worst {errs[-1]:.1%}; measured inside the "
                  f"predicted interval: {inside} of {len(errs)}", markup=False,
                  highlight=False)
    for reason, pts in why.items():
        names = ", ".join(f"{p.run.cfg('dist.strategy')} {p.run.world_size} x "
                          f"{p.run.batch.per_device}" for p in pts)
        con.print(f"  n/a ({names}): {reason}", markup=False, highlight=False)
    said = {m["memory_caveat"] for _, m in rows if m.get("memory_caveat")}
    for caveat in sorted(said):
        con.print(f"  caveat: {caveat}", markup=False, highlight=False)
