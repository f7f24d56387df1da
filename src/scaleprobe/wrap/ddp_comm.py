"""Communication of a user's DDP model under ``scaleprobe wrap``: every
``DistributedDataParallel`` the script builds gets, right after its constructor, the comm
hook of ``measure/comm/hook.py`` (the one definition of DDP's exposed and in-flight communication,
the built-in loop's too), which calls PyTorch's own ``allreduce_hook``. A hook the script
registers itself later is not refused: ours then calls the script's hook instead of
``allreduce_hook`` (``register_comm_hook`` and the two built-in hook types), so the script
trains exactly as it would bare. hooks.py asks for the step's buckets at each optimizer step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scaleprobe.measure.comm.hook import CommTimer


def _builtin(ddp: Any, kind: Any) -> tuple[Any, Any]:
    """PyTorch's Python hook for a built-in comm hook type, and its state."""
    # heavy: torch: torch.distributed, only once the script makes a process group
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as dh

    if kind == dist.BuiltinCommHookType.FP16_COMPRESS:
        return dh.fp16_compress_hook, ddp.process_group
    return dh.allreduce_hook, ddp.process_group


def _note_process_group(timer: CommTimer, passed: Callable[[str], None]) -> None:
    """``timer.group`` becomes True when the script initialises a process group (through
    ``torch.distributed.init_process_group``, however it imported it): a script without one,
    and without a DDP model, has nothing to communicate with. ``passed`` is told "joining"
    and "joined" around it (the heartbeat's setup places)."""
    # heavy: torch: torch.distributed, only once the script makes a process group
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    orig = c10d.init_process_group

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        timer.group = True
        passed("joining")
        got = orig(*args, **kwargs)
        passed("joined")
        return got

    c10d.init_process_group = init_process_group
    dist.init_process_group = init_process_group


def install(timer: CommTimer, passed: Callable[[str], None] = lambda mark: None) -> None:
    """Patches ``DistributedDataParallel``: the timing hook after the constructor; a hook the
    script registers afterwards runs inside it. ``passed`` is told the setup's places the
    script can be seen to pass: "model" as DDP's constructor starts (its first broadcast waits
    for every rank's model), "wrapped" once it returns, and those of ``init_process_group``."""
    from torch.nn.parallel import distributed as D  # heavy: torch

    cls = D.DistributedDataParallel
    if getattr(cls.__init__, "_scaleprobe", False):
        return
    orig_init, orig_reg, orig_builtin = (cls.__init__, cls.register_comm_hook,
                                         cls._register_builtin_comm_hook)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        passed("model")
        orig_init(self, *args, **kwargs)
        passed("wrapped")
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
    _note_process_group(timer, passed)
    cls.register_comm_hook = register_comm_hook
    cls._register_builtin_comm_hook = _register_builtin_comm_hook
