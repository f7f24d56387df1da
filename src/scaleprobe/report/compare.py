"""Compare two runs, or two sweeps point by point, with a noise-aware verdict.

A side is a result.json, a run folder, a results.jsonl or a folder of results. One run on
each side is compared directly; several runs on each side are matched by ``experiment.point``.

The rule: a difference counts only when it is larger than the runs' own spread.

    delta_rel = median_B / median_A - 1      (step time; samples/s when the global batches
                                              differ: delta_rel = sps_A / sps_B - 1)
    threshold = max(floor, rel_ci_A + rel_ci_B)

``rel_ci`` is the relative 95% confidence half-width of each run's median step time; the
floor (``Thresholds.compare_floor_rel``, 2%) keeps two very steady runs from calling a 1%
difference real. |delta_rel| <= threshold is "no change"; otherwise B is "faster" or
"slower". Without a spread (fewer than 3 steps) the verdict is "inconclusive".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scaleprobe import metrics as M
from scaleprobe.errors import ConfigError
from scaleprobe.report import fmt
from scaleprobe.report import records as R
from scaleprobe.report import repeats as P
from scaleprobe.report.thresholds import DEFAULT, Thresholds
from scaleprobe.results import BREAKDOWN_PHASES


@dataclass
class Delta:
    metric: str
    a: str
    b: str
    change: str  # '+12.0%' for rates/times/memory, '+1.2 pt' for fractions


@dataclass
class Pair:
    label: str  # the point, or 'A vs B'
    a: dict[str, Any]
    b: dict[str, Any]
    verdict: str  # faster | slower | no change | inconclusive | not comparable
    delta_rel: float | None  # relative change of the time measure (negative = B faster)
    threshold_rel: float | None  # the spread it had to exceed
    basis: str  # what delta_rel measures
    deltas: list[Delta] = field(default_factory=list)

    @property
    def summary(self) -> str:
        if self.delta_rel is None:
            return self.verdict
        return (f"{self.verdict}: {self.basis} {fmt.signed_pct(self.delta_rel)} "
                f"(spread +/-{fmt.pct(self.threshold_rel, 1)})")


@dataclass
class Comparison:
    a_source: str
    b_source: str
    pairs: list[Pair]
    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)


def verdict(rel: float | None, rci_a: float | None, rci_b: float | None,
            th: Thresholds = DEFAULT) -> tuple[str, float | None]:
    """(verdict, threshold) for a relative change of a time measure (negative = faster)."""
    if rel is None:
        return "not comparable", None
    if rci_a is None or rci_b is None:
        return "inconclusive", None
    threshold = max(th.compare_floor_rel, rci_a + rci_b)
    if abs(rel) <= threshold:
        return "no change", threshold
    return ("faster" if rel < 0 else "slower"), threshold


def compare_runs(a: dict[str, Any], b: dict[str, Any], label: str = "A vs B",
                 th: Thresholds = DEFAULT) -> Pair:
    deltas = _deltas(a, b)
    bad = [f"{side} {R.status_text(r)}" for side, r in (("A", a), ("B", b))
           if r.get("status") != "ok"]
    if bad:
        return Pair(label, a, b, "not comparable (" + ", ".join(bad) + ")", None, None, "",
                    deltas)
    ga, gb = R.number(a, "batch.global"), R.number(b, "batch.global")
    ma, mb = R.step_median_s(a), R.step_median_s(b)
    if ga == gb and ma and mb:
        rel, basis = M.growth(mb, ma), "step median"
    else:
        sa, sb = R.metric(a, "samples_per_s"), R.metric(b, "samples_per_s")
        rel, basis = (sa / sb - 1.0 if sa and sb else None), "time per sample"
    v, threshold = verdict(rel, R.metric(a, "step_time_s.rel_ci"),
                           R.metric(b, "step_time_s.rel_ci"), th)
    return Pair(label, a, b, v, rel, threshold, basis, deltas)


def _deltas(a: dict[str, Any], b: dict[str, Any]) -> list[Delta]:
    out = [_rel("samples/s", R.metric(a, "samples_per_s"), R.metric(b, "samples_per_s"),
                fmt.rate),
           _rel("step median", R.step_median_s(a), R.step_median_s(b), fmt.ms),
           _rel("step p95", R.metric(a, "step_time_s.p95"), R.metric(b, "step_time_s.p95"),
                fmt.ms),
           Delta("step spread (rel. CI)", fmt.pct(R.metric(a, "step_time_s.rel_ci"), 1),
                 fmt.pct(R.metric(b, "step_time_s.rel_ci"), 1), "")]
    for p in BREAKDOWN_PHASES:
        out.append(_rel(f"{p} / step", R.phase_s(a, p), R.phase_s(b, p), fmt.ms))
    out.append(_points("data wait", R.metric(a, "data_wait_fraction"),
                       R.metric(b, "data_wait_fraction")))
    out.append(_points("comm", R.metric(a, "comm_fraction"), R.metric(b, "comm_fraction")))
    out.append(_rel("peak host memory", R.host_peak(a), R.host_peak(b), fmt.bytes_))
    out.append(_rel("peak device memory", R.device_peak(a), R.device_peak(b), fmt.bytes_))
    out.append(_points("accuracy", R.metric(a, "accuracy"), R.metric(b, "accuracy")))
    return out


def _rel(metric: str, a: Any, b: Any, show: Any) -> Delta:
    return Delta(metric, show(a), show(b), fmt.signed_pct(M.growth(b, a)))


def _points(metric: str, a: Any, b: Any) -> Delta:
    change = fmt.NA if a is None or b is None else f"{(b - a) * 100:+.1f} pt"
    return Delta(metric, fmt.pct(a, 1), fmt.pct(b, 1), change)


def _side(path: str | Path, which: str) -> list[dict[str, Any]]:
    runs = R.of_kind(R.load_records(path), "run")
    if not runs:
        raise ConfigError(f"{which}: no run records in {path}")
    return runs


def compare_paths(a: str | Path, b: str | Path, th: Thresholds = DEFAULT) -> Comparison:
    """Compare the runs at ``a`` and ``b`` (one run each, or sweeps matched by point)."""
    ra, rb = _side(a, "A"), _side(b, "B")
    if len(ra) == 1 and len(rb) == 1:
        return Comparison(str(a), str(b), [compare_runs(ra[0], rb[0], "A vs B", th)])
    for runs, which, p in ((ra, "A", a), (rb, "B", b)):
        if len(runs) > 1 and not all(R.point(r) for r in runs):
            raise ConfigError(f"{which} ({p}) holds {len(runs)} runs that are not points of one "
                              "sweep; pass one run's result.json or folder")
    pa, pb = _by_point(ra, True), _by_point(rb, True)
    if not set(pa) & set(pb):  # two sweeps of other ids (a renamed spec): by point alone
        pa, pb = _by_point(ra, False), _by_point(rb, False)
    pairs = [compare_runs(pa[k], pb[k], _point_label(pa[k]), th) for k in pa if k in pb]
    if not pairs:
        raise ConfigError(f"no experiment point of {a} matches one of {b}")
    return Comparison(str(a), str(b), pairs, [_point_label(pa[k]) for k in pa if k not in pb],
                      [_point_label(pb[k]) for k in pb if k not in pa])


def _by_point(runs: list[dict[str, Any]], with_id: bool) -> dict[str, dict[str, Any]]:
    """Each sweep point's median repeat, keyed by (sweep id and) point: a folder holding two
    sweeps whose axes share names keeps their points apart."""
    out: dict[str, dict[str, Any]] = {}
    for eid, recs in _by_exp(runs).items():
        for r in P.group_repeats(recs):
            out[(f"{eid}|" if with_id else "") + R.point_key(R.point(r))] = r
    return out


def _by_exp(runs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        out.setdefault(R.exp_id(r) or "", []).append(r)
    return out


def _point_label(rec: dict[str, Any]) -> str:
    return fmt.describe_point(R.point(rec)) or R.name(rec)


SWEEP_HEADERS = ["Point", "Samples/s A", "Samples/s B", "Change", "Step median A",
                 "Step median B", "Change", "Spread", "Verdict"]


def _sweep_row(p: Pair) -> list[str]:
    d = {x.metric: x for x in p.deltas}
    sps, med = d["samples/s"], d["step median"]
    return [p.label, sps.a, sps.b, sps.change, med.a, med.b, med.change,
            fmt.pct(p.threshold_rel, 1) if p.threshold_rel is not None else fmt.NA, p.verdict]


def to_markdown(cmp: Comparison) -> str:
    lines = ["# scaleprobe compare", "", f"A: `{cmp.a_source}`  ", f"B: `{cmp.b_source}`", ""]
    if len(cmp.pairs) == 1 and not cmp.only_a and not cmp.only_b:
        p = cmp.pairs[0]
        rows = [[x.metric, x.a, x.b, x.change] for x in p.deltas]
        lines += [fmt.md_table(["Metric", "A", "B", "Change"], rows), "",
                  f"**Verdict, B against A: {p.summary}.**"]
    else:
        lines.append(fmt.md_table(SWEEP_HEADERS, [_sweep_row(p) for p in cmp.pairs],
                                  [False] + [True] * 7 + [False]))
        lines += _unmatched(cmp)
    lines += ["", RULE]
    return "\n".join(lines) + "\n"


def _unmatched(cmp: Comparison) -> list[str]:
    out = []
    if cmp.only_a:
        out += ["", "Only in A: " + "; ".join(cmp.only_a)]
    if cmp.only_b:
        out += ["", "Only in B: " + "; ".join(cmp.only_b)]
    return out


RULE = ("A difference counts only when it exceeds the runs' own spread: |change| > "
        "max(2%, rel_ci A + rel_ci B), where rel_ci is the relative 95% confidence half-width "
        "of each run's median step time.")


def print_comparison(cmp: Comparison, console: Any = None) -> None:
    """A rich table in the terminal."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    con = console or Console()
    styles = {"faster": "green", "slower": "red", "no change": "dim"}
    con.print(f"A: {escape(str(cmp.a_source))}\nB: {escape(str(cmp.b_source))}")
    if len(cmp.pairs) == 1 and not cmp.only_a and not cmp.only_b:
        p = cmp.pairs[0]
        t = Table(show_header=True, header_style="bold")
        for col, just in (("metric", "left"), ("A", "right"), ("B", "right"),
                          ("change", "right")):
            t.add_column(col, justify=just)
        for x in p.deltas:
            t.add_row(*(escape(str(v)) for v in (x.metric, x.a, x.b, x.change)))
        con.print(t)
        style = styles.get(p.verdict, "yellow")
        con.print(f"verdict, B against A: [{style}]{escape(p.summary)}[/{style}]")
    else:
        t = Table(show_header=True, header_style="bold")
        for i, col in enumerate(SWEEP_HEADERS):
            t.add_column(col, justify="left" if i in (0, 8) else "right")
        for p in cmp.pairs:
            row = _sweep_row(p)
            style = styles.get(p.verdict, "yellow")
            cells = [escape(str(c)) for c in row]
            t.add_row(*cells[:-1], f"[{style}]{cells[-1]}[/{style}]")
        con.print(t)
        for line in _unmatched(cmp):
            if line:
                con.print(line, markup=False)
    con.print(f"[dim]{RULE}[/dim]")
