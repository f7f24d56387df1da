"""DDP's gradient all-reduces timed through its own comm hook
(``DistributedDataParallel.register_comm_hook``), without changing what is sent: the one
definition of DDP's communication for the built-in loop (``strategies/ddp.py``) and for a
user's script under ``wrap`` (``wrap/ddp_comm.py``).

The hook calls PyTorch's own ``allreduce_hook`` and notes, per gradient bucket, when its
all-reduce was launched, when it completed (the callback of its future, on the backend's
thread) and how many bytes it moved. Per step, ``exposed`` runs from the launch of the step's
last bucket to the end of the last all-reduce (backward has computed every gradient by then),
``in flight`` is the union of the buckets' intervals. When it is not attached (a DDP with
``mixed_precision``, a hook of its own before ours, compiled autograd's reducer, CUDA) the
figure is null with the reason: docs/WRAP.md ("What cannot be seen") says why.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from scaleprobe.measure.stats import median

EXPOSED_METHOD = ("DDP comm hook: from the launch of the step's last gradient bucket to the "
                  "completion of its last all-reduce (every gradient is computed by then)")
IN_FLIGHT_METHOD = ("DDP comm hook: time with at least one of the step's gradient all-reduces "
                    "in flight (union of launch-to-completion intervals), per step on the "
                    "breakdown's basis: mean over the typical steps laid over the median step")
CUDA_REASON = ("not measured on CUDA: a comm hook's future completes when NCCL's work is "
               "queued, not when it ends; the all-reduce stays in backward")

# one bucket's all-reduce: (launched, completed, bytes), host clock seconds
Bucket = tuple[float, float, int]


def step_figures(buckets: list[Bucket] | list[tuple[float, float]]
                 ) -> tuple[float, float] | None:
    """(exposed, in flight) seconds of one step's buckets; None when the step sent nothing."""
    if not buckets:
        return None
    spans = sorted((b[0], b[1]) for b in buckets)
    last_launch = max(a for a, _ in spans)
    end = max(b for _, b in spans)
    busy, cur_a, cur_b = 0.0, spans[0][0], spans[0][1]
    for a, b in spans[1:]:
        if a > cur_b:
            busy += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    busy += cur_b - cur_a
    return max(0.0, end - last_launch), busy


class CommTimer:
    """The hook's record of every DDP model it was attached to; ``take()`` hands over the
    buckets completed since the last call (one step's)."""

    def __init__(self, clock: Any = time.perf_counter) -> None:
        self.clock = clock
        self.attached = 0  # DDP models timed
        self.built = 0  # DDP models built, timed or not (counted by wrap's patch)
        self.group = False  # a process group was initialised (noted by wrap's patch)
        self.reason: str | None = None  # why a DDP model was not timed
        # sees each bucket's buffer before the inner hook (this rank's gradient) and the
        # future's value after it (the reduced one), and changes neither: tap.before(buffer),
        # tap.after(value) (measure/gns_probe.NormTap: the gradient noise scale)
        self.tap: Any = None
        self._done: list[Bucket] = []
        self._lock = threading.Lock()

    def hook_for(self, ddp: Any) -> Any:
        # heavy: torch: DDP's default hook, when the timing hook is registered
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        inner: dict[str, Any] = {"hook": allreduce_hook, "state": ddp.process_group}

        def timed(_state, bucket):  # noqa: ANN001, ANN202  (DDP checks a hook's annotations)
            buf = bucket.buffer()
            nbytes = int(buf.numel() * buf.element_size())
            tap = self.tap
            if tap is not None:
                tap.before(buf)  # before the inner hook divides the buffer in place
            t0 = self.clock()
            fut = inner["hook"](inner["state"], bucket)

            def done(f: Any) -> Any:
                t1 = self.clock()
                with self._lock:
                    self._done.append((t0, t1, nbytes))
                if tap is None:
                    return f.value()
                value = f.value()
                tap.after(value)
                return value

            return fut.then(done)

        timed._scaleprobe_inner = inner  # type: ignore[attr-defined]
        return timed

    def attach(self, ddp: Any) -> None:
        """Time ``ddp``'s all-reduces, or say in ``reason`` why not."""
        if getattr(ddp, "_use_python_reducer", False):
            self.reason = ("not measured: DDP runs its Python reducer (compiled autograd), "
                           "which calls comm hooks per parameter")
            return
        if getattr(ddp, "mixed_precision", None) is not None or getattr(ddp, "_comm_hooks", []):
            self.reason = ("not measured: the DDP model has a comm hook of its own "
                           "(mixed_precision), which is not replaced")
            return
        if getattr(ddp, "device_type", "cpu") == "cuda":
            self.reason = CUDA_REASON
            return
        hook = self.hook_for(ddp)
        ddp.register_comm_hook(state=None, hook=hook)
        ddp._scaleprobe_hook = hook
        self.attached += 1

    def take(self) -> list[Bucket]:
        with self._lock:
            out, self._done = self._done, []
        return out


@dataclass
class BucketLog:
    """The timed steps' buckets, by the order they were launched in a step: when each became
    ready after the backward pass began, how long its all-reduce took, its bytes. The
    network model (``scaleprobe predict``) lays a step's communication out from these."""

    ready_s: list[list[float]] = field(default_factory=list)
    allreduce_s: list[list[float]] = field(default_factory=list)
    nbytes: list[int] = field(default_factory=list)
    # ready time over the step's whole backward phase (when its end is known)
    ready_fraction: list[list[float]] = field(default_factory=list)

    def add(self, backward_start: float, buckets: list[Bucket],
            backward_end: float | None = None) -> None:
        span = (backward_end - backward_start) if backward_end is not None else 0.0
        if self.nbytes and [n for _, _, n in sorted(buckets)] != self.nbytes:
            # DDP rebuilt its buckets (after its first iteration): keep the new layout only
            self.ready_s, self.allreduce_s, self.nbytes, self.ready_fraction = [], [], [], []
        for i, (a, b, n) in enumerate(sorted(buckets)):
            if i == len(self.nbytes):
                self.nbytes.append(n)
                self.ready_s.append([])
                self.allreduce_s.append([])
                self.ready_fraction.append([])
            self.ready_s[i].append(max(0.0, a - backward_start))
            self.allreduce_s[i].append(max(0.0, b - a))
            if span > 0:
                self.ready_fraction[i].append(min(1.0, max(0.0, a - backward_start) / span))

    def summary(self) -> list[dict[str, Any]]:
        """Per bucket, in launch order: bytes, median ready time after backward began (and
        as a fraction of the step's backward phase), median all-reduce time, and over how
        many steps."""
        return [{"bytes": n, "ready_s": median(r), "allreduce_s": median(d), "steps": len(r),
                 "ready_fraction": median(f) if f else None}
                for n, r, d, f in zip(self.nbytes, self.ready_s, self.allreduce_s,
                                      self.ready_fraction, strict=True)]


class HookSplit:
    """A step timer that, at the backward mark, moves the step's exposed wait on DDP's
    all-reduces (``step_figures``) out of backward into ``comm``, and keeps the step's time
    in flight and its buckets (``log``: the timed steps only). ``split=False`` (one process,
    where nothing crosses a wire) only logs the buckets: when each became ready in backward,
    which the step model (``predict/timeline.py``) lays a multi-rank step out from."""

    def __init__(self, timer: Any, comm: CommTimer, log: BucketLog | None,
                 in_flight: list[float | None] | None, clock: Any = time.perf_counter,
                 split: bool = True) -> None:
        self.timer, self.comm, self.log, self.in_flight = timer, comm, log, in_flight
        self.clock = clock
        self.split = split
        self._backward_start: float | None = None

    def start(self) -> None:
        self.comm.take()  # buckets between steps (a calibration, an evaluation) are no step's
        self.timer.start()

    def mark(self, phase: str) -> None:
        self.timer.mark(phase)
        if phase == "forward":
            self._backward_start = self.clock()
        elif phase == "backward":
            end = self.clock()
            buckets = self.comm.take()
            got = step_figures(buckets)
            if got is not None and self.split:
                self.timer.move("backward", "comm", got[0])
            if self.in_flight is not None:
                self.in_flight.append(got[1] if got is not None else None)
            if self.log is not None and buckets and self._backward_start is not None:
                self.log.add(self._backward_start, buckets, end)

    def move(self, src: str, dst: str, seconds: float) -> None:
        self.timer.move(src, dst, seconds)
