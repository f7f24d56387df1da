"""How ``scaleprobe plan`` prints its rows (tables that fit 80 columns) and writes them as
JSON. The figures are ``predict/plan.py``'s; the picks' words ``core/claim.py``'s."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scaleprobe.commands.predict_memory import (
    cpu_basis_caveat,
    largest_text,
    sharded_caveat,
    share_under_largest,
)
from scaleprobe.commands.predict_steps import time_unit
from scaleprobe.core import claim as CL
from scaleprobe.core import claim_kinds as CK
from scaleprobe.core import fmt
from scaleprobe.predict import plan as P
from scaleprobe.predict import stepmodel as M
from scaleprobe.predict import whatif as W

MAX_UNFIT_SHOWN = 4  # configurations that do not fit, named in the terminal (--json: all)


def _fig(f: M.Figure | None) -> dict[str, float | None] | None:
    return None if f is None else f.to_dict()


def row_json(r: P.Row) -> dict[str, Any]:
    """One row; ``fits`` as ``predict --memory`` gives it: true / false where the claim
    decided it, null where inconclusive or without an interval (``fit``: the claim)."""
    p, fit = r.prediction, r.fit
    return {"strategy": r.strategy, "nproc": r.nproc, "nnodes": r.nnodes, "devices": r.devices,
            "batch_per_device": r.batch, "global_batch": r.global_batch,
            "fits": r.fits if fit.decided else None, "fit_verdict": fit.short_verdict,
            "fit": fit.to_dict(), "tight": r.tight, "predicted_peak_bytes": r.peak_bytes,
            "predicted_peak_low_bytes": r.memory.low_bytes,
            "predicted_peak_high_bytes": r.memory.high_bytes,
            "memory_parts": r.memory.parts, "peak_phase": r.memory.phase,
            "device_memory_bytes": r.device_bytes, "headroom_bytes": r.headroom_bytes,
            "headroom_at_top_bytes": r.headroom_at_top_bytes,
            "step_s": _fig(p.step_s) if p else None,
            "step_mean_s": p.step_mean_s if p else None,
            "samples_per_s": _fig(r.samples_s) if p else None,
            "efficiency": efficiency_json(r) if p else None,
            "phases_s": p.phases if p else None,
            "device_hours": _fig(r.cost_h) if p else None,
            "device_hours_basis": ("to the target" if r.time_to_target_s is not None
                                   else f"per {P.PER_SAMPLES:,.0f} samples"),
            "steps_to_target": _fig(r.steps_to_target),
            "time_to_target_s": _fig(r.time_to_target_s), "scaled_from_batch": r.scaled_from,
            "one_rank_runs": r.runs, "reason": r.reason,
            "oversubscribed": bool(p and p.oversubscribed),
            "data_samples_per_device": r.data_samples, "over_data": r.over_data,
            "notes": p.notes if p else []}


def efficiency_claim(r: P.Row) -> CL.Claim:
    e = r.efficiency
    return CK.plan_efficiency(e.value, e.lo, e.hi, r.runs, r.efficiency_of or "")


def efficiency_json(r: P.Row) -> dict[str, Any]:
    """The row's efficiency (``predict/plan.set_efficiency``): the figure, the row it is the
    ratio to, and the claim's verdict (none on the one-device row: 1 by definition)."""
    out: dict[str, Any] = {**r.efficiency.to_dict(), "of": r.efficiency_of}
    if r.efficiency.value is not None and r.efficiency_of != "itself":
        c = efficiency_claim(r)
        out |= {"verdict": c.verdict, "rule": c.rule}
    return out


def _eff_cell(r: P.Row) -> str:
    if r.efficiency.value is None:
        return fmt.NA
    if r.efficiency_of == "itself":
        return f"{fmt.pct(1.0)} (basis)"
    return efficiency_claim(r).cell(markdown=False)


def _pick_json(pk: P.Pick | None) -> dict[str, Any] | None:
    if pk is None:
        return None
    return {"kind": pk.kind, "row": _key(pk.row),
            "runner_up": _key(pk.runner_up) if pk.runner_up else None,
            "claim": pk.claim.to_dict() if pk.claim else None}


def _key(r: P.Row) -> dict[str, Any]:
    return {"strategy": r.strategy, "devices": r.devices, "batch_per_device": r.batch}


def to_json(got: dict[str, Any], verified: list[dict[str, Any]] | None) -> dict[str, Any]:
    like, q = got["like"], got["question"]
    tg = q.target
    return {"from": {"run": like.label, "run_id": like.run_id,
                     "memory_caveat": sharded_caveat(like),
                     "device_caveat": cpu_basis_caveat(like, got["device_named"], steps=True),
                     "bases": {s: {str(b): list(v.labels) for b, v in per.items()}
                               for s, per in got["bases"].items()}},
            "link": W.link_line(q.link, q.nnodes),
            "target": None if tg is None else {"target": tg.text, "steps": tg.steps,
                                               "batch_global": tg.batch_global,
                                               "b_crit": tg.b_crit, "b_crit_lo": tg.b_crit_lo,
                                               "b_crit_hi": tg.b_crit_hi, "source": tg.source,
                                               "steps_lo": tg.steps_lo},
            "rows": [row_json(r) for r in got["rows"]],
            "picks": {pk.kind: _pick_json(pk) for pk in got["picks"] if pk is not None},
            "largest_batch": got["largest"], "verified": verified}


def _num(v: float | None) -> str:
    """Three significant digits, thousands as k and millions as M: ``1.44k``, ``147``."""
    if v is None:
        return fmt.NA
    for suffix, k in (("M", 1e6), ("k", 1e3)):
        if abs(v) >= k:
            return f"{v / k:.3g}{suffix}"
    return f"{v:.3g}"


def _span(f: M.Figure | None, show: Any = _num) -> str:
    if f is None or f.value is None:
        return fmt.NA
    if f.lo is None or f.hi is None:
        return show(f.value)
    return f"{show(f.value)} [{show(f.lo)}, {show(f.hi)}]"


def dur(v: float | None) -> str:
    """Seconds in the unit that reads: ``42 s``, ``3.5 min``, ``2.1 h``, ``4.0 d``."""
    if v is None:
        return fmt.NA
    unit, k = _dur_unit(v)
    return f"{v / k:.3g} {unit}"


def _dur_unit(v: float) -> tuple[str, float]:
    for unit, k in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if v >= 2 * k:
            return unit, k
    return "s", 1.0


def _cost(rows: list[P.Row]) -> tuple[str, float]:
    """Device-hours, or device-seconds where every row's is under a tenth of an hour."""
    top = max((r.cost_h.hi or r.cost_h.value or 0.0) for r in rows)
    return ("device-h", 1.0) if top >= 0.1 else ("device-s", 3600.0)


def _table(title: str, cols: list[str]) -> Any:
    # heavy: rich: printing only; kept out of the CLI's start-up
    from rich import box
    from rich.table import Table

    t = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for c in cols:
        t.add_column(c, justify="left" if c == "strategy" else "right", overflow="fold")
    return t


def _head(r: P.Row) -> list[str]:
    """Strategy, devices (``!``: left out of the picks, its ranks would share the run's
    cores) and batch (``*``: not measured; ``#``: more than the data holds per device, left
    out of the picks)."""
    mark = ("*" if r.scaled_from is not None else "") + ("#" if r.over_data else "")
    crowded = " !" if r.prediction is not None and r.prediction.oversubscribed else ""
    return [r.strategy, f"{r.devices}{crowded}", f"{r.batch}{mark}"]


def print_plan(got: dict[str, Any], caveat: str) -> None:
    # heavy: rich: printing only; kept out of the CLI's start-up
    from rich.console import Console

    from scaleprobe.commands.terminal import bytes_, esc  # heavy: rich

    con, q, rows = Console(), got["question"], got["rows"]
    like, inputs = got["like"], got["inputs"]
    say = lambda text: con.print(text, markup=False, highlight=False)  # noqa: E731
    measured = sorted({b for per in got["bases"].values() for b in per})
    say(f"plan from {like.label}: {bytes_(inputs.params_bytes)} of parameters; steps from "
        f"one-rank runs at batch {', '.join(map(str, measured))} per device; link: "
        f"{W.link_line(q.link, q.nnodes)}")
    if memory_caveat := sharded_caveat(like):
        say(f"memory caveat: {memory_caveat}")
    if device_caveat := cpu_basis_caveat(like, got["device_named"], steps=True):
        say(f"caveat: {device_caveat}")
    fits = [r for r in rows if r.fits and r.prediction is not None]
    if fits:
        unit = time_unit(*(r.prediction.step_s.hi for r in fits if r.prediction))
        scale = unit[1]
        t = _table(f"what fits: predicted step ({unit[0]}, the median), samples/s (over the "
                   "mean step), efficiency against one device, 95% intervals",
                   ["strategy", "dev", "batch", f"step {unit[0]}", "samples/s", "eff."])
        for r in fits:
            p = r.prediction
            t.add_row(*map(esc, _head(r)), _span(p.step_s, lambda v: _num(v * scale)),
                      _span(r.samples_s), _eff_cell(r))
        con.print(t)
        basis = "to the target" if q.target is not None else \
            f"per {P.PER_SAMPLES / 1e6:g}M samples"
        cost_unit, k = _cost(fits)
        t = _table("peak memory per device (predicted) and the cost in device time",
                   ["strategy", "dev", "batch", "peak", "headroom", f"{cost_unit} {basis}"])
        for r in fits:
            room = f"{r.headroom_bytes / r.device_bytes:.0%}" + (" tight" if r.tight else "")
            c = r.cost_h
            t.add_row(*map(esc, _head(r)), bytes_(r.peak_bytes), room, _span(M.Figure(
                *(None if v is None else v * k for v in (c.value, c.lo, c.hi)))))
        con.print(t)
        if q.target is not None:
            _print_target(con, fits, q.target)
    _print_rest(say, got, rows, bytes_, caveat)


def _print_target(con: Any, fits: list[P.Row], tg: P.Target) -> None:
    top = max((r.time_to_target_s.value or 0.0) for r in fits if r.time_to_target_s)
    unit, k = _dur_unit(top)
    t = _table(f"to {tg.text}: steps (S_min (1 + B_crit/B)) and time, 95% intervals",
               ["strategy", "dev", "batch", "global", "steps", f"time ({unit})"])
    for r in fits:
        tt = r.time_to_target_s
        t.add_row(*_head(r), f"{r.global_batch:,}", _span(r.steps_to_target),
                  _span(None if tt is None else M.Figure(
                      *(None if v is None else v / k for v in (tt.value, tt.lo, tt.hi)))))
    con.print(t)


def _print_rest(say: Any, got: dict[str, Any], rows: list[P.Row], bytes_: Any,
                caveat: str) -> None:
    q = got["question"]
    unfit = sorted((r for r in rows if r.does_not_fit), key=lambda r: r.peak_bytes)
    if unfit:
        say(f"{CL.DOES_NOT_FIT}, the peak's whole interval over the device (strategy, devices x "
            "batch per device: peak per device [its interval] of the device): "
            + _listed(unfit, lambda r: f"{_peak(r, bytes_)} of {bytes_(r.device_bytes)}"))
    torn = sorted((r for r in rows if r.fit.rule == CL.RULE_INCLUDES_REF),
                  key=lambda r: r.peak_bytes)
    if torn:
        say(f"{CL.INCONCLUSIVE} whether it fits, the device's memory inside the peak's interval, "
            "so left out of the picks (strategy, devices x batch per device: peak per device "
            "[its interval] of the device, what the interval's top needs beyond it, samples/s "
            "predicted): " + _listed(torn, lambda r: _torn(r, bytes_)))
    blind = [r for r in rows if r.fit.rule == CL.RULE_NO_INTERVAL]
    if blind:
        say(f"not judged whether it fits ({CL.NO_INTERVAL}: fewer than three batch sizes "
            "probed), so left out of the picks (strategy, devices x batch per device: peak "
            "per device of the device, samples/s predicted): "
            + _listed(blind, lambda r: _torn(r, bytes_)))
    crowded = [r for r in rows if r.fits and r.prediction and r.prediction.oversubscribed]
    if crowded:
        say("! left out of the picks, their ranks on one host needing more cores than it has at "
            "the run's threads per rank (strategy, devices x batch per device): "
            + ", ".join(f"{r.strategy} {r.devices} x {r.batch}" for r in crowded))
    over = [r for r in rows if r.fits and r.over_data]
    if over:
        say("# left out of the picks, more samples per device than the runs' data holds for "
            "each, so no full step in an epoch on that data (strategy, devices x batch per "
            "device: the data's samples per device): "
            + ", ".join(f"{r.strategy} {r.devices} x {r.batch} ({r.data_samples:,})"
                        for r in over))
    say(_largest_line(got["largest"]))
    if any(r.scaled_from is not None for r in rows if r.fits):
        say("* batch not measured: its data, forward and backward interpolated between the "
            "measured batches around it, or scaled in proportion from the nearest outside them")
    for pk in got["picks"]:
        if pk is None:
            continue
        if pk.claim is None:
            say(f"{pk.kind} that fits: {pk.row.label()}: the only configuration that fits"
                + (" and is predicted from compute its ranks can have" if crowded else ""))
        else:
            say(pk.claim.text())
    if not any(pk is not None for pk in got["picks"]):
        say(f"no configuration {CL.FITS}"
            + (f" (those {CL.INCONCLUSIVE} or not judged above may)" if torn or blind else "")
            + ": fewer samples per device, fsdp, or more memory"
            + ("; a one-rank run at batch 4 or more probes the three batch sizes that give "
               "the peak its interval" if blind else ""))
    notes = fmt.same_but_figures([n for r in rows if r.prediction for n in r.prediction.notes
                                  if not n.startswith("batch ")], "each row's in --json")
    if q.target is not None:
        say(f"  steps to the target from {q.target.source}")
    for n in notes:
        say(f"  note: {n}")
    if caveat:
        say(f"  {caveat}.")


def _listed(rows: list[P.Row], what: Callable[[P.Row], str]) -> str:
    """``ddp 2 x 160 (...), ...``: the first ``MAX_UNFIT_SHOWN`` rows, then how many more."""
    shown = ", ".join(f"{r.strategy} {r.devices} x {r.batch} ({what(r)})"
                      for r in rows[:MAX_UNFIT_SHOWN])
    more = (f" and {len(rows) - MAX_UNFIT_SHOWN} more (--json: every row)"
            if len(rows) > MAX_UNFIT_SHOWN else "")
    return shown + more


def _peak(r: P.Row, bytes_: Callable[[int | None], str]) -> str:
    """``1.76 GiB [1.73 GiB, 2.10 GiB]``: the peak and its interval."""
    m = r.memory
    if m.low_bytes is None or m.high_bytes is None:
        return bytes_(r.peak_bytes)
    return f"{bytes_(r.peak_bytes)} [{bytes_(m.low_bytes)}, {bytes_(m.high_bytes)}]"


def _torn(r: P.Row, bytes_: Callable[[int | None], str]) -> str:
    """An inconclusive row: ``1.76 GiB [1.73 GiB, 2.10 GiB] of 2.00 GiB, 102 MiB more at
    its top, 250 [240, 260]/s``."""
    top = r.headroom_at_top_bytes
    need = f", {bytes_(-top)} more at its top" if top is not None and top <= 0 else ""
    rate = f", {_span(r.samples_s)}/s" if r.samples_s.value else ""
    return f"{_peak(r, bytes_)} of {bytes_(r.device_bytes)}{need}{rate}"


def _largest_line(largest: list[dict[str, Any]]) -> str:
    """``largest batch per device that fits, by devices: ddp 1: 863, 2: 151 (152 to 192:
    inconclusive); fsdp 2: ...``: ``predict --memory``'s words (``largest_text``)."""
    by: dict[str, list[str]] = {}
    judged = any(x["interval"] for x in largest)
    for x in largest:
        pt = x["largest_batch_per_device_point"]
        said = (largest_text(x, "device", short=True) if judged
                else fmt.NA if pt is None else f"{pt:,}")
        share = share_under_largest(x, "device")
        if share is not None:
            said += f" (the data: {share:,})"
        by.setdefault(x["strategy"], []).append(f"{x['devices']}: {said}")
    head = (f"largest batch per device that {CL.FITS}, by devices: " if judged else
            "largest batch per device under it by the point estimate, not judged "
            f"({CL.NO_INTERVAL}: fewer than three batch sizes probed), by devices: ")
    return head + "; ".join(f"{s} {', '.join(v)}" for s, v in by.items())


def print_verified(verified: list[dict[str, Any]]) -> None:
    """Each verified configuration's measured step beside the plan's prediction and the one
    from a one-rank run made just before it; the measured pick over the runner-up."""
    # heavy: rich: printing only; kept out of the CLI's start-up
    from rich.console import Console

    from scaleprobe.commands.terminal import bytes_, esc  # heavy: rich

    con = Console()
    say = lambda text: con.print(text, markup=False, highlight=False)  # noqa: E731
    t = _table("verified here (ms, 95% intervals): the plan's step, the step predicted from "
               "one-rank runs just before (as many at once as the row has ranks here), the "
               "measured step", ["configuration", "plan", "from 1-rank", "measured"])
    for v in verified:
        t.add_row(esc(f"{v['strategy']} {v['devices']} x {v['batch_per_device']}"),
                  _ms(v.get("predicted_plan")), _ms(v.get("predicted_here")),
                  _ms({"value": v.get("measured_s"), "interval": v.get("measured_interval_s")}))
    con.print(t)
    for v in verified:
        if v.get("ratio") is None:
            say(f"{v['label']}: {v.get('reason') or fmt.NA}")
            continue
        # the claim's words (plan_verify.goal_claim): its load caveat in them
        say(f"{v['label']}: {v['goal']['text']}; the plan's prediction / measured "
            f"{v['ratio_plan']:.2f}" + _share(v.get("cpu_share_pct")))
    for v in verified:
        if v.get("memory"):
            say(f"  {v['label']}: {_memory_text(v['memory'], bytes_)}")
    for v in verified:
        mine, plans = v.get("one_rank_strategy"), v.get("plan_basis_strategy")
        if mine and plans and mine != plans:
            say(f"  {v['label']}: the plan's step is drawn from one-rank runs of {plans}; the "
                f"one-rank runs just before ran {mine}, the row's strategy, launched")
    moved = next((v for v in verified if v.get("devices", 1) > 1 and v.get("plan_link")
                  and (v.get("predicted_plan") or {}).get("link") not in (None, v["plan_link"])),
                 None)
    if moved:
        here = moved["predicted_plan"]["link"]
        say(f"  the plan's rows are predicted for {moved['plan_link']}; the ranks here cross "
            f"{here}: both predictions above are for {here} (the plan's from its own one-rank "
            "runs), so this checks the compute and this host's link, not the link planned for")
    pair = next((v["pair"] for v in verified if v.get("pair")), None)
    if pair:
        say(pair["text"])


def _memory_text(m: dict[str, Any], bytes_: Callable[[int | None], str]) -> str:
    """``peak memory per rank: measured 85.1 MiB, predicted 85.2 MiB [85.2 MiB, 85.2 MiB]:
    predicted / measured 1.00, inside the interval`` (or why there is no figure)."""
    r, meas = m.get("memory_ratio"), m.get("measured_peak_bytes")
    if r is None or meas is None:
        return f"peak memory per rank: {m.get('memory_reason') or fmt.NA}"
    lo, hi = m.get("predicted_peak_low_bytes"), m.get("predicted_peak_high_bytes")
    inside = ("" if lo is None or hi is None else
              ", inside the interval" if lo <= meas <= hi else ", outside the interval")
    span = f" [{bytes_(lo)}, {bytes_(hi)}]" if lo is not None and hi is not None else ""
    return (f"peak memory per rank: measured {bytes_(meas)}, predicted "
            f"{bytes_(m['predicted_peak_bytes'])}{span}: predicted / measured {r:.2f}{inside}")


def _share(c: dict[str, float] | None) -> str:
    """``; CPU: the row's processes 24% of the machine, its one-rank runs 17% together``."""
    if not c:
        return ""
    return (f"; CPU: the row's processes {c['row']:.0f}% of the machine, its one-rank runs "
            f"{c['one_rank_runs']:.0f}% together")


def _ms(f: dict[str, Any] | None) -> str:
    if not f or f.get("value") is None:
        return fmt.NA
    iv = f.get("interval") or (None, None)
    return _span(M.Figure(f["value"] * 1e3, *(None if x is None else x * 1e3 for x in iv)))
