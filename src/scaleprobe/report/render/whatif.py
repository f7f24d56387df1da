"""The report's "What if" section: for the one-rank runs of a folder, the step model's
predicted speedup on 2, 4 and 8 devices (one per host) on the links these results measured
and on 1, 10 and 100 Gbit/s, the slowest link for 90% efficiency on 8, and, where the folder
also holds measured multi-rank runs, how the predictions held against them (``predict
--check``). Typed records only; no torch (predict/stepmodel.py is numpy).
"""

from __future__ import annotations

from scaleprobe.core import claim as CL
from scaleprobe.core import fmt
from scaleprobe.core.record import Record
from scaleprobe.core.result_model import RunResult
from scaleprobe.core.traits import known
from scaleprobe.predict import check as C
from scaleprobe.predict import sample as S
from scaleprobe.predict import stepmodel as M
from scaleprobe.predict import whatif as W
from scaleprobe.report.reading import machine_load as L
from scaleprobe.report.reading import records as R
from scaleprobe.report.render.doc import Section, Sub, Table, Text

DEVICES = (2, 4, 8)
NOMINAL = ("1gbit", "10gbit", "100gbit")
TARGET = 0.9
MAX_SETTINGS = 4  # one-rank settings predicted (the latest); `predict --from` for the others
REPLICATES = 20  # bootstrap resamples per prediction (the terminal's predict uses 100)


def _measured_links(runs: list[RunResult], one: RunResult) -> list[str]:
    """The links the folder's multi-rank runs of the same setting crossed, when known and
    resolvable (several hosts: the spec --link named)."""
    want = C.setting(one)
    out: dict[str, None] = {}
    for r in runs:
        if (r.world_size or 1) > 1 and C.setting(r) == want and r.comm is not None:
            name = (r.comm.measured_link or {}).get("name")
            if name and name != "loopback":
                out[str(name)] = None
    return list(out)


def _bucketed(r: RunResult) -> bool:
    t = known(r.cfg("dist.strategy"))
    return bool(t and t.bucketed)


def _ones(runs: list[RunResult]) -> list[RunResult]:
    """The latest measured one-rank run of each setting (a DDP run where there is one: its
    buckets), newest first."""
    latest: dict[tuple[object, ...], RunResult] = {}
    for r in sorted(runs, key=lambda x: (_bucketed(x),
                                         str(x.started_at or ""))):
        if r.status == "ok" and (r.world_size or 1) == 1 and r.step_median_s:
            latest[C.setting(r)] = r
    return sorted(latest.values(), key=lambda x: str(x.started_at or ""), reverse=True)


def _speedup_cell(p: M.Prediction) -> str:
    sp = p.speedup
    if sp.value is None:
        return fmt.NA
    iv = f" [{sp.lo:.2f}, {sp.hi:.2f}]" if sp.lo is not None and sp.hi is not None else ""
    return f"{sp.value:.2f}{iv} ({p.efficiency.value:.0%})"


def _needed_cell(row: W.Row, loaded: bool = False) -> str:
    if row.needed_gbit_s is None:
        return "unreachable" + (", under load" if loaded else "")
    g = row.needed_gbit_s
    return f">= {g:.2f} Gbit/s" if g >= 0.1 else f">= {g * 1e3:.0f} Mbit/s"


def ceiling_caveat(one: RunResult) -> str:
    """The load caveat of every prediction from ``one`` (core/claim.py's words), with what
    load does to them: the ceilings ("even on a link that costs nothing") are drawn from the
    run's step-to-step spread, which load on the machine widens. Empty when the run was not
    measured under load."""
    caveat = CL.load_caveat((L.source(one),))
    if not caveat:
        return ""
    return (f"{caveat}. Every prediction here, and each ceiling 'even on a link that costs "
            "nothing', is drawn from that run's step-to-step spread, which the load widened: "
            "measure the one-rank run again on a quiet machine before acting on them")


def _setting_blocks(s: Section, one: RunResult, runs: list[RunResult]) -> None:
    sample = S.from_run(one)
    caveat = ceiling_caveat(one)
    links = _measured_links(runs, one) + list(NOMINAL)
    rows, notes = [], {}
    like = W.as_run(one)
    for spec in links:
        got: list[W.Row] = []
        for n in DEVICES:
            sc = W.scenario("ddp", 1, n, spec, **like)
            pred = M.predict(W.fresh(sample), sc, replicates=REPLICATES)
            need = W.needed(W.fresh(sample), sc, TARGET) if n == DEVICES[-1] else (None, None)
            got.append(W.Row(spec, 1, n, pred, *need))
            notes.update(dict.fromkeys(pred.notes))
        link = got[0].prediction
        where = next((w for w in ("measured", "given") if link.link_source.startswith(w)),
                     "nominal")
        rows.append([_short(spec), f"{link.bandwidth_gbit_s:.3g} Gbit/s, "
                     f"{link.alpha_s * 1e6:.0f} us ({where})",
                     *[_speedup_cell(r.prediction) for r in got],
                     _needed_cell(got[-1], bool(caveat))])
    s.add(Sub(f"{one.label}: DDP on N devices, one per host"))
    s.add(Table(["Link", "Bandwidth, latency per hop", *[f"Speedup on {n}" for n in DEVICES],
                 f"Link for {TARGET:.0%} on {DEVICES[-1]}"], rows,
                right=[False, False] + [True] * (len(DEVICES) + 1)))
    s.add(Text(f"From {one.label} ({sample.threads or '?'} thread(s) per rank, "
               f"{sample.grad_bytes / 1e6:.1f} MB of gradients, step "
               f"{fmt.duration(sample.step_median_s)}; compute drawn from {sample.rows_source}). "
               "Speedup = samples per second over this run's, with its 95% interval (the "
               "run's own spread, the link fit's and the model's own error as validated), "
               "efficiency in brackets. "
               + " ".join(f"Note: {n}." for n in fmt.same_but_figures(
                   list(notes), "one per link and device count")), note=True))
    if caveat:
        s.add(Text(caveat + "."))


def _short(spec: str) -> str:
    if spec.startswith("measured:"):
        return "measured:" + "/".join(spec.split("/")[-2:])
    return spec


def _held_blocks(s: Section, runs: list[RunResult]) -> None:
    """Each measured multi-rank run beside its prediction; a run measured under load says
    "under load" beside its measured step, whatever its error, and a note names them."""
    points = [p for p in C.check(runs) if p.prediction is not None]
    if not points:
        return
    rows = []
    for p in points:
        pr = p.prediction
        assert pr is not None
        ri = p.ratio_interval
        measured = fmt.duration(p.measured_s)
        rows.append([p.run.label, str(p.run.cfg("dist.strategy")), str(p.run.world_size),
                     _short(str((p.run.comm.measured_link or {}).get("name") if p.run.comm
                                else "?")),
                     f"{measured}, under load" if L.run_load(p.run)[0] else measured,
                     fmt.duration(pr.step_s.value),
                     (f"{p.ratio:.2f} [{ri[0]:.2f}, {ri[1]:.2f}]" if p.ratio and ri
                      else fmt.num(p.ratio, ".2f"))])
    summ = C.summary(points)
    s.add(Sub("How the predictions held"))
    s.add(Table(["Run", "Strategy", "World", "Link", "Measured step", "Predicted step",
                 "Predicted / measured"], rows, right=[False, False, True, False, True, True,
                                                      True]))
    s.add(Text(f"Each measured multi-rank run beside its prediction from the matching one-rank "
               f"run (the nearest before and after it, same setting and threads per rank): "
               f"{summ.points} points, |error| mean {fmt.pct(summ.mean_abs_error, 1)}, median "
               f"{summ.median_abs_error:.1%}, p90 {fmt.pct(summ.p90_abs_error, 1)}, worst "
               f"{summ.worst_abs_error:.1%}; {summ.within_median_goal} within +-10%, "
               f"{summ.within_every_goal} within +-20% (`scaleprobe predict --check`).",
               note=True))
    loaded = L.under_load_line([p.run for p in points],
                               note=" A prediction close to such a run may match its load, "
                                    "not the machine.")
    if loaded:
        s.add(Text(loaded))


def whatif_section(records: list[Record]) -> Section | None:
    runs = R.runs(records)
    ones = _ones(runs)
    if not ones:
        return None
    s = Section("What if", anchor="whatif")
    for one in ones[:MAX_SETTINGS]:
        _setting_blocks(s, one, runs)
    if len(ones) > MAX_SETTINGS:
        s.add(Text(f"{len(ones) - MAX_SETTINGS} more one-rank settings not predicted here: "
                   "`scaleprobe predict --from RUN --nproc 2,4,8 --link ...` for any of them.",
                   note=True))
    _held_blocks(s, runs)
    return s
