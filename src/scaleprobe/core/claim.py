"""One claim: a verdict or a derived figure a user reads, with the evidence that stands behind it.

Speedup, efficiency, "lost to", a batch step that pays or does not, the fastest batch size,
"use N loader workers", "slower together", parity, the critical batch, a what-if ceiling: each
is a ``Claim``, which carries its value, its interval (``intervals.Interval``), the repeats on
each side, the runs it came from (``Source``: experiment id + point key + repeat, and whether
the run was measured under load), the pairing, and the rule that decided it. One set of rules
(``Claim.rule``) and one renderer (``text``, ``markdown``, ``html``, ``to_dict``) live here, so
the words of a verdict are the same in the terminal, scale.md, sweep.md, the HTML report and
the JSON, and no other module writes them (tests/architecture/test_claim_phrases.py checks).

The rules, in order, are docs/VERDICTS.md's ("One claim type"): not measured; inconclusive
with fewer than ``intervals.MIN_REPEATS_TO_DECIDE`` repeats a side (one repeat cannot see drift
between runs: never "within noise"); no interval; not resolved when the interval includes the
reference, bounds included; else the ``above`` or ``below`` words, or for an equivalence
(``band``) holds, broken or not resolved.

Whatever the rule, a claim with any source run measured under load carries the load caveat,
in every format; a claim with a model's figure beside the measured one shows both and blames
neither (``gap_text``). The claims of each kind (a batch step, a slowdown, parity, a plan's
pick, a memory fit, ...) are built in ``claim_kinds.py`` from these words.

Torch-free, I/O-free.
"""

from __future__ import annotations

import html as _html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from scaleprobe.core.intervals import (
    MAX_REPEATS_SUGGESTED,
    MIN_REPEATS_TO_DECIDE,
    Interval,
    repeats_to_decide,
)

# The verdict words. Every other module names them through these constants or a Claim.
INCONCLUSIVE = "inconclusive"
ONE_REPEAT = "inconclusive (1 repeat)"
NOT_RESOLVED = "not resolved"
NOT_MEASURED = "not measured"
NO_INTERVAL = "no interval"
PAYS, DOES_NOT_PAY = "pays", "does not pay"
NOT_TOLD_APART = "not told apart from"
NOT_DECIDED_AGAINST = "not decided against"
SLOWER_TOGETHER, FASTER_TOGETHER = "slower together", "faster together"
PARITY_HOLDS, PARITY_BROKEN = "parity holds", "parity broken"
FITS, DOES_NOT_FIT = "fits", "does not fit"
FASTER, SLOWER = "faster", "slower"
FASTEST, CHEAPEST = "fastest", "cheapest"  # a plan's picks
UNDER_LOAD = "measured under load"

# The rules by name (``Claim.rule``): the JSON names the one that decided a claim.
RULE_NOT_MEASURED = "no value"
RULE_NO_INTERVAL = "no interval"
RULE_ONE_REPEAT = "fewer than 2 repeats a side"
RULE_INCLUDES_REF = "interval includes the reference"
RULE_ABOVE = "interval above the reference"
RULE_BELOW = "interval below the reference"
RULE_INSIDE_BAND = "interval inside the band"
RULE_OUTSIDE_BAND = "interval outside the band"
RULE_CROSSES_BAND = "interval crosses the band's edge"
DECIDED = frozenset({RULE_ABOVE, RULE_BELOW, RULE_INSIDE_BAND, RULE_OUTSIDE_BAND})


def one_repeat_text(n: int) -> str:
    """``inconclusive (1 repeat)``; ``inconclusive (0 repeats)`` for an empty side."""
    return f"{INCONCLUSIVE} ({n} repeat{'s' if n != 1 else ''})"


@dataclass(frozen=True)
class Source:
    """One run a claim came from: its identity (experiment id, point key, repeat) and whether
    it was measured under load (``None``: not measured), with the load in words."""

    run: str
    under_load: bool | None = None
    load: str = ""
    label: str = ""  # how the text names it ("nproc=2 (repeat 1)"); the JSON keeps ``run``

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run, "label": self.label, "under_load": self.under_load,
                "load": self.load}


def load_caveat(sources: Sequence[Source]) -> str:
    """``measured under load: nproc=2 (repeat 1) (1.70 cores outside); its figures may be
    slower than the machine allows``, or empty when no source run was under load."""
    hits = [s for s in sources if s.under_load]
    if not hits:
        return ""
    runs = ", ".join(f"{s.label or s.run}: {s.load}" if s.load else s.label or s.run
                     for s in hits)
    return (f"{UNDER_LOAD}: {runs} ({len(hits)} of {len(sources)} source runs); the figure "
            "may be slower than the machine allows")


def disagreement(a: float, b: float, a_name: str, b_name: str) -> str:
    """``2.50x apart; the measurement and the model disagree, and neither is taken as the
    right one without a third measurement``: a gap between two figures of one quantity (a
    measurement and a model, two measurements) is shown, never blamed on either without
    evidence that says which."""
    ratio = f"{max(a, b) / min(a, b):.2f}x apart; " if a > 0 and b > 0 else ""
    return (f"{ratio}{a_name} and {b_name} disagree, and neither is taken as the right one "
            "without a third measurement")


def _num(v: float, unit: str, digits: int) -> str:
    if unit == "%":
        return f"{v * 100:.{max(0, digits - 2)}f}%"
    if unit == "diff":
        return f"{v:+.{digits}f}"
    return f"{v:.{digits}f}{unit}"


@dataclass(frozen=True)
class Claim:
    """A verdict or derived figure with its evidence. ``value`` is the point estimate,
    ``interval`` its 95% interval (a ratio's ``metrics.Interval``, or a difference's when
    ``unit`` is ``"diff"``), ``ref`` the no-change value (or the bar a verdict is judged
    against), ``above`` / ``below`` the words said when the interval lies wholly above /
    below it (``band``: an equivalence margin, with ``within`` said inside it and ``outside``
    wholly outside). ``repeats`` is the repeats on each side (empty: the interval's ``n``)."""

    subject: str
    value: float | None
    interval: Interval | None = None
    ref: float = 1.0
    unit: str = "x"
    digits: int = 2
    above: str = ""
    below: str = ""
    band: tuple[float, float] | None = None
    # a bar that is itself a range (the batch rule's 1 - memory growth over memory's own
    # interval): above / below only when the interval clears the whole range
    ref_range: tuple[float, float] | None = None
    within: str = ""
    outside: str = ""
    repeats: tuple[int, ...] = ()
    sources: tuple[Source, ...] = ()
    pairing: str = ""
    detail: str = ""
    model: float | None = None
    model_name: str = "the model"
    kind: str = ""
    # the word for an interval that holds the reference (a model's interval, not repeats:
    # "inconclusive") and what stands behind the interval when it is not repeats
    undecided: str = NOT_RESOLVED
    evidence: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    # ---- the rules -----------------------------------------------------------------------

    @property
    def n_min(self) -> int | None:
        """The fewest repeats on any side (None: unknown)."""
        if self.repeats:
            return min(self.repeats)
        return self.interval.n if self.interval is not None else None

    @property
    def rule(self) -> str:
        """The rule that decided this claim (one of the ``RULE_*`` names)."""
        iv = self.interval
        if self.value is None or (isinstance(self.value, float) and math.isnan(self.value)):
            return RULE_NOT_MEASURED
        n = self.n_min
        if n is not None and n < MIN_REPEATS_TO_DECIDE:
            return RULE_ONE_REPEAT
        if iv is None:
            return RULE_NO_INTERVAL
        if self.band is not None:
            lo, hi = self.band
            if lo < iv.lo and iv.hi < hi:
                return RULE_INSIDE_BAND
            if iv.hi < lo or iv.lo > hi:
                return RULE_OUTSIDE_BAND
            return RULE_CROSSES_BAND
        lo_bar, hi_bar = self.ref_range or (self.ref, self.ref)
        if iv.lo > hi_bar:
            return RULE_ABOVE
        if iv.hi < lo_bar:
            return RULE_BELOW
        return RULE_INCLUDES_REF

    @property
    def decided(self) -> bool:
        return self.rule in DECIDED

    @property
    def under_load(self) -> bool:
        return any(s.under_load for s in self.sources)

    def _ref_text(self) -> str:
        if self.band is not None:
            lo, hi = self.band
            if math.isclose(lo, -hi):
                return f"+/-{_num(hi, self.unit, self.digits).lstrip('+')}"
            return f"{_num(lo, self.unit, self.digits)}..{_num(hi, self.unit, self.digits)}"
        if self.ref_range is not None and self.ref_range[0] != self.ref_range[1]:
            lo, hi = self.ref_range
            return (f"{_num(lo, self.unit, self.digits)} to {_num(hi, self.unit, self.digits)}"
                    " (the bar's range)")
        if self.unit == "x":
            return f"{self.ref:g}x"
        return _num(self.ref, self.unit, self.digits)

    @property
    def verdict(self) -> str:
        """The verdict in words, as the rule decided it."""
        r = self.rule
        if r == RULE_NOT_MEASURED:
            return NOT_MEASURED
        if r == RULE_NO_INTERVAL:
            return f"{NO_INTERVAL}: not judged"
        if r == RULE_ONE_REPEAT:
            head = one_repeat_text(self.n_min or 0)
            iv = self.interval
            lean = ""
            if iv is None or self.band is not None:
                pass
            elif iv.lo > self.ref and self.above:
                lean = self.above
            elif iv.hi < self.ref and self.below:
                lean = self.below
            return f"{head}, leaning {lean}" if lean else head
        if r == RULE_INCLUDES_REF:
            return f"{self.undecided} (the interval includes {self._ref_text()})"
        if r == RULE_CROSSES_BAND:
            return f"{self.undecided} (the interval crosses {self._ref_text()})"
        words = {RULE_ABOVE: self.above, RULE_BELOW: self.below,
                 RULE_INSIDE_BAND: self.within, RULE_OUTSIDE_BAND: self.outside}[r]
        where = {RULE_ABOVE: "above", RULE_BELOW: "below", RULE_INSIDE_BAND: "inside",
                 RULE_OUTSIDE_BAND: "outside"}[r]
        return words or f"the interval lies {where} {self._ref_text()}"

    @property
    def short_verdict(self) -> str:
        """The verdict in a table cell: ``not resolved``, ``inconclusive (1 repeat)``, or the
        decided words (empty when the words are the table's own: no ``above`` / ``below``)."""
        r = self.rule
        if r in (RULE_INCLUDES_REF, RULE_CROSSES_BAND):
            return self.undecided
        if r == RULE_ONE_REPEAT:
            return one_repeat_text(self.n_min or 0)
        if r == RULE_NO_INTERVAL:
            return NO_INTERVAL
        if r == RULE_NOT_MEASURED:
            return NOT_MEASURED
        return {RULE_ABOVE: self.above, RULE_BELOW: self.below,
                RULE_INSIDE_BAND: self.within, RULE_OUTSIDE_BAND: self.outside}.get(r, "")

    def cell(self, markdown: bool = True) -> str:
        """A table cell: ``1.13x [0.88, 1.44], not resolved, under load``."""
        iv = self.interval
        if self.value is None:
            return "n/a"
        v = _num(self.value, self.unit, self.digits)
        if iv is not None:
            v += " " + (f"[{_num(iv.lo, self.unit, self.digits)}, "
                        f"{_num(iv.hi, self.unit, self.digits)}]"
                        if self.unit in ("diff", "%")
                        else iv.bounds(lambda x: f"{x:.{self.digits}f}", self.ref))
        tags = [t for t in (self.short_verdict if not self.decided else "",
                            "under load" if self.under_load else "") if t]
        out = ", ".join([v, *tags])
        return out.replace("|", "\\|") if markdown else out

    # ---- the renderer --------------------------------------------------------------------

    def figure(self) -> str:
        """``1.13x [0.88, 1.44], 3 repeats``: the value and its interval."""
        if self.value is None:
            return "n/a"
        v = _num(self.value, self.unit, self.digits)
        iv = self.interval
        if iv is None:
            return v
        if self.unit in ("diff", "%"):
            bounds = f"[{_num(iv.lo, self.unit, self.digits)}, {_num(iv.hi, self.unit, self.digits)}]"
        else:
            bounds = iv.bounds(lambda x: f"{x:.{self.digits}f}", self.ref)
            if iv.too_wide(self.ref):  # "(spread too large, 2 repeats)" names them
                return f"{v} {bounds}"
        if self.evidence:
            reps = self.evidence
        elif self.repeats and len(set(self.repeats)) > 1:
            reps = f"{'/'.join(map(str, self.repeats))} repeats a side"
        else:
            reps = iv.repeats_text
        return f"{v} {bounds}, {reps}"

    def gap_text(self) -> str:
        """A model's figure beside the measured one: both shown, neither blamed."""
        if self.model is None or self.value is None:
            return ""
        m = _num(self.model, self.unit, self.digits)
        return f"{self.model_name}: {m}, " + disagreement(self.value, self.model,
                                                           "the measurement", self.model_name)

    def parts(self) -> list[tuple[str, str]]:
        """The words in order, each tagged by its role (``figure``, ``verdict``, ``detail``,
        ``model``, ``load``): every format writes exactly these words."""
        out = [("subject", self.subject), ("figure", self.figure()),
               ("verdict", self.verdict)]
        if self.detail:
            out.append(("detail", self.detail))
        if self.gap_text():
            out.append(("model", self.gap_text()))
        caveat = load_caveat(self.sources)
        if caveat:
            out.append(("load", caveat))
        return [(k, v) for k, v in out if v]

    def text(self) -> str:
        """The terminal's line: ``2 processes: 1.13x [0.88, 1.44], 3 repeats: not resolved
        (the interval includes 1x); measured under load: ...``."""
        return _join(self.parts())

    def markdown(self) -> str:
        """The same words for Markdown (a table cell too: ``|`` escaped), the load caveat in
        italics."""
        def md(k: str, v: str) -> str:
            v = v.replace("|", "\\|").replace("*", "\\*")
            return f"*{v}*" if k == "load" else v

        return _join([(k, md(k, v)) for k, v in self.parts()])

    def html(self) -> str:
        """The same words for HTML, escaped, the load caveat marked."""
        def h(k: str, v: str) -> str:
            v = _html.escape(v)
            return f'<em class="load">{v}</em>' if k == "load" else v

        return _join([(k, h(k, v)) for k, v in self.parts()])

    def to_dict(self) -> dict[str, Any]:
        """The JSON: every piece of evidence, and the same words as the other formats."""
        iv = self.interval
        return {"kind": self.kind, "subject": self.subject, "value": self.value,
                "unit": self.unit, "interval": iv.to_dict() if iv is not None else None,
                "ref": self.ref, "band": list(self.band) if self.band else None,
                "repeats": list(self.repeats) or ([iv.n] if iv is not None else []),
                "sources": [s.to_dict() for s in self.sources],
                "under_load": self.under_load, "pairing": self.pairing,
                "rule": self.rule, "decided": self.decided, "verdict": self.verdict,
                "model": self.model, "text": self.text()}


def _join(parts: list[tuple[str, str]]) -> str:
    """``subject: figure: verdict; detail; model; load``."""
    head = [v for k, v in parts if k in ("subject", "figure", "verdict")]
    tail = [v for k, v in parts if k not in ("subject", "figure", "verdict")]
    return "; ".join([": ".join(head), *tail])


def resolved_time(subject: str, fig: dict[str, Any] | None, ms: Any, tail: str = "") -> str:
    """A time shown only with an interval that excludes 0: ``wrapper overhead 9.8 ms [6.1,
    12.0] over 7 pairs per step``, else ``wrapper overhead: not resolved (the interval
    includes 0: 107.6 ms [-12.0, 230.4] over 7 pairs)``; ``no interval`` without one
    (``fig``: ``{difference_s or median_s, interval_s: [lo, hi], pairs or steps}``; ``ms``
    formats seconds)."""
    fig = fig or {}
    value = fig.get("median_s", fig.get("difference_s"))
    iv = fig.get("interval_s")
    if value is None or not iv:
        return f"{subject}: {NO_INTERVAL}, not shown"
    lo, hi = iv
    n = fig.get("steps") or fig.get("pairs")
    over = f" over {n} {'steps' if fig.get('steps') else 'pairs'}" if n else ""
    figure = f"{ms(value)} [{ms(lo)}, {ms(hi)}]{over}"
    if lo > 0:
        return f"{subject} {figure}{tail}"
    return f"{subject}: {NOT_RESOLVED} (the interval includes 0: {figure})"


def undecided(iv: Interval | None, ref: float, what: str,
              need: int | None | str = "from ref") -> str:
    """``inconclusive: 1.04x [0.91, 1.19], 3 repeats; about 12 repeats would decide``.
    ``need`` (the repeats that would decide; None: more than ``MAX_REPEATS_SUGGESTED``)
    replaces ``repeats_to_decide(iv, ref)`` where the verdict hangs on more than one
    interval."""
    if iv is None:
        return f"{INCONCLUSIVE}: {what} has no spread (too few timed steps)"
    head = INCONCLUSIVE if iv.enough_repeats else one_repeat_text(iv.n)
    if need == "from ref":
        need = repeats_to_decide(iv, ref)
    tail = (f"; about {need} repeats would decide it" if need
            else f"; more than {MAX_REPEATS_SUGGESTED} repeats would be needed, or the "
                 "difference is smaller than the noise" if iv.enough_repeats
            # one repeat measured no noise between runs: nothing is said of it
            else f"; {MIN_REPEATS_TO_DECIDE} or more repeats measure the noise between runs "
                 "and say how many would decide it")
    if iv.too_wide(ref):  # the repeats said once, not in the head too
        return f"{INCONCLUSIVE}: {what}: {iv.repeats_text}, spread too large{tail}"
    return f"{head}: {what} {iv.text(ref=ref)}{tail}"


def ranking(what: str, body: str, tied: list[str], ahead: list[str] | None = None,
            repeats: int = 2) -> str:
    """``Fastest: <body>``, with the intervals that put it ahead of the others (``ahead``),
    or inconclusive with the others it cannot be told apart from (``tied``); with no other
    (the only one of its group that finished) inconclusive, never a ranking of one. With one
    repeat (``repeats``: the fewest behind any interval it is held against) every other is
    "not decided against", never "not told apart from": an interval clear of 1 beside it
    would contradict that, and one repeat decides nothing anyway."""
    each = "each: that batch size's figure / this one's"
    if not tied and not ahead:  # a ranking of one: nothing was compared
        return (f"{what}: {INCONCLUSIVE}: {body}; no other batch size of its group finished: "
                "nothing to compare.")
    if not tied:
        return f"{what}: {body}, ahead of " + "; ".join(ahead or []) + f" ({each})."
    if repeats >= MIN_REPEATS_TO_DECIDE:
        return (f"{what}: {INCONCLUSIVE}: {body}, {NOT_TOLD_APART} " + "; ".join(tied)
                + f" ({each}).")
    return (f"{what}: {one_repeat_text(repeats)}: {body}, {NOT_DECIDED_AGAINST} "
            + "; ".join(tied) + f" ({each}; one repeat cannot see the drift between runs: "
            f"{MIN_REPEATS_TO_DECIDE} or more decide).")


def tied_words(one_repeat: bool) -> str:
    """How a pick names the others it is not ahead of: ``not decided against (1 repeat)``
    with one repeat, else ``not told apart from``."""
    return f"{NOT_DECIDED_AGAINST} (1 repeat)" if one_repeat else NOT_TOLD_APART


def render(claim: Claim, form: str) -> str:
    """``claim`` in one of the formats: ``text``, ``markdown``, ``html`` (JSON: ``to_dict``)."""
    if form == "text":
        return claim.text()
    if form == "markdown":
        return claim.markdown()
    if form == "html":
        return claim.html()
    raise ValueError(f"no format {form!r}: text, markdown or html")
