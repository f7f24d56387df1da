"""The gradient noise scale (McCandlish et al. 2018, "An Empirical Model of Large-Batch
Training", appendix A), from squared gradient norms measured in the step. Torch-free.

Each timed step gives two squared norms of the gradient of the mean loss: ``|G_small|^2``
over ``b_small`` samples and ``|G_big|^2`` over ``b_big`` samples. With the true gradient
``G`` and the per-sample covariance ``Sigma``, ``E|G_B|^2 = |G|^2 + tr(Sigma) / B``, so

    |G|^2     ~  (b_big |G_big|^2 - b_small |G_small|^2) / (b_big - b_small)
    tr(Sigma) ~  (|G_small|^2 - |G_big|^2) / (1 / b_small - 1 / b_big)

are unbiased estimates, one pair per step. Under DDP the small gradient is each rank's own
(batch b, averaged over the ranks) and the big one the all-reduced gradient (batch N x b,
``measure/comm/hook.py``); on one process the step accumulates two halves of its batch (``--gns``):
the halves' gradients are the small ones (b / 2 samples) and their mean the big one.

One step's estimates are noisy (the |G|^2 estimate is often negative), so, as the paper
recommends, numerator and denominator are averaged separately before their ratio is taken;
``b_simple``, its block-bootstrap interval, the series over training, B_noise at the run's end
and along the path to a target are docs/CRITICAL_BATCH.md's.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scaleprobe.core.errors import ConfigError
from scaleprobe.core.run_parts import Gns, GnsPoint, GnsSamples
from scaleprobe.core.traits import traits_of

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000
SERIES_BLOCKS = 20  # B_noise over training: at most this many points
MIN_BLOCK_STEPS = 10  # each point averages at least this many steps
SMOOTHING = ("ratio of the means over the timed steps: tr(Sigma) and |G|^2 estimates averaged "
             "separately, then divided (McCandlish et al. 2018, appendix A.1)")
INTERVAL_METHOD = ("95% moving-block bootstrap over the timed steps (blocks of ~sqrt(steps) "
                   "steps, 2000 resamples, fixed seed)")
METHODS = {
    "ddp_hook": "DDP comm hook: each rank's gradient before its all-reduce (batch b, averaged "
                "over the ranks) and the all-reduced gradient (batch N x b)",
    "micro_batches": "two micro-batches per step: each half's gradient (batch b/2, averaged "
                     "over the halves) and the whole batch's (batch b)",
}


# on by default under DDP with 2+ processes: the hook's two norms per bucket cost less than the
# runs' own noise on the CPU (docs/BENCHMARKS.md, benchmarks/gns_overhead.py)
ON_BY_DEFAULT_UNDER_DDP = True
MICRO_BATCH_TASKS = ("classification", "lm")  # a half batch is a batch (no triplets, no boxes)


def mode(cfg: Any) -> str | None:
    """How this run measures the noise scale (a ``METHODS`` key), or None: ``measure.gns``
    on, or left unset under DDP with 2+ processes (``ON_BY_DEFAULT_UNDER_DDP``)."""
    tr = traits_of(cfg.dist.strategy)
    want = cfg.measure.gns
    if want is False or cfg.script.path is not None:
        return None
    if tr.gns_from_hook and cfg.world_size > 1:
        return "ddp_hook" if want or ON_BY_DEFAULT_UNDER_DDP else None
    if want and tr.gns_micro_batches:
        return "micro_batches"
    return None


def check_config(cfg: Any) -> None:
    """``--gns`` where it cannot be measured: one line that says why (config_rules)."""
    if cfg.measure.gns is not True:
        return
    if cfg.script.path is not None:
        raise ConfigError("--gns measures the built-in training loop; not under wrap")
    got = mode(cfg)
    if got is None:
        raise ConfigError(f"--gns is measured under single, dp and ddp, not --strategy "
                          f"{cfg.dist.strategy} (its gradients after backward are not the "
                          "process's whole batch)")
    if got == "micro_batches":
        if cfg.task.task not in MICRO_BATCH_TASKS:
            raise ConfigError(f"--gns on one process splits each batch in two halves; --task "
                              f"{cfg.task.task} needs its whole batch (use ddp with --nproc 2+)")
        b = cfg.per_device_batch()
        if b % 2:
            raise ConfigError(f"--gns on one process splits each batch in two halves: give an "
                              f"even batch (got {b})")


def grad_sq(small: float, big: float, b_small: float, b_big: float) -> float:
    """The unbiased estimate of |G|^2 from one pair of squared norms."""
    return (b_big * big - b_small * small) / (b_big - b_small)


def trace_sigma(small: float, big: float, b_small: float, b_big: float) -> float:
    """The unbiased estimate of tr(Sigma) (per-sample covariance) from one pair."""
    return (small - big) / (1.0 / b_small - 1.0 / b_big)


def per_step(small: Sequence[float], big: Sequence[float], b_small: float, b_big: float
             ) -> tuple[list[float], list[float]]:
    """(|G|^2 estimates, tr(Sigma) estimates), one per step."""
    if not b_big > b_small > 0:
        raise ValueError(f"need b_big > b_small > 0, got {b_small}, {b_big}")
    g = [grad_sq(s, b, b_small, b_big) for s, b in zip(small, big, strict=True)]
    t = [trace_sigma(s, b, b_small, b_big) for s, b in zip(small, big, strict=True)]
    return g, t


def ratio(trace: Sequence[float], g2: Sequence[float]) -> float | None:
    """tr(Sigma) / |G|^2 over the steps (means taken separately); None when the |G|^2
    estimate is not positive (the noise swamps the signal at this many steps)."""
    den = sum(g2)
    if not g2 or den <= 0:
        return None
    return sum(trace) / den


def block_bootstrap(trace: Sequence[float], g2: Sequence[float],
                    resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
                    ) -> tuple[float, float] | None:
    """The 95% interval of ``ratio`` by a circular moving-block bootstrap; an upper bound
    of ``inf`` where more than 2.5% of the resamples had no positive |G|^2. None below 4
    steps."""
    n = len(g2)
    if n < 4:
        return None
    block = max(1, round(math.sqrt(n)))
    k = math.ceil(n / block)
    # circular block sums: O(1) per block from the doubled prefix sums
    pt, pg = [0.0], [0.0]
    for i in range(2 * n):
        pt.append(pt[-1] + trace[i % n])
        pg.append(pg[-1] + g2[i % n])
    rng = random.Random(seed)
    out = []
    for _ in range(resamples):
        st = sg = 0.0
        for _b in range(k):
            j = rng.randrange(n)
            st += pt[j + block] - pt[j]
            sg += pg[j + block] - pg[j]
        out.append(st / sg if sg > 0 else math.inf)
    out.sort()
    tail = (1.0 - CONFIDENCE) / 2
    lo = out[int(tail * resamples)]
    hi = out[min(resamples - 1, int((1.0 - tail) * resamples))]
    return lo, hi


@dataclass(frozen=True)
class Block:
    first_step: int  # the block's first step (index in the run's steps)
    steps: int
    b_simple: float | None


def blocks(trace: Sequence[float], g2: Sequence[float], first_step: int = 0,
           most: int = SERIES_BLOCKS, min_steps: int = MIN_BLOCK_STEPS) -> list[Block]:
    """The ratio over consecutive blocks of steps (at most ``most`` blocks of at least
    ``min_steps`` steps; the last block takes the remainder). A block whose |G|^2 estimate
    is not positive (the noise swamps it over so few steps) is merged with its smaller
    neighbour until every block has one, or one block is left."""
    n = len(g2)
    count = max(1, min(most, n // max(1, min_steps)))
    size = n // count
    cuts = [i * size for i in range(count)] + [n]
    spans = [[cuts[i], cuts[i + 1], sum(trace[cuts[i]:cuts[i + 1]]),
              sum(g2[cuts[i]:cuts[i + 1]])] for i in range(count)]
    while len(spans) > 1:
        bad = next((i for i, sp in enumerate(spans) if sp[3] <= 0), None)
        if bad is None:
            break
        if bad == 0:
            j = 1
        elif bad == len(spans) - 1:
            j = bad - 1
        else:
            j = bad - 1 if spans[bad - 1][1] - spans[bad - 1][0] <= \
                spans[bad + 1][1] - spans[bad + 1][0] else bad + 1
        a, b = sorted((bad, j))
        spans[a:b + 1] = [[spans[a][0], spans[b][1], spans[a][2] + spans[b][2],
                           spans[a][3] + spans[b][3]]]
    return [Block(first_step + int(a), int(b - a), t / g if g > 0 else None)
            for a, b, t, g in spans]


def path_average(series: Sequence[Block], batch: float) -> float | None:
    """B_noise along the path: the blocks' ratios weighted by their steps at the smallest
    batch, steps / (1 + B_noise / batch) (module docstring). None when a block has no
    positive |G|^2 estimate."""
    ratios = [b.b_simple for b in series]
    if not series or any(r is None or r < 0 for r in ratios):
        return None
    known = [r or 0.0 for r in ratios]  # none is None here
    w = [b.steps / (1.0 + r / batch) for b, r in zip(series, known, strict=True)]
    return sum(wi * r for wi, r in zip(w, known, strict=True)) / sum(w)


def combine_ranks(small: Sequence[Sequence[float]], big: Sequence[Sequence[float]]
                  ) -> tuple[list[float], list[float]]:
    """Per step, the mean over the ranks of their small squared norms and of their big ones
    (the ranks' steps are the same steps: DDP moves in lockstep); steps not every rank has
    are dropped."""
    n = min((len(s) for s in small), default=0)
    n = min([n] + [len(b) for b in big])
    s = [sum(r[i] for r in small) / len(small) for i in range(n)]
    b = [sum(r[i] for r in big) / len(big) for i in range(n)]
    return s, b


def summarize(samples: Sequence[GnsSamples], global_batch: int | None
              ) -> tuple[Gns | None, dict[str, str]]:
    """The run's ``Gns`` from every rank's samples, and the reasons for its null figures
    (``{"gns": why}`` when there is none)."""
    got = [s for s in samples if s.small_sq and s.big_sq]
    if not got:
        reason = next((s.reason for s in samples if s.reason), None)
        return None, {"gns": reason or "no timed step measured the squared gradient norms"}
    head = got[0]
    if not (head.b_small and head.b_big and head.b_big > head.b_small):
        return None, {"gns": f"batches of {head.b_small} and {head.b_big} samples: the big "
                             "gradient needs more samples than the small one"}
    small, big = combine_ranks([s.small_sq for s in got], [s.big_sq for s in got])
    g2, tr = per_step(small, big, head.b_small, head.b_big)
    n = len(g2)
    first = head.first_step or 0
    batch = global_batch or head.b_big
    series = blocks(tr, g2, first)
    out = Gns(b_simple=ratio(tr, g2), grad_sq=sum(g2) / n, trace_sigma=sum(tr) / n, steps=n,
              b_small=head.b_small, b_big=head.b_big, global_batch=global_batch,
              method=head.method, method_text=METHODS.get(head.method or ""),
              smoothing=SMOOTHING, interval_method=INTERVAL_METHOD,
              series=[GnsPoint(step=b.first_step, steps=b.steps, samples=b.first_step * batch,
                               b_simple=b.b_simple) for b in series])
    why: dict[str, str] = {}
    if out.b_simple is None:
        why["gns.b_simple"] = ("the |G|^2 estimate is not positive over the timed steps: the "
                               "gradient noise swamps it at this many steps")
    iv = block_bootstrap(tr, g2)
    if iv is None:
        why["gns.b_simple_lo"] = why["gns.b_simple_hi"] = "fewer than 4 timed steps"
    else:
        out.b_simple_lo = iv[0] if math.isfinite(iv[0]) else None
        out.b_simple_hi = iv[1] if math.isfinite(iv[1]) else None
        if out.b_simple_hi is None:
            why["gns.b_simple_hi"] = ("unbounded: more than 2.5% of the resamples had no "
                                      "positive |G|^2 estimate")
        if out.b_simple_lo is None:
            why["gns.b_simple_lo"] = why.get("gns.b_simple_hi", "unbounded")
    out.b_noise_path = path_average(series, batch)
    if out.b_noise_path is None:
        why["gns.b_noise_path"] = "a block of steps has no positive |G|^2 estimate"
    return out, why


def _n(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3g}" if abs(v) < 100 else f"{v:,.0f}"


def regime(batch: float, b_noise: float, lo: float | None = None, hi: float | None = None
           ) -> str:
    """Where a batch lies against B_noise (McCandlish et al.'s model): ``below`` (a larger
    batch cuts the steps nearly in proportion), ``above`` (it mostly costs samples) or
    ``near``; against the interval's ends where one is given."""
    lo = b_noise if lo is None else lo
    hi = b_noise if hi is None else hi
    if batch * 2 <= lo:
        return "below"
    if batch >= 2 * hi:
        return "above"
    return "near"


REGIME_TEXT = {"below": "a larger batch cuts the steps nearly in proportion",
               "near": "a larger batch still cuts steps, at a growing cost in samples",
               "above": "a larger batch mostly costs samples, not steps"}


def summary_line(g: Gns | None, reasons: dict[str, str]) -> str | None:
    """One line for the terminal: B_simple with its interval, the two estimates, how it was
    measured and where the run's batch lies against it; or why it is null."""
    if g is None:
        why = reasons.get("gns")
        return f"gradient noise scale: not measured ({why})" if why else None
    if g.b_simple is None:
        return f"gradient noise scale: {reasons.get('gns.b_simple', 'not measured')}"
    hi = "unbounded" if g.b_simple_hi is None else _n(g.b_simple_hi)
    iv = f" [{_n(g.b_simple_lo)}, {hi}]" if g.b_simple_lo is not None else ""
    text = (f"gradient noise scale B_simple: {_n(g.b_simple)} samples{iv} over {g.steps} timed "
            f"steps (|G|^2 {_n(g.grad_sq)}, tr(Sigma) {_n(g.trace_sigma)}; "
            f"{g.method_text or g.method})")
    if g.global_batch:
        where = regime(g.global_batch, g.b_simple, g.b_simple_lo, g.b_simple_hi)
        text += (f"; the global batch {g.global_batch} is {where} it: "
                 f"{REGIME_TEXT[where]} (McCandlish et al. 2018)")
    if g.method == "micro_batches":
        text += "; " + HALF_BATCH_STEP
    return text


# what the one-process measurement does to the run's other figures (the terminal's line; the
# batch tables carry report/tables/batch.HALF_BATCH_NOTE)
HALF_BATCH_STEP = ("measured on one process (--gns): each step ran as two half-batches with "
                   "accumulated gradients, so this run's step time, epoch time and memory are "
                   "those of that step, not of a plain one")
