"""torch.compile's compile events: when the process compiled, for how long, what recompiled
and why, and whether any of it fell inside the timed window. One mechanism for `run --compile`
(the built-in loop) and `wrap` (a user's compiled script).

Seen through PyTorch's own instrumentation, never through anything that runs in a compiled
frame (docs/WRAP.md, "Compilations"): ``CompileWatch`` notes each start and end callback of
``torch._dynamo.callback.callback_handler`` with ``perf_counter``, its trigger and its compile
id (``"frame/n"``: ``n > 0`` is a recompile of that frame); after the run it reads dynamo's
recompile reasons (``get_compilation_metrics()``) and graph-break counters. The callbacks
cost nothing between compilations.

Every name used from ``torch._dynamo`` is private; each is read inside a ``try``: a torch
without it (older than the callback handler, or one that moved it) gives "not measured" with
the reason, never a failure. Torch before the callbacks took arguments (about 2.5) gives no
trigger or compile id: events are then all counted as compiles, recompiles not told apart.
A script that calls ``torch._dynamo.reset()`` clears the callbacks: the record says so.

The record (``CompileWatch.record``) is plain data; ``result_fields`` (torch-free) turns it
into the result's figures (``metrics.compile_time_s``, ``compiles``, ``recompiles``,
``compiles_in_window``, ``recompiles_in_window``, ``compile_in_window_s``, ``graph_breaks``)
and their null reasons.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# where a compile event falls: the record's own words (core/invariants.py checks them)
from scaleprobe.core import claim as CL
from scaleprobe.core import claim_kinds as CK
from scaleprobe.core import intervals as M
from scaleprobe.core.invariants import AFTER, WARMUP, WINDOW
from scaleprobe.core.rank_record import CompileEvent, GraphBreak, RankCompile

METHOD = ("torch._dynamo callback_handler start/end callbacks timed with perf_counter; "
          "recompile reasons from torch._dynamo.utils.get_compilation_metrics(); graph breaks "
          "from torch._dynamo.utils.counters['graph_break']")
KINDS = {"DYNAMO": "dynamo", "LAZY_BACKWARD": "backward", "CUDAGRAPH_RECORDING": "cudagraph",
         "TRITON_AUTOTUNING": "autotune"}
_ID = re.compile(r"(\d+)/(\d+)")


@dataclass
class Event:
    kind: str  # dynamo | backward | cudagraph | autotune | compile (no trigger known)
    compile_id: str | None
    t0: float
    t1: float

    @property
    def recompile(self) -> bool | None:
        """A dynamo compile of a frame compiled before (its compile id's second number > 0);
        None when the compile id is unknown."""
        if self.kind not in ("dynamo", "compile"):
            return False
        m = _ID.search(self.compile_id or "")
        return int(m.group(2)) > 0 if m else None


class CompileWatch:
    """Notes every compilation of this process from ``install()`` on."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.events: list[Event] = []
        self.reason: str | None = None
        self._open: tuple[str, str | None, float] | None = None
        self._handler: Any = None
        self._breaks0: dict[str, int] = {}
        self.ends: list[float] = []  # each step's end (``step``), on ``clock``

    def install(self) -> CompileWatch:
        try:
            from torch._dynamo.callback import callback_handler  # heavy: torch

            callback_handler.register_start_callback(self._start)
            callback_handler.register_end_callback(self._end)
            self._handler = callback_handler
            self._breaks0 = _graph_breaks() or {}
        except Exception as e:  # noqa: BLE001  (an older or newer torch: not measured)
            self.reason = (f"not measured: this torch has no compile callbacks "
                           f"(torch._dynamo.callback: {type(e).__name__}: {e})")
        return self

    def remove(self) -> None:
        h, self._handler = self._handler, None
        if h is None:
            return
        for fn, cb in ((h.remove_start_callback, self._start), (h.remove_end_callback, self._end)):
            try:
                fn(cb)
            except Exception:  # noqa: BLE001  (cleared by torch._dynamo.reset(): gone already)
                pass

    def _start(self, *args: Any) -> None:
        try:
            a = args[0] if args else None
            trig = getattr(getattr(a, "callback_trigger", None), "name", None)
            kind = KINDS.get(trig, trig.lower()) if trig else "compile"
            self._open = (kind, getattr(a, "compile_id", None), self.clock())
        except Exception:  # noqa: BLE001  (a callback must never fail a compilation)
            self._open = None

    def _end(self, *_args: Any) -> None:
        opened, self._open = self._open, None
        if opened is not None:
            self.events.append(Event(*opened, t1=self.clock()))

    # the built-in loop calls it as one of its observers (measure/observers.py): each step's
    # end, to place the events in steps
    def step(self, _st: Any) -> None:
        self.ends.append(self.clock())

    def close(self) -> dict[str, Any]:
        return {}

    @property
    def compiled(self) -> bool:
        return bool(self.events)

    @property
    def compiling(self) -> bool:
        """A compilation is under way (its start seen, not its end): the heartbeat counts it
        as progress (measure/heartbeat.py), however long inductor takes."""
        return self._open is not None

    def cleared(self) -> bool:
        """The callbacks were removed by someone else (``torch._dynamo.reset()``)."""
        h = self._handler
        return h is not None and self._start not in getattr(h, "start_callbacks", [self._start])

    def record(self, window: tuple[float | None, float | None] | None,
               step_ends: list[float] | None = None, warmup: int = 0) -> RankCompile:
        """This rank's compile record: every event with where it fell (warm-up, the timed
        window ``[t0, t1]``, or after it), the step it started in (``step_ends``: each step's
        end on the same clock; ``timed_step`` counts from the first timed step), its
        duration, and a recompile's reason."""
        if self.reason is not None:
            return RankCompile(method=METHOD, reason=self.reason)
        reasons = _recompile_reasons()
        breaks = _graph_breaks()
        new = ({k: n - self._breaks0.get(k, 0) for k, n in breaks.items()
                if n > self._breaks0.get(k, 0)} if breaks is not None else None)
        top = sorted((new or {}).items(), key=lambda kv: -kv[1])[:5]
        return RankCompile(method=METHOD, reason=None,
                           events=classify(self.events, window, step_ends, warmup, reasons),
                           graph_breaks=None if new is None else sum(new.values()),
                           graph_break_reasons=[GraphBreak(reason=k.strip().splitlines()[0][:300],
                                                           count=n) for k, n in top],
                           cleared=self.cleared())


def classify(events: list[Event], window: tuple[float | None, float | None] | None,
             step_ends: list[float] | None = None, warmup: int = 0,
             reasons: dict[str, str] | None = None) -> list[CompileEvent]:
    """Each event as the record holds it: ``phase`` is ``window`` when it overlaps the timed window
    ``[t0, t1]`` (an open end reaches to infinity), ``warm-up`` when it ended before the window,
    ``after`` when it started after it; ``at_s`` its start from the window's start."""
    t0, t1 = window or (None, None)
    out = []
    for ev in events:
        if t0 is None or ev.t1 <= t0:  # no window opened: all of it came before one
            phase = WARMUP
        elif t1 is not None and ev.t0 >= t1:
            phase = AFTER
        else:
            phase = WINDOW
        step = _step_of(ev.t0, step_ends)
        rc = ev.recompile
        out.append(CompileEvent(
            kind=ev.kind, compile_id=ev.compile_id, phase=phase,
            duration_s=max(0.0, ev.t1 - ev.t0), at_s=ev.t0 - t0 if t0 is not None else None,
            step=step, timed_step=step - warmup if step is not None and step >= warmup else None,
            recompile=rc, reason=(reasons or {}).get(ev.compile_id or "") if rc else None))
    return out


def _step_of(t: float, step_ends: list[float] | None) -> int | None:
    """The index of the step running at ``t``: the first that ends after it."""
    if not step_ends:
        return None
    for i, end in enumerate(step_ends):
        if end > t:
            return i
    return None  # after the last step


def _recompile_reasons() -> dict[str, str]:
    """Compile id -> the guard failure dynamo recorded for that recompile (the last 64
    compilations dynamo keeps)."""
    try:
        from torch._dynamo.utils import get_compilation_metrics  # heavy: torch

        return {str(m.compile_id): str(m.recompile_reason) for m in get_compilation_metrics()
                if getattr(m, "recompile_reason", None)}
    except Exception:  # noqa: BLE001
        return {}


def _graph_breaks() -> dict[str, int] | None:
    """dynamo's graph breaks so far, by reason (each time a trace broke there)."""
    try:
        from torch._dynamo.utils import counters  # heavy: torch

        return {str(k): int(v) for k, v in counters["graph_break"].items()}
    except Exception:  # noqa: BLE001
        return None


# ---- the result's figures (torch-free) ------------------------------------------------------

FIELDS = ("compile_time_s", "compiles", "recompiles", "compiles_in_window",
          "recompiles_in_window", "compile_in_window_s", "graph_breaks")


def result_fields(raw: RankCompile | None, not_compiled: str,
                  others: list[RankCompile] | None = None
                  ) -> tuple[dict[str, Any], dict[str, str]]:
    """(metrics fields, null reasons) from the first training rank's compile record ``raw``;
    the in-window figures are the most of any rank's (``others``: every rank's records): in
    lockstep, one rank compiling holds the others up. ``not_compiled`` is the reason given when
    nothing was compiled (the run did not ask for it, or the script compiled nothing)."""
    if raw is None or raw.reason:
        reason = (raw.reason if raw is not None else None) or "not measured: no compile record"
        return dict.fromkeys(FIELDS), dict.fromkeys(FIELDS, reason)
    events = raw.events
    if not events:
        return dict.fromkeys(FIELDS), dict.fromkeys(FIELDS, not_compiled)
    frames = [e for e in events if e.kind in ("dynamo", "compile")]
    known = all(e.recompile is not None for e in frames)
    m: dict[str, Any] = {"compile_time_s": sum(e.duration_s or 0.0 for e in events),
                         "compiles": len(frames),
                         "recompiles": sum(1 for e in frames if e.recompile) if known else None,
                         "graph_breaks": raw.graph_breaks}
    inside = max((_inside(r.events) for r in [raw, *(others or [])]),
                 key=lambda t: (t[0], t[2]))
    m["compiles_in_window"], m["recompiles_in_window"], m["compile_in_window_s"] = inside
    why: dict[str, str] = {}
    if not known:
        m["recompiles_in_window"] = None
        why["recompiles"] = why["recompiles_in_window"] = (
            "not told apart: this torch's compile callbacks give no compile id")
    if m["graph_breaks"] is None:
        why["graph_breaks"] = "not measured: torch._dynamo.utils.counters not readable"
    if raw.cleared:
        why["compile_time_s"] = ("partial: the script cleared torch's compile callbacks "
                                 "(torch._dynamo.reset()); later compilations were not seen")
    return m, why


def _inside(events: list[CompileEvent]) -> tuple[int, int, float]:
    """(compilations, recompiles, seconds) inside the timed window."""
    inside = [e for e in events if e.phase == WINDOW]
    return (len(inside), sum(1 for e in inside if e.recompile),
            sum(e.duration_s or 0.0 for e in inside))


def block(raw: RankCompile | None, mode: str | None, backend: str | None = None
          ) -> dict[str, Any] | None:
    """The result's ``compile`` block: None when nothing was compiled. ``mode`` and
    ``backend`` are the built-in loop's (None for a script's own torch.compile)."""
    if raw is None or not raw.events:
        return None
    return {"mode": mode, "backend": backend, "method": raw.method,
            "graph_breaks": raw.graph_breaks,
            "graph_break_reasons": [g.to_dict() for g in raw.graph_break_reasons or []],
            "events": [e.to_dict() for e in raw.events]}


def vs_eager_line(block_: dict[str, Any] | None, why: dict[str, str]) -> str | None:
    """``compiled against eager: forward + backward 1.52x [1.41, 1.64] faster (...)``; the
    reason when it was not measured; None when nothing was compiled."""
    if block_ is None:
        return None
    vs = block_.get("vs_eager")
    if not vs:
        reason = why.get("compile.vs_eager")
        return f"compiled against eager: {reason}" if reason else None
    iv = vs.get("fwd_bwd_speedup_interval")
    shown = f"{vs['fwd_bwd_speedup']:.2f}x" + (f" [{iv[0]:.2f}, {iv[1]:.2f}]" if iv else "")
    pairs = int(vs.get("pairs") or 0)
    interval = M.Interval(vs["fwd_bwd_speedup"], iv[0], iv[1], max(pairs, 1), "") if iv else None
    claim = CK.compiled_speedup(vs["fwd_bwd_speedup"], interval, pairs)
    verdict = claim.verdict if interval is not None else f"{CL.INCONCLUSIVE} (one value a side)"
    how = (f"geometric mean of {pairs} pairs of passes, a compiled one then an eager one, "
           "after the window" if pairs else
           f"geometric means of the window's steps and {vs['eager_passes']} eager passes after "
           "it, not interleaved")
    line = (f"compiled against eager: forward + backward {shown} {verdict} ({how}; median "
            f"{vs['compiled_fwd_bwd_s'] * 1e3:.1f} ms compiled over "
            f"{vs['compiled_steps']} timed steps, {vs['eager_fwd_bwd_s'] * 1e3:.1f} ms eager "
            f"over {vs['eager_passes']} passes)")
    if vs.get("step_speedup_projected") is not None:
        line += f"; the whole step {vs['step_speedup_projected']:.2f}x (projected from the medians"
        pay = vs.get("payback_steps")
        line += (f"), the compile time paid back after {pay:,} steps" if pay is not None
                 else "), the compile time never paid back")
        if claim.verdict != CL.FASTER:
            line += " if the medians hold"
    return line


def summary_line(m: dict[str, Any], block_: dict[str, Any] | None,
                 why: dict[str, str]) -> str | None:
    """The terminal summary's line: where the compile time went (warm-up, window, after),
    what was compiled and recompiled; None when nothing was compiled."""
    if m.get("compile_time_s") is None:
        return None
    events = (block_ or {}).get("events") or []
    spent = {p: sum(e.get("duration_s") or 0.0 for e in events if e.get("phase") == p)
             for p in (WARMUP, WINDOW, AFTER)}
    n, rc, gb = m.get("compiles"), m.get("recompiles"), m.get("graph_breaks")
    nb = sum(1 for e in events if e.get("kind") == "backward")
    back = f" and {nb} backward graph{'s' if nb != 1 else ''}" if nb else ""
    what = [f"{n} frame{'s' if n != 1 else ''}{back} compiled" if n is not None else None,
            f"{rc} recompile{'s' if rc != 1 else ''}" if rc is not None else None,
            f"{gb} graph break{'s' if gb != 1 else ''}" if gb is not None else None]
    mode = (block_ or {}).get("mode")
    line = (f"compile: {spent[WARMUP]:.1f} s in the warm-up"
            + (f" ({', '.join(w for w in what if w)})" if any(what) else "")
            + (f", mode {mode}" if mode else ""))
    inside = m.get("compiles_in_window")
    if inside:
        line += f"; {m.get('compile_in_window_s') or 0.0:.2f} s INSIDE the timed window"
    else:
        line += "; none inside the timed window"
    if spent[AFTER] > 0:
        line += f"; {spent[AFTER]:.1f} s after it"
    if why.get("compile_time_s"):
        line += f" ({why['compile_time_s']})"
    return line
