"""Communication of a user's DDP model under ``scaleprobe wrap``, seen through DDP's own comm
hook (``DistributedDataParallel.register_comm_hook``), without changing what is sent.

Every ``DistributedDataParallel`` the script builds gets, right after its constructor, a hook
that calls PyTorch's own ``allreduce_hook`` (divide by the world size, all-reduce, the same
average DDP computes without a hook) and notes, per gradient bucket, when its all-reduce was
launched and when it completed (the callback of its future, on the backend's thread). A hook
the script registers itself later is not refused: ours then calls the script's hook instead
of ``allreduce_hook`` (``register_comm_hook`` and the two built-in hook types), so the script
trains exactly as it would bare.

Per step (hooks.py asks at each optimizer step):

    exposed    from the launch of the step's last bucket to the end of the last all-reduce:
               backward has computed every gradient by then, so the rank only waits on the
               network and the other ranks (DDP waits for every bucket before backward returns)
    in flight  the time at least one of the step's all-reduces was running, overlapped with
               backward or not (the union of the buckets' intervals)

Not attached (communication stays null with the reason): a DDP built with ``mixed_precision``
(it registers its own hook), and on CUDA, where a future completes when NCCL's work is queued
on the stream, not when it ends, so host clocks would not see the transfer.
"""

from __future__ import annotations

import threading
import time
from typing import Any

EXPOSED_METHOD = ("DDP comm hook: from the launch of the step's last gradient bucket to the "
                  "completion of its last all-reduce (every gradient is computed by then)")
IN_FLIGHT_METHOD = ("DDP comm hook: time with at least one of the step's gradient all-reduces "
                    "in flight (union of launch-to-completion intervals), per step on the "
                    "breakdown's basis: mean over the typical steps laid over the median step")


def step_figures(buckets: list[tuple[float, float]]) -> tuple[float, float] | None:
    """(exposed, in flight) seconds of one step's ``(launched, completed)`` buckets; None
    when the step sent nothing."""
    if not buckets:
        return None
    last_launch = max(a for a, _ in buckets)
    end = max(b for _, b in buckets)
    busy, cur_a, cur_b = 0.0, None, None
    for a, b in sorted(buckets):
        if cur_b is None or a > cur_b:
            if cur_b is not None:
                busy += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    busy += cur_b - cur_a
    return max(0.0, end - last_launch), busy


class CommTimer:
    """The hook's record of every DDP model of the script; ``take()`` hands over the buckets
    completed since the last call (one step's)."""

    def __init__(self, clock: Any = time.perf_counter) -> None:
        self.clock = clock
        self.attached = 0  # DDP models timed
        self.built = 0  # DDP models the script built, timed or not
        self.group = False  # the script initialised a process group
        self.reason: str | None = None  # why a DDP model was not timed
        self._done: list[tuple[float, float]] = []
        self._lock = threading.Lock()

    # --- the hook ---------------------------------------------------------------------------
    def hook_for(self, ddp: Any) -> Any:
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        inner: dict[str, Any] = {"hook": allreduce_hook, "state": ddp.process_group}

        def timed(_state, bucket):  # noqa: ANN001, ANN202  (DDP checks a hook's annotations)
            t0 = self.clock()
            fut = inner["hook"](inner["state"], bucket)

            def done(f: Any) -> Any:
                t1 = self.clock()
                with self._lock:
                    self._done.append((t0, t1))
                return f.value()

            return fut.then(done)

        timed._scaleprobe_inner = inner  # type: ignore[attr-defined]
        return timed

    def attach(self, ddp: Any) -> None:
        if getattr(ddp, "_use_python_reducer", False):
            self.reason = ("not measured: DDP runs its Python reducer (compiled autograd), "
                           "which calls comm hooks per parameter")
            return
        if getattr(ddp, "mixed_precision", None) is not None or getattr(ddp, "_comm_hooks", []):
            self.reason = ("not measured: the DDP model has a comm hook of its own "
                           "(mixed_precision), which wrap does not replace")
            return
        if getattr(ddp, "device_type", "cpu") == "cuda":
            self.reason = ("not measured on CUDA: a comm hook's future completes when NCCL's "
                           "work is queued, not when it ends; the all-reduce stays in backward")
            return
        hook = self.hook_for(ddp)
        ddp.register_comm_hook(state=None, hook=hook)
        ddp._scaleprobe_hook = hook
        self.attached += 1

    def take(self) -> list[tuple[float, float]]:
        with self._lock:
            out, self._done = self._done, []
        return out


def _builtin(ddp: Any, kind: Any) -> tuple[Any, Any]:
    """PyTorch's Python hook for a built-in comm hook type, and its state."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as dh

    if kind == dist.BuiltinCommHookType.FP16_COMPRESS:
        return dh.fp16_compress_hook, ddp.process_group
    return dh.allreduce_hook, ddp.process_group


def _note_process_group(timer: CommTimer) -> None:
    """``timer.group`` becomes True when the script initialises a process group (through
    ``torch.distributed.init_process_group``, however it imported it): a script without one,
    and without a DDP model, has nothing to communicate with."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    orig = c10d.init_process_group

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        timer.group = True
        return orig(*args, **kwargs)

    c10d.init_process_group = init_process_group
    dist.init_process_group = init_process_group


def install(timer: CommTimer) -> None:
    """Patches ``DistributedDataParallel``: the timing hook after the constructor; a hook the
    script registers afterwards runs inside it."""
    from torch.nn.parallel import distributed as D

    cls = D.DistributedDataParallel
    if getattr(cls.__init__, "_scaleprobe", False):
        return
    orig_init, orig_reg, orig_builtin = (cls.__init__, cls.register_comm_hook,
                                         cls._register_builtin_comm_hook)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        orig_init(self, *args, **kwargs)
        timer.built += 1
        try:
            timer.attach(self)
        except Exception as e:  # noqa: BLE001  (a figure, never the script's failure)
            timer.reason = f"not measured: the comm hook could not be attached ({e})"

    def register_comm_hook(self: Any, state: Any, hook: Any) -> None:
        ours = getattr(self, "_scaleprobe_hook", None)
        if ours is None:
            return orig_reg(self, state, hook)
        self._check_comm_hook(hook)
        ours._scaleprobe_inner.update(hook=hook, state=state)
        return None

    def _register_builtin_comm_hook(self: Any, comm_hook_type: Any) -> None:
        ours = getattr(self, "_scaleprobe_hook", None)
        if ours is None:
            return orig_builtin(self, comm_hook_type)
        hook, state = _builtin(self, comm_hook_type)
        ours._scaleprobe_inner.update(hook=hook, state=state)
        return None

    __init__._scaleprobe = True  # type: ignore[attr-defined]
    cls.__init__ = __init__
    _note_process_group(timer)
    cls.register_comm_hook = register_comm_hook
    cls._register_builtin_comm_hook = _register_builtin_comm_hook
