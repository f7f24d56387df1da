"""Intervals over repeats: the 95% interval of a ratio of two points, the repeats that would
decide it, and the differences of accuracies over seeds.

No torch, no I/O: pure functions over the lists of figures that repeats give. The figures
themselves are core/metrics.py's, which re-exports every name here, so a figure and its
interval are read through one module (``M.speedup``, ``M.ratio_interval``).

An experiment repeats every point (``--repeats N``), interleaved (A B C A B C), each repeat in
its own process. The ratio of two points is estimated from the repeats paired by repeat index:
``r_i = b_i / a_i``; its 95% interval is a t-interval on ``log r_i`` (ratios are
multiplicative; the log keeps the interval symmetric in "faster" and "slower"), never narrower
than the runs' own within-run spread. With one repeat only the within-run spread is known, and
process-to-process noise (10-18% on a loaded 2-core machine) is not; the half-width is then at
least ``SINGLE_REPEAT_NOISE_REL``. Two sets of repeats not run side by side (two sessions,
two machines) get Welch's interval (``unpaired_ratio_interval``), as does torch.compile
against eager in one process (``compile_vs_eager``).

A verdict is made only when its interval excludes the alternative (``Interval.above`` /
``below``); otherwise it is "inconclusive", with the spread and the repeats that would decide
it (``repeats_to_decide``). The verdict's words are core/claim.py's (``claim.undecided``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CONFIDENCE = 0.95
# With one repeat the interval's half-width is at least this relative spread: the
# process-to-process noise of a bare loop against itself measured on the reference machine
# (ratios 0.94-1.18, docs/VERDICTS.md). A second process is the only way to see it.
SINGLE_REPEAT_NOISE_REL = 0.10
MAX_REPEATS_SUGGESTED = 30
# A verdict needs at least this many repeats a side: one repeat's within-run spread cannot see
# the drift between runs (load that comes and goes), so its interval decides nothing
MIN_REPEATS_TO_DECIDE = 2


def t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    """Two-sided Student-t quantile: scipy's ``stdtrit``, which ``scipy.stats.t.ppf`` calls,
    without importing ``scipy.stats`` (half a second of every process that reports)."""
    from scipy.special import stdtrit  # heavy: scipy: only where an interval is computed

    return float(stdtrit(df, 0.5 + confidence / 2))


TEXT_BOUND_MIN, TEXT_BOUND_MAX = 0.01, 100.0  # Interval.text prints bounds beyond these as such
# An interval of a ratio wider than this factor (hi / lo) that holds its reference says
# nothing a user could act on: "1.04x [0.03, 39.44]" (two noisy repeats, t = 12.7) allows
# anything from 30x slower to 40x faster. Every text of an interval (Interval.text, .short,
# .bounds) shows such an interval as "spread too large" with its repeats, never its numbers;
# a factor of 4 is "from half to double", already wider than any difference the verdicts
# act on (docs/VERDICTS.md).
MEANINGFUL_SPAN = 4.0


@dataclass(frozen=True)
class Interval:
    """A ratio B/A with its 95% interval. ``n`` repeats (pairs) stand behind it."""

    estimate: float
    lo: float
    hi: float
    n: int
    method: str
    log_sd: float | None = None  # spread of the paired log ratios (None with one repeat)
    # the runs' own spread on the log scale for one pair (the floor of the half-width is
    # this / sqrt(n)); None when unknown
    within_log_h: float | None = None
    # Welch intervals: degrees of freedom per repeat on each side (n per side -> 2n - 2)
    welch: bool = False

    @property
    def enough_repeats(self) -> bool:
        """Enough repeats stand behind it for a verdict (``MIN_REPEATS_TO_DECIDE``)."""
        return self.n >= MIN_REPEATS_TO_DECIDE

    def above(self, ref: float) -> bool:
        """The whole interval lies above ``ref``, with enough repeats behind it to say so
        (one repeat never decides)."""
        return self.enough_repeats and self.lo > ref

    def below(self, ref: float) -> bool:
        return self.enough_repeats and self.hi < ref

    def decides(self, ref: float) -> bool:
        return self.above(ref) or self.below(ref)

    def scaled(self, k: float) -> Interval:
        """The interval of ``k`` x the ratio (e.g. efficiency = speedup / N)."""
        return Interval(self.estimate * k, self.lo * k, self.hi * k, self.n, self.method,
                        self.log_sd, self.within_log_h, self.welch)

    @property
    def within_run_bound(self) -> bool:
        """The runs' own spread (their median steps' uncertainty: stalls, waits inside a
        run), not the spread between repeats, set this interval's width."""
        if self.within_log_h is None or self.estimate <= 0 or self.hi <= self.estimate:
            return False
        floor = self.within_log_h / math.sqrt(self.n) if self.n >= 2 else self.within_log_h
        return floor >= math.log(self.hi / self.estimate) * (1.0 - 1e-9)

    @property
    def repeats_text(self) -> str:
        return f"{self.n} repeat{'s' if self.n != 1 else ''}"

    def too_wide(self, ref: float | None = 1.0) -> bool:
        """Too wide to mean anything: a bound not positive or not finite (a ratio cannot be),
        or wider than ``MEANINGFUL_SPAN`` with ``ref`` inside (None: whatever it holds). An
        interval that excludes its reference says at least that much, however wide."""
        if not (math.isfinite(self.lo) and math.isfinite(self.hi)) or self.lo <= 0:
            return True
        if self.hi / self.lo <= MEANINGFUL_SPAN:
            return False
        # a reference at or below 0 (a bar no ratio can pass) is no reference
        return ref is None or ref <= 0 or self.lo < ref < self.hi

    def text(self, unit: str = "x", digits: int = 2, ref: float | None = 1.0) -> str:
        """``1.62x [1.41, 1.86], 3 repeats``; ``inconclusive: 2 repeats, spread too large``
        for an interval too wide to mean anything (``too_wide``)."""
        if self.too_wide(ref):  # claim.INCONCLUSIVE's word (claim imports this module)
            return f"inconclusive: {self.repeats_text}, spread too large"
        f = f"{{:.{digits}f}}"
        return f"{f.format(self.estimate)}{unit} {self.bounds(f.format, ref)}, {self.repeats_text}"

    def short(self, unit: str = "x", digits: int = 2, ref: float | None = 1.0) -> str:
        """``1.62x [1.41, 1.86]`` (a table cell); ``1.04x (spread too large, 2 repeats)``."""
        f = f"{{:.{digits}f}}"
        return f"{f.format(self.estimate)}{unit} {self.bounds(f.format, ref)}"

    def bounds(self, show: Callable[[float], str] | None = None,
               ref: float | None = 1.0) -> str:
        """``[1.41, 1.86]`` with each bound as ``show`` writes it (a growth: ``[-12%, +4%]``);
        ``(spread too large, 2 repeats)`` for an interval too wide to mean anything."""
        if self.too_wide(ref):
            return f"(spread too large, {self.repeats_text})"
        show = show or "{:.2f}".format
        # a bound beyond 100x either way says only "unbounded": printed as such
        lo = show(self.lo) if self.lo >= TEXT_BOUND_MIN else f"<{TEXT_BOUND_MIN:g}"
        hi = show(self.hi) if self.hi <= TEXT_BOUND_MAX else f">{TEXT_BOUND_MAX:g}"
        return f"[{lo}, {hi}]"

    def to_dict(self) -> dict[str, float | int | str | None]:
        return {"estimate": self.estimate, "lo": self.lo, "hi": self.hi, "n": self.n,
                "method": self.method, "log_sd": self.log_sd,
                "within_log_h": self.within_log_h, "welch": self.welch}


INTERVAL_FIELDS = ("estimate", "lo", "hi", "n", "method", "log_sd", "within_log_h", "welch")


def interval_of(d: object) -> Interval | None:
    """An interval as a record stores it (``Interval.to_dict``); None for anything else (a
    record written before repeats, a damaged block)."""
    if not isinstance(d, Mapping) or not {"estimate", "lo", "hi", "n"} <= set(d):
        return None
    vals = {"method": "", **{k: d[k] for k in INTERVAL_FIELDS if k in d}}
    if not all(isinstance(vals[k], (int, float)) and not isinstance(vals[k], bool)
               for k in ("estimate", "lo", "hi", "n")):
        return None
    return Interval(**vals)


def _log_halfwidth_within(rel_cis: Sequence[float | None]) -> float | None:
    """The within-run spread of a ratio of two medians: the sum of the two relative
    half-widths (as in ``compare``), on the log scale. None when one is unknown."""
    if any(c is None or not math.isfinite(c) for c in rel_cis):
        return None
    return sum(math.log1p(c) for c in rel_cis if c is not None)


def ratio_interval(a: Sequence[float | None], b: Sequence[float | None],
                   a_rel_ci: Sequence[float | None] = (), b_rel_ci: Sequence[float | None] = (),
                   confidence: float = CONFIDENCE) -> Interval | None:
    """The interval of B / A from repeats paired by position (``a[i]`` with ``b[i]``).

    Pairs with a missing or non-positive figure are dropped. Two or more pairs: a
    t-interval on the log ratios, never narrower than the within-run spread when it is known.
    One pair: the within-run spread (the medians' relative CI half-widths, summed), widened to
    at least ``SINGLE_REPEAT_NOISE_REL``; None when a within-run spread is unknown."""
    pairs = [(x, y, i) for i, (x, y) in enumerate(zip(a, b, strict=False))
             if x is not None and y is not None and x > 0 and y > 0]
    if not pairs:
        return None
    logs = [math.log(y / x) for x, y, _ in pairs]
    n = len(logs)
    m = sum(logs) / n
    within = [_log_halfwidth_within(_at(a_rel_ci, i) + _at(b_rel_ci, i)) for _, _, i in pairs]
    known = [w for w in within if w is not None]
    within_h = sum(known) / len(known) if known else None
    if n >= 2:
        sd = math.sqrt(sum((v - m) ** 2 for v in logs) / (n - 1))
        h = t_quantile(n - 1, confidence) * sd / math.sqrt(n)
        if within_h is not None:
            h = max(h, within_h / math.sqrt(n))
        method = f"paired t on log ratios, {n} repeats"
    else:
        if within_h is None:
            return None
        sd = None
        h = max(within_h, math.log1p(SINGLE_REPEAT_NOISE_REL))
        method = "1 repeat: within-run spread, at least the process-to-process noise"
    return Interval(math.exp(m), math.exp(m - h), math.exp(m + h), n, method, sd, within_h)


def unpaired_ratio_interval(a: Sequence[float | None], b: Sequence[float | None],
                            confidence: float = CONFIDENCE) -> Interval | None:
    """The interval of B / A from two sets of repeats that were not run side by side (two
    sessions, two machines): Welch's t on the log values, so the ratio of geometric means.
    None with fewer than two positive values on a side. ``n`` is the smaller side, and
    ``log_sd`` the spread that, over ``n`` repeats a side, gives this half-width (for
    ``repeats_to_decide``)."""
    la = [math.log(x) for x in a if x is not None and x > 0]
    lb = [math.log(x) for x in b if x is not None and x > 0]
    got = mean_difference_interval(la, lb, confidence)
    if got is None:
        return None
    d, lo, hi = got
    sa, sb = sample_sd(la) or 0.0, sample_sd(lb) or 0.0
    return Interval(math.exp(d), math.exp(lo), math.exp(hi), min(len(la), len(lb)),
                    f"Welch t on log values, {len(la)} and {len(lb)} repeats",
                    math.sqrt(sa * sa + sb * sb), welch=True)


def _at(seq: Sequence[float | None], i: int) -> tuple[float | None]:
    return (seq[i] if i < len(seq) else None,)


def repeats_to_decide(iv: Interval, ref: float, confidence: float = CONFIDENCE) -> int | None:
    """How many repeats would let an interval with this spread exclude ``ref``, assuming the
    estimate stays where it is. None when even ``MAX_REPEATS_SUGGESTED`` would not."""
    if iv.decides(ref):
        return iv.n
    if ref <= 0 or iv.estimate == ref:
        return None
    for n in range(max(2, iv.n + 1), MAX_REPEATS_SUGGESTED + 1):
        if projected(iv, n, confidence).decides(ref):
            return n
    return None


def projected(iv: Interval, n: int, confidence: float = CONFIDENCE) -> Interval:
    """The interval ``iv`` would have after ``n`` repeats (a side, for Welch), if its estimate,
    the spread of its repeats and its runs' own spread stayed as measured. Without a spread
    between repeats (one repeat), the single-repeat noise, as ``repeats_to_decide`` assumes;
    a spread of zero stays zero (device memory, identical every repeat)."""
    sd = (iv.log_sd if iv.log_sd is not None
          else math.log1p(SINGLE_REPEAT_NOISE_REL) * math.sqrt(2))
    df = 2 * n - 2 if iv.welch else n - 1
    h = t_quantile(max(1, df), confidence) * sd / math.sqrt(n)
    if iv.within_log_h is not None:
        h = max(h, iv.within_log_h / math.sqrt(n))
    return Interval(iv.estimate, iv.estimate * math.exp(-h), iv.estimate * math.exp(h), n,
                    iv.method, iv.log_sd, iv.within_log_h, iv.welch)


def mean_difference_interval(a: Sequence[float], b: Sequence[float],
                             confidence: float = CONFIDENCE) -> tuple[float, float, float] | None:
    """(mean(b) - mean(a), lo, hi): Welch's interval for unpaired samples (e.g. accuracies
    over seeds). None with fewer than two values on a side."""
    if len(a) < 2 or len(b) < 2:
        return None
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    va = sum((x - ma) ** 2 for x in a) / (len(a) - 1)
    vb = sum((x - mb) ** 2 for x in b) / (len(b) - 1)
    se2 = va / len(a) + vb / len(b)
    d = mb - ma
    if se2 == 0:
        return d, d, d
    df = se2 ** 2 / ((va / len(a)) ** 2 / (len(a) - 1) + (vb / len(b)) ** 2 / (len(b) - 1)
                     or 1e-300)
    h = t_quantile(max(1, int(df)), confidence) * math.sqrt(se2)
    return d, d - h, d + h


def sample_sd(xs: Sequence[float]) -> float | None:
    """The sample standard deviation (n - 1); None with fewer than two values."""
    if len(xs) < 2:
        return None
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def paired_difference_interval(a: Sequence[float], b: Sequence[float],
                               confidence: float = CONFIDENCE
                               ) -> tuple[float, float, float, float] | None:
    """(mean(b_i - a_i), lo, hi, sd of the differences) over pairs that share what moves the
    figure (accuracies on 1 and N processes of one seed share the seed, the initial weights
    and the split): a paired t interval on the differences. None with fewer than two
    pairs."""
    if len(a) != len(b):
        raise ValueError(f"{len(a)} against {len(b)} values: not pairs")
    d = [y - x for x, y in zip(a, b, strict=True)]
    if len(d) < 2:
        return None
    m = sum(d) / len(d)
    sd = sample_sd(d) or 0.0
    h = t_quantile(len(d) - 1, confidence) * sd / math.sqrt(len(d))
    return m, m - h, m + h, sd


def repeats_to_decide_paired(diff: float, sd: float, tol: float, n: int) -> int | None:
    """Pairs that would put the paired interval of ``diff`` wholly inside or wholly outside
    +/- ``tol``, if the mean difference and the spread of the differences stay as measured."""
    gap = tol - abs(diff) if abs(diff) < tol else abs(diff) - tol
    if gap <= 0:
        return None
    if sd <= 0:
        return max(2, n)
    for m in range(max(2, n + 1), MAX_REPEATS_SUGGESTED + 1):
        if t_quantile(m - 1) * sd / math.sqrt(m) < gap:
            return m
    return None


def compile_vs_eager(compiled_fb: Sequence[float], eager_fb: Sequence[float],
                     step_s: float | None, compile_s: float | None,
                     paired_fb: Sequence[float] = ()) -> dict[str, Any] | None:
    """torch.compile against eager, one process (train/eager.py): the speedup of forward +
    backward; with ``paired_fb`` (a compiled pass before each eager one, interleaved) the
    geometric mean of the pairs' ratios with its paired interval (``ratio_interval``: each
    pair saw the same load), else the compiled window's steps against the eager passes after
    it (the ratio of their geometric means with its Welch interval, ``paired`` False: load
    that changed between the two is in it; of the medians with one value a side); the
    eager step
    projected (the compiled median step with its forward + backward replaced by the eager
    one's: the optimizer and data phases are not compiled), the whole step's speedup on that
    basis, and the steps that pay back the compile time (compile time / the time a step
    saves; None when compiling saved nothing). None without samples on both sides."""
    if not compiled_fb or not eager_fb:
        return None
    fc, fe = _median(compiled_fb), _median(eager_fb)
    paired = len(paired_fb) == len(eager_fb) >= MIN_REPEATS_TO_DECIDE
    iv = (ratio_interval(list(paired_fb), list(eager_fb)) if paired
          else unpaired_ratio_interval(list(compiled_fb), list(eager_fb)))
    out: dict[str, Any] = {
        "compiled_fwd_bwd_s": fc, "eager_fwd_bwd_s": fe,
        "fwd_bwd_speedup": iv.estimate if iv else fe / fc,
        "fwd_bwd_speedup_interval": [iv.lo, iv.hi] if iv else None,
        "paired": paired, "pairs": len(eager_fb) if paired else 0,
        "compiled_steps": len(compiled_fb), "eager_passes": len(eager_fb),
        "eager_step_s_projected": None, "step_speedup_projected": None, "payback_steps": None}
    if step_s:
        eager_step = step_s - fc + fe
        saved = eager_step - step_s
        out.update(eager_step_s_projected=eager_step, step_speedup_projected=eager_step / step_s,
                   payback_steps=(math.ceil(compile_s / saved - 1e-9) if compile_s is not None
                                  and saved > 0 else None))  # 1e-9: float noise, not a step
    return out


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
