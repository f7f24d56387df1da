"""The claims of each kind, built on ``claim.Claim`` and its words: a batch step that pays
or does not, a co-located job's slowdown, torch.compile against eager, parity, a plan's pick
and its efficiency, a predicted peak that fits on a device, a prediction set beside its
measurement. Each says what its value is a ratio (or difference) of, the reference it is
judged against, what stands behind its interval and how the runs are paired; the rules and
the words stay in ``claim.py``.

Torch-free, I/O-free.
"""

from __future__ import annotations

from scaleprobe.core import claim as CL
from scaleprobe.core.intervals import MIN_REPEATS_TO_DECIDE, Interval


def batch_step(epoch: Interval | None, mem_growth: float | None,
               mem: Interval | None = None) -> CL.Claim:
    """A step up in batch size: it pays while epoch time falls faster than memory grows,
    i.e. the epoch-time ratio E < 1 - memory growth (= 2 - memory ratio). With memory's own
    interval the bar is a range, and E's interval must clear all of it."""
    bar = 1.0 - mem_growth if mem_growth is not None else 1.0
    rng = (2.0 - mem.hi, 2.0 - mem.lo) if mem is not None else (bar, bar)
    return CL.Claim("epoch-time ratio", epoch.estimate if epoch is not None else None, epoch,
                 ref=bar, ref_range=rng, above=CL.DOES_NOT_PAY, below=CL.PAYS, kind="batch step",
                 pairing="paired by repeat index")


def slowdown_claim(name: str, value: float | None, iv: Interval | None,
             sources: tuple[CL.Source, ...] = ()) -> CL.Claim:
    """A co-located job's slowdown (samples/s alone / together) against 1."""
    return CL.Claim(name, value, iv, above=CL.SLOWER_TOGETHER, below=CL.FASTER_TOGETHER,
                 kind="slowdown", pairing="repeat i alone with repeat i together",
                 sources=sources)


def compiled_speedup(value: float | None, iv: Interval | None, pairs: int) -> CL.Claim:
    """torch.compile against eager, forward + backward (eager / compiled) against 1, over
    ``pairs`` interleaved pairs of passes (a compiled pass, then an eager one, on the same
    batch); 0 pairs: the window's compiled steps against eager passes after it, one
    comparison in time (load that changed between the two is in it), which decides nothing."""
    paired = pairs >= MIN_REPEATS_TO_DECIDE
    return CL.Claim("forward + backward, eager / compiled", value, iv, above=CL.FASTER, below=CL.SLOWER,
                 repeats=(pairs, pairs) if paired else (1, 1), kind="compile vs eager",
                 pairing=(f"{pairs} interleaved pairs of passes on one batch" if paired else
                          "the window's steps against passes after it, not interleaved"))


def parity(diff: float | None, iv: Interval | None, pairs: int, tol: float) -> CL.Claim:
    """Accuracy parity: the difference N - 1 (paired by seed) as an equivalence claim
    against the user's +/- ``tol``."""
    return CL.Claim("difference (N - 1)", diff, iv, unit="diff", digits=4, band=(-tol, tol),
                 within=CL.PARITY_HOLDS, outside=CL.PARITY_BROKEN, repeats=(pairs, pairs),
                 pairing="paired by seed", kind="parity")


def plan_pick(kind: str, pick: str, runner_up: str, value: float, iv: Interval | None,
              repeats: tuple[int, ...], sources: tuple[CL.Source, ...], what: str,
              basis: str = "both predicted from the same one-rank runs") -> CL.Claim:
    """A plan's pick (``kind``: ``CL.FASTEST`` or ``CL.CHEAPEST``) held against its runner-up:
    ``value`` is the pick's figure over the runner-up's, higher favouring the pick (samples/s,
    or 1 / time, 1 / device-hours), its interval the two predictions' (the pick's low end over
    the runner-up's high end, and back: overlapping intervals include 1x)."""
    return CL.Claim(f"{kind} that fits: {pick}", value, iv, above=f"{kind} that fits",
                 below=f"behind {runner_up}", repeats=repeats, sources=sources,
                 detail=f"{what}: the pick's over the runner-up's ({runner_up}), {basis}",
                 pairing=basis, kind="plan pick")


def plan_efficiency(value: float | None, lo: float | None, hi: float | None, runs: int,
                    of: str = "") -> CL.Claim:
    """A plan row's efficiency: its samples/s over N x the plan's one-device row's at the
    same batch per device, against 100% (linear scaling). Its interval is the step model's
    (``predict/plan.set_efficiency``), not one from repeats of the planned run: an interval that
    holds 100% is "not resolved" (no loss to scaling told apart from none), and from one
    one-rank run, "inconclusive (1 repeat)"."""
    iv = (Interval(value, lo, hi, max(runs, 1), "step model: resamples of the one-rank runs")
          if value is not None and lo is not None and hi is not None else None)
    return CL.Claim("efficiency", value, iv, unit="%", digits=2, repeats=(runs,),
                 kind="plan efficiency", detail=f"samples/s over N x {of}'s" if of else "",
                 pairing="both predicted from the one-rank runs",
                 evidence=f"the step model's interval, {runs} one-rank run"
                          + ("s" if runs != 1 else ""))


def memory_fit(peak: int, low: int | None, high: int | None, device: int, probes: int,
               detail: str = "") -> CL.Claim:
    """Whether a predicted peak per rank fits on a device: peak / device memory against 1.
    Its interval is the memory model's (predict/memmodel.py: the activations' departure from a
    line over the probed batch sizes, the CUDA margin's readings), not one from repeats: it
    "fits" when the whole interval lies under the device, "does not fit" when wholly over,
    and is inconclusive when the device's size lies inside it; without an interval (fewer
    than three batch sizes probed), "no interval"."""
    iv = (Interval(peak / device, low / device, high / device, probes,
                   "memory model: probed batch sizes")
          if low is not None and high is not None else None)
    return CL.Claim("predicted peak / device memory", peak / device, iv, unit="x", digits=3,
                 above=CL.DOES_NOT_FIT, below=CL.FITS, undecided=CL.INCONCLUSIVE,
                 evidence=f"the model's interval over {probes} probed batch sizes",
                 kind="memory fit", detail=detail)


def prediction_check(subject: str, value: float | None, iv: Interval | None, goal: float,
                     evidence: str, sources: tuple[CL.Source, ...] = (), detail: str = ""
                     ) -> CL.Claim:
    """A prediction set beside a measurement: predicted / measured as an equivalence claim
    against 1 +/- ``goal`` (as ``parity`` against its tolerance). Its interval is the
    prediction's over the measurement's, each end against the other's: "within +/-10%" when
    it lies inside the band, "outside +/-10%" when wholly outside, else inconclusive (the
    interval crosses the band's edge); without one, "no interval". ``evidence`` says what
    stands behind the interval (one measured run's steps is not repeats)."""
    band = f"+/-{goal:.0%}"
    return CL.Claim(subject, value, iv, band=(1.0 - goal, 1.0 + goal), within=f"within {band}",
                 outside=f"outside {band}", undecided=CL.INCONCLUSIVE, evidence=evidence,
                 sources=sources, detail=detail, kind="prediction check",
                 pairing="the prediction's interval against the measured step's")
