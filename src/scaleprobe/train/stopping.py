"""When the built-in loop's timed window ends, and why: the reason every run records
(``RankRecord.stop_reason`` -> ``metrics.stop_reason``) and its summary shows.

    steps        --steps N timed steps
    stable       --steps auto: the median step was stable (95% CI half-width within
                 --stable-rel-ci of it)
    max-steps    --steps auto: --max-steps reached before the median was stable
    max-seconds  --steps auto: --max-seconds of timed steps before the median was stable
    peer         --steps auto, several ranks: another rank's cap or stable median stopped
                 them all (this rank's own check had not)
    epochs       --epochs ran to their end
    target       --target reached
    max-epochs   --target not reached by --max-epochs
    interrupted  Ctrl+C or SIGTERM
"""

from __future__ import annotations

import time
from typing import Any

from scaleprobe.measure.stats import is_stable


def stop_reason(p: Any, st: Any, timer: Any) -> str | None:
    """Why the window ends after this timed step, or None to go on. Ranks that synchronise
    agree on stopping every 5 steps (one collective), so they stop at the same step; one
    process checks its caps every step, so a time-boxed window (co-located jobs) ends within
    a step of its time, and tests its median's stability every 5."""
    t = p.cfg.train
    if t.epochs is not None or t.target is not None:
        return None  # epochs (or the target, or --max-epochs) end the loop themselves
    if isinstance(t.steps, int):
        return "steps" if st.timed >= t.steps else None
    if st.timed < t.min_steps or (p.strategy.distributed and st.timed % 5):
        return None
    elapsed = time.perf_counter() - (st.window_t0 or time.perf_counter())
    capped = ("max-steps" if st.timed >= t.max_steps else
              "max-seconds" if elapsed >= t.max_seconds else None)
    # stability is tested every 5 steps, and once more at a cap: a window that reached its
    # cap with the median stable is named stable
    stable = (capped is not None or st.timed % 5 == 0) and is_stable(
        timer.step_times(timer.ready_count()), p.cfg.measure.stable_rel_ci, t.min_steps)
    mine = "stable" if stable else capped
    if not p.strategy.any_true(mine is not None):  # every rank stops at the same step
        return None
    return mine or "peer"


def loop_end_reason(p: Any, st: Any) -> str:
    """Why the loop ended when no step cap, target or stop request ended it: the epochs ran
    out (with --target: --max-epochs, the target not reached)."""
    return "max-epochs" if p.cfg.train.target is not None else "epochs"
