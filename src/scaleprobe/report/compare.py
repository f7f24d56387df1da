"""Compare two runs, or two sweeps point by point, with an interval behind the verdict.

A side is a result.json, a run folder, a results.jsonl or a folder of results. One run on
each side is compared directly; several runs on each side are matched by ``experiment.point``.

The verdict reads samples/s, B / A, through the same intervals as every other verdict:
Welch's t over the repeats where each side has two or more, else the two runs' within-run
spreads widened to one run's process-to-process noise; faster, slower, no change or
inconclusive by docs/REPORTS.md's table ("Comparing runs"). Every pair also says which
configuration keys (and which parts of the machine) differ between A and B. The runs behind
the verdict (every repeat of each side where Welch's interval reads them all) are its sources
(``core.claim.Source``): where any was measured under load, the verdict carries the load
caveat naming it (``claim.load_caveat``), as every other verdict does.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from scaleprobe.core import claim as CL
from scaleprobe.core import fmt
from scaleprobe.core import metrics as M
from scaleprobe.core.errors import ConfigError
from scaleprobe.core.invariants import uneven_steps
from scaleprobe.core.result_model import UNKNOWN, UNKNOWN_TEXT, RunResult, dicts, point_key
from scaleprobe.core.run_metrics import BREAKDOWN_PHASES, StepTime
from scaleprobe.core.thresholds import DEFAULT, Thresholds
from scaleprobe.report.findings.diagnose import epoch_start_wait
from scaleprobe.report.reading import pairing as PR
from scaleprobe.report.reading import records as R
from scaleprobe.report.reading import repeats as P
from scaleprobe.report.reading.machine_load import run_load, sources


@dataclass
class Delta:
    metric: str
    a: str
    b: str
    change: str  # '+12.0%' for rates/times/memory, '+1.2 pt' for fractions


@dataclass
class Pair:
    label: str  # the point, or 'A vs B'
    a: RunResult
    b: RunResult
    verdict: str  # faster | slower | no change | inconclusive | not comparable (...)
    interval: M.Interval | None  # samples/s B / A
    need: int | None = None  # repeats per side that would decide an inconclusive verdict
    differs: list[str] = field(default_factory=list)  # "train.batch_size: 64 -> 32"
    deltas: list[Delta] = field(default_factory=list)
    # where a side's samples/s (from its median step) is not its window's throughput
    caveats: list[str] = field(default_factory=list)
    # the runs behind the verdict, each with its load ("A batch_size=32 (repeat 1)")
    sources: tuple[CL.Source, ...] = ()

    @property
    def under_load(self) -> bool:
        return any(s.under_load for s in self.sources)

    @property
    def load_caveat(self) -> str:
        """``measured under load: B batch_size=32 (repeat 1): 3.00 cores outside (1 of 6
        source runs); ...``, or empty when no run behind the verdict was under load."""
        return CL.load_caveat(self.sources)

    @property
    def summary(self) -> str:
        iv = self.interval
        if iv is None:
            return self.verdict + ("" if self.verdict.startswith("not comparable")
                                   else ": no spread to judge by (fewer than 3 timed steps)")
        head = self.verdict
        if head == CL.INCONCLUSIVE and iv.enough_repeats:  # the interval holds 1: in words
            head = CL.Claim("", iv.estimate, iv).verdict
        if head == CL.INCONCLUSIVE and not iv.enough_repeats:
            head = f"{CL.INCONCLUSIVE} (1 run a side)"
            if iv.lo > 1.0 or iv.hi < 1.0:  # the one pair leans, and cannot see drift
                lean = "faster" if iv.lo > 1.0 else "slower"
                head += (f", leaning {lean}: one run a side cannot see the drift between "
                         "runs (load that comes and goes)")
        text = f"{head}: samples/s B / A {iv.text()} ({_how(iv)})"
        if self.verdict == CL.INCONCLUSIVE:
            text += ("; " + (f"about {self.need} repeats a side would decide it" if self.need
                             else "more repeats would not decide it: the difference is "
                                  "smaller than the noise" if iv.enough_repeats
                             # one run a side measured no noise between runs
                             else "2 or more repeats a side measure the noise between runs "
                                  "and say how many would decide it"))
        if self.load_caveat:
            text += f"; {self.load_caveat}"
        return text


def _how(iv: M.Interval) -> str:
    if iv.method.startswith("Welch"):
        return "Welch t over the repeats of each side"
    return "one run a side: within-run spread, at least the +/-10% noise of one run"


@dataclass
class Comparison:
    a_source: str
    b_source: str
    pairs: list[Pair]
    only_a: list[str] = field(default_factory=list)
    only_b: list[str] = field(default_factory=list)


def samples_interval(a: RunResult, b: RunResult) -> M.Interval | None:
    """samples/s B / A: Welch over both sides' repeats when each has two or more, else the
    two runs shown (each point's median repeat) with their within-run spreads."""
    va, vb = P.values(a, P.sps_of), P.values(b, P.sps_of)
    if len(va) >= 2 and len(vb) >= 2:
        return M.unpaired_ratio_interval(va, vb)
    return M.ratio_interval([P.sps_of(a)], [P.sps_of(b)], [P.rel_ci(a)],
                            [P.rel_ci(b)])


def verdict_sources(a: RunResult, b: RunResult, iv: M.Interval | None,
                    th: Thresholds = DEFAULT) -> tuple[CL.Source, ...]:
    """The runs the verdict stands on, each with its load as the report judges it
    (``machine_load.source``): every repeat of each side where Welch's interval reads them
    all, else the two runs compared; each named with its side (``B batch_size=32 (repeat
    1)``), so the load caveat says which side's run it was."""
    welch = iv is not None and iv.method.startswith("Welch")
    out: list[CL.Source] = []
    for side, r in (("A", a), ("B", b)):
        srcs = sources([r], th) if welch else sources([_alone(r)], th)
        out += [replace(x, run=f"{side} {x.run}", label=f"{side} {x.label or x.run}")
                for x in srcs]
    return tuple(out)


def _alone(r: RunResult) -> RunResult:
    """The record itself, without its point's other repeats: the run a one-run interval
    read."""
    one = copy.copy(r)
    one.repeats = None
    return one


def verdict(iv: M.Interval | None, th: Thresholds = DEFAULT) -> str:
    """faster / slower (B against A) when the interval of samples/s B / A excludes 1, no
    change when it lies within +/- ``compare_floor_rel``, else inconclusive; one run a side
    is always inconclusive (``Interval.above`` needs two repeats)."""
    if iv is None:
        return CL.INCONCLUSIVE
    if iv.above(1.0):
        return "faster"
    if iv.below(1.0):
        return "slower"
    if (iv.enough_repeats and iv.lo >= 1.0 / (1.0 + th.compare_floor_rel)
            and iv.hi <= 1.0 + th.compare_floor_rel):
        return "no change"
    return CL.INCONCLUSIVE


def _repeats_to_decide(iv: M.Interval, th: Thresholds) -> int | None:
    """Repeats a side after which the verdict would be faster, slower or no change, the
    ratio and its spread staying as measured (None: more than ``MAX_REPEATS_SUGGESTED``)."""
    for n in range(max(2, iv.n + 1), M.MAX_REPEATS_SUGGESTED + 1):
        if verdict(M.projected(iv, n), th) != CL.INCONCLUSIVE:
            return n
    return None


ENV_KEYS = (("host", "host"), ("CPU", "cpu_model"), ("cores", "cores"), ("torch", "torch"))


def differences(a: RunResult, b: RunResult) -> list[str]:
    """What differs between the two runs besides the code: each configuration key that
    changes the measurement (``pairing.differing_keys``), the machine (host, CPU, cores,
    GPUs, torch), and load from outside the run (on any repeat of the side's point)."""
    fa, fb = PR.resolved_config(a), PR.resolved_config(b)
    out = [f"{k}: {_val(fa.get(k))} -> {_val(fb.get(k))}"
           for k in sorted(PR.differing_keys(a, b))]
    blank = [side for side, r in (("A", a), ("B", b)) if not _has_env(r)]
    if blank:
        out.append(f"machine: not recorded for {' and '.join(blank)} (an older record without "
                   "an environment); whether A and B ran on the same kind of machine is not "
                   "known")
    for name, key in ENV_KEYS:
        x, y = a.env.get(key), b.env.get(key)
        if x != y and not blank:
            out.append(f"{name}: {_val(x)} -> {_val(y)}")
    ga, gb = _gpus(a), _gpus(b)
    if ga != gb and not blank:
        out.append(f"GPUs: {ga or 'none'} -> {gb or 'none'}")

    loaded = [side for side, r in (("A", a), ("B", b))
              if any(run_load(x)[0] for x in P.repeats_of(r) or [r])]
    if loaded:
        out.append(f"measured under load: {' and '.join(loaded)}")
    return out


def _has_env(r: RunResult) -> bool:
    """Does the record say what machine it ran on (host, CPU, cores, torch)?"""
    return any(r.env.get(key) is not None for _name, key in ENV_KEYS)


def _val(v: Any) -> str:
    return "(absent)" if v is None else str(v)


def _gpus(r: RunResult) -> str:
    names = [str(g.get("name")) for g in dicts(r.env.get("gpus"))]
    return ", ".join(names)


def compare_runs(a: RunResult, b: RunResult, label: str = "A vs B",
                 th: Thresholds = DEFAULT) -> Pair:
    deltas = _deltas(a, b)
    bad = [f"{side} {r.status_text}" for side, r in (("A", a), ("B", b))
           if r.status != "ok" and not _older_but_measured(r)]
    if bad:
        return Pair(label, a, b, "not comparable (" + ", ".join(bad) + ")", None,
                    deltas=deltas)
    iv = samples_interval(a, b)
    v = verdict(iv, th)
    need = _repeats_to_decide(iv, th) if v == CL.INCONCLUSIVE and iv is not None else None
    return Pair(label, a, b, v, iv, need, differences(a, b), deltas, caveats(a, b, th),
                verdict_sources(a, b, iv, th))


def _older_but_measured(r: RunResult) -> bool:
    """A record without a status (older schema) that holds samples/s: compared, with a
    caveat, rather than refused as if it had failed."""
    return r.status == UNKNOWN and r.metrics.samples_per_s is not None


def caveats(a: RunResult, b: RunResult, th: Thresholds = DEFAULT) -> list[str]:
    """The verdict compares each side's throughput (samples over its timed window): where a
    side's median step would say another figure (its steps vary widely), say so, and why when
    the wait at epoch starts explains it: the difference may be the stalls, not the code. A
    side of unknown status (an older record) is named."""
    out = [f"{side}: {UNKNOWN_TEXT}: its figures are read as recorded; whether it ran to "
           "its end is not known" for side, r in (("A", a), ("B", b)) if r.status == UNKNOWN]
    for side, r in (("A", a), ("B", b)):
        gap = uneven_steps(r)
        if gap is None:
            continue
        step, window = gap
        why = epoch_start_wait(r, th)
        out.append(f"{side}: {fmt.rate(window)} samples/s over its timed window, "
                   f"{fmt.rate(step)} from its median step ({step / window:.2f}x)"
                   + (f": {why}" if why else ": its steps vary widely (see its steps.csv)")
                   + "; the difference may be the stalls: compare epoch times, or fix them first")
    return out


def _deltas(a: RunResult, b: RunResult) -> list[Delta]:
    ma, mb = a.metrics, b.metrics
    sa, sb = ma.step_time_s or StepTime(), mb.step_time_s or StepTime()
    pa, pb = ma.breakdown_s.phases(), mb.breakdown_s.phases()
    out = [_rel("samples/s", ma.samples_per_s, mb.samples_per_s, fmt.rate),
           _rel("step median", sa.median, sb.median, fmt.duration),
           _rel("step p95", sa.p95, sb.p95, fmt.duration),
           Delta("step spread (rel. CI)", fmt.pct(sa.rel_ci, 1), fmt.pct(sb.rel_ci, 1), "")]
    gpu = any(bool(r.env.get("gpus")) for r in (a, b))
    for p in BREAKDOWN_PHASES:
        out.append(_rel(f"{fmt.phase_name(p, gpu)} / step", pa[p], pb[p], fmt.duration))
    out.append(_points("data wait", ma.data_wait_fraction, mb.data_wait_fraction))
    out.append(_points("comm", ma.comm_fraction, mb.comm_fraction))
    out.append(_rel("peak host memory", ma.peak_mem_bytes.host, mb.peak_mem_bytes.host,
                    fmt.bytes_))
    out.append(_rel("peak device memory", ma.peak_mem_bytes.device_peak(),
                    mb.peak_mem_bytes.device_peak(), fmt.bytes_))
    out.append(_points("accuracy", ma.accuracy, mb.accuracy))
    return out


def _rel(metric: str, a: Any, b: Any, show: Any) -> Delta:
    """Both figures and B's change over A's; two different times that would print alike
    (0.04 and 0.036 ms as "0.0 ms") get three significant digits, so that the change beside
    them is one a reader can see in them."""
    sa, sb = show(a), show(b)
    if (show is fmt.duration and sa == sb and a != b and isinstance(a, (int, float))
            and isinstance(b, (int, float)) and max(abs(a), abs(b)) < 1.0):
        sa, sb = (f"{v * 1000:.3g} ms" for v in (a, b))
    return Delta(metric, sa, sb, fmt.signed_pct(M.growth(b, a)))


def _points(metric: str, a: Any, b: Any) -> Delta:
    change = fmt.NA if a is None or b is None else f"{(b - a) * 100:+.1f} pt"
    return Delta(metric, fmt.pct(a, 1), fmt.pct(b, 1), change)


def _side(path: str | Path, which: str) -> list[RunResult]:
    runs = R.runs(R.load_records(path))
    if not runs:
        raise ConfigError(f"{which}: no run records in {path}")
    return runs


def compare_paths(a: str | Path, b: str | Path, th: Thresholds = DEFAULT) -> Comparison:
    """Compare the runs at ``a`` and ``b`` (one run each, or sweeps matched by point)."""
    ra, rb = _side(a, "A"), _side(b, "B")
    if len(ra) == 1 and len(rb) == 1:
        return Comparison(str(a), str(b), [compare_runs(ra[0], rb[0], "A vs B", th)])
    for runs, which, p in ((ra, "A", a), (rb, "B", b)):
        if len(runs) > 1 and not all(r.point for r in runs):
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


def _by_point(runs: list[RunResult], with_id: bool) -> dict[str, RunResult]:
    """Each sweep point's median repeat, keyed by (sweep id and) point: a folder holding two
    sweeps whose axes share names keeps their points apart."""
    out: dict[str, RunResult] = {}
    for eid, recs in _by_exp(runs).items():
        for r in P.group_repeats(recs):
            out[(f"{eid}|" if with_id else "") + point_key(r.point)] = r
    return out


def _by_exp(runs: list[RunResult]) -> dict[str, list[RunResult]]:
    out: dict[str, list[RunResult]] = {}
    for r in runs:
        out.setdefault(r.exp_id or "", []).append(r)
    return out


def _point_label(rec: RunResult) -> str:
    return fmt.describe_point(rec.point) or rec.label


SWEEP_HEADERS = ["Point", "Samples/s A", "Samples/s B", "Change", "Step median A",
                 "Step median B", "Change", "B / A (95%)", "Verdict"]


def _sweep_row(p: Pair) -> list[str]:
    d = {x.metric: x for x in p.deltas}
    sps, med = d["samples/s"], d["step median"]
    return [p.label, sps.a, sps.b, sps.change, med.a, med.b, med.change,
            p.interval.text() if p.interval is not None else fmt.NA,
            p.verdict + (", under load" if p.under_load else "")]


def _differ_lines(cmp: Comparison) -> list[str]:
    """What the verdicts measure besides the code: the keys and machine parts that differ in
    every pair on one line, then those of single pairs under their point."""
    lists = [p.differs for p in cmp.pairs]
    common = [d for d in (lists[0] if lists else []) if all(d in x for x in lists)]
    lines = []
    if common:
        lines.append("A and B differ in (every verdict measures these together): "
                     + "; ".join(common))
    for p in cmp.pairs:
        own = [d for d in p.differs if d not in common]
        if own:
            lines.append(f"{p.label} also differs in: " + "; ".join(own))
    lines = lines or ["A and B ran the same configuration on the same kind of machine."]
    for p in cmp.pairs:
        where = "" if len(cmp.pairs) == 1 else f"{p.label}: "
        lines += [f"Caveat: {where}{c}" for c in p.caveats]
        if p.load_caveat and not _single(cmp):  # a single pair's verdict line carries it
            lines.append(f"Caveat: {where}{p.load_caveat}")
    return lines


def _single(cmp: Comparison) -> bool:
    """One pair shown metric by metric, its verdict (``Pair.summary``) under the table."""
    return len(cmp.pairs) == 1 and not cmp.only_a and not cmp.only_b


def to_markdown(cmp: Comparison) -> str:
    lines = ["# scaleprobe compare", "", f"A: `{cmp.a_source}`  ", f"B: `{cmp.b_source}`", ""]
    if _single(cmp):
        p = cmp.pairs[0]
        rows = [[x.metric, x.a, x.b, x.change] for x in p.deltas]
        lines += [fmt.md_table(["Metric", "A", "B", "Change"], rows), "",
                  f"**Verdict, B against A: {p.summary}.**"]
        lines += ["", *_differ_lines(cmp)]
    else:
        lines.append(fmt.md_table(SWEEP_HEADERS, [_sweep_row(p) for p in cmp.pairs],
                                  [False] + [True] * 7 + [False]))
        lines += _unmatched(cmp)
        lines += ["", *_differ_lines(cmp)]
    lines += ["", RULE]
    return "\n".join(lines) + "\n"


def _unmatched(cmp: Comparison) -> list[str]:
    out = []
    if cmp.only_a:
        out += ["", "Only in A: " + "; ".join(cmp.only_a)]
    if cmp.only_b:
        out += ["", "Only in B: " + "; ".join(cmp.only_b)]
    return out


RULE = ("B is faster or slower only when the 95% interval of samples/s B / A excludes 1 "
        "over at least two repeats a side (Welch t over each side's repeats); no change only "
        f"when it lies within +/-2%; otherwise {CL.INCONCLUSIVE}. One run a side is always "
        f"{CL.INCONCLUSIVE}: its interval (the within-run spread, at least +/-10%) cannot see the "
        "drift between runs. See docs/REPORTS.md.")


def print_comparison(cmp: Comparison, console: Any = None) -> None:
    """A rich table in the terminal."""
    # heavy: rich: printing only; kept out of the CLI's start-up
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    con = console or Console()
    styles = {"faster": "green", "slower": "red", "no change": "dim"}
    con.print(f"A: {escape(str(cmp.a_source))}\nB: {escape(str(cmp.b_source))}")
    if _single(cmp):
        p = cmp.pairs[0]
        t = Table(show_header=True, header_style="bold")
        for col, just in (("metric", "left"), ("A", "right"), ("B", "right"),
                          ("change", "right")):  # rich's JustifyMethod
            t.add_column(col, justify="left" if just == "left" else "right")
        for x in p.deltas:
            t.add_row(*(escape(str(v)) for v in (x.metric, x.a, x.b, x.change)))
        con.print(t)
        style = styles.get(p.verdict, "yellow")
        con.print(f"verdict, B against A: [{style}]{escape(p.summary)}[/{style}]")
        for line in _differ_lines(cmp):
            con.print(line, markup=False)
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
        for line in _unmatched(cmp) + _differ_lines(cmp):
            if line:
                con.print(line, markup=False)
    con.print(f"[dim]{RULE}[/dim]")
