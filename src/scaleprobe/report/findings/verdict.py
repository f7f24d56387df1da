"""One row of the report's opening section, "What this says" (``Verdict``), its ranks (the
order the section shows them in), and the command that would decide a verdict left undecided.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scaleprobe.core import claim as CL
from scaleprobe.core import metrics as M
from scaleprobe.core.record import Record
from scaleprobe.core.thresholds import DEFAULT, Thresholds
from scaleprobe.report.reading import records as R
from scaleprobe.report.reading.machine_load import run_load

ERROR, DECIDED, UNDECIDED, CONTENTION, RUN_WARNING, NOTE = range(6)


@dataclass(frozen=True)
class Verdict:
    claim: str
    number: str
    interval: str
    command: str
    rank: int  # ERROR ... NOTE: lower comes first
    weight: float = 0.0  # within a rank, larger comes first (runs affected)
    warning: bool = False  # a decided verdict that calls for a change


def to_decide(need: int | None, iv: M.Interval | None, command: Any,
              recs: Sequence[Record] = (), th: Thresholds = DEFAULT) -> str:
    """The command with the repeats that would decide; when no number of repeats would (the
    difference is below the noise): a quieter machine first where runs were measured under
    load, the two equal at this noise where every run was measured quiet, and neither claim
    where the load was not measured or there is no spread at all. With one repeat there is no
    noise measured to be below: ``repeats_to_decide`` assumed one run's noise, and one repeat
    cannot see the drift between runs (core/claim.py: never "within noise"), so the row asks
    for repeats and claims neither."""
    if need is not None:
        return f"about {need} repeats would decide it: {command(need)}"
    n = max(2 * (iv.n if iv is not None else 1), 3)
    if iv is None:
        return ("no spread to judge by (too few timed steps or repeats): measure again with "
                f"more, e.g. {command(n)}")
    if iv.within_run_bound:
        k = math.exp((iv.within_log_h or 0.0) / math.sqrt(max(iv.n, 1)))
        return ("the runs' own step times vary more than the difference (their spread alone "
                f"leaves the ratio uncertain by a factor of {k:.2f} either way: stalls or waits "
                "inside the runs, see Findings and each run's steps.csv), so "
                "neither more repeats nor a quieter machine is the first fix: remove the stalls, "
                f"or time more steps per run, then e.g. {command(n)}")
    flags = [run_load(r, th)[0] for r in R.runs(recs)]
    if not iv.enough_repeats:
        quiet = " on a quiet machine (runs were measured under load)" if any(
            f is True for f in flags) else ""
        return (f"{CL.one_repeat_text(iv.n)}: one repeat cannot see the drift between runs, "
                "so it says neither that the two differ nor that they are equal: measure the "
                f"noise between runs with repeats{quiet}, e.g. {command(n)}")
    if any(f is True for f in flags):
        return ("the noise is larger than the difference and runs were measured under load: "
                f"measure on a quiet machine, e.g. {command(n)}")
    if flags and all(f is False for f in flags):
        return ("the difference is within this machine's run-to-run noise (no run measured "
                "under load): either will do; only longer runs or many more repeats could "
                f"separate them, e.g. {command(n)}")
    return ("the noise is larger than the difference (whether other programs used the machine "
            f"was not measured): measure on a quiet machine, e.g. {command(n)}")
