"""`wrap` and torch.compile: how the hooks stay out of compiled code, and how a compiled
script's FLOPs are counted without running its step under the FLOP counter.

dynamo traces a module's hooks into the graph it compiles when the module is called inside a
compiled frame, and compiles a hook as a frame of its own when it runs inside the call dynamo
compiles. So the hooks return at once while dynamo traces them (``compiling``), are never
compiled as frames (``not_frames``: dynamo's ``skip_code``) and never change once anything
is compiled (``hooks.Recorder._narrow``); docs/WRAP.md ("Compiled scripts") tells the
recompile this prevents, with its measured cost.

FLOPs (``CallCounts``): a frame called under a dispatch mode such as ``FlopCounterMode`` is not
compiled (dynamo runs it eagerly), so once anything is compiled the counted step runs as it
is, and a hook on each outermost module keeps its calls in that step as fake tensors of their
inputs (``measure/fakeflops.CallCapture``); they are counted after the script on the eager
modules. On ``torch.compile``'s wrapper the hook runs outside the compiled frame, and dynamo
does not guard on the wrapper's hooks; a module compiled in place (``module.compile()``) gets
none, since its own hooks are traced into its compiled call.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any


def _never() -> bool:
    return False


def compiling() -> Callable[[], bool]:
    """``torch.compiler.is_compiling`` (True while dynamo traces), or a constant False on a
    torch without it."""
    return getattr(getattr(sys.modules.get("torch"), "compiler", None), "is_compiling", _never)


def not_frames(*fns: Any) -> None:
    """dynamo never compiles these functions as frames of their own; traced from inside a
    compiled frame they are still inlined. A torch without ``skip_code``: each is compiled
    once, an empty graph, at its first call."""
    try:
        from torch._dynamo.eval_frame import skip_code  # heavy: torch

        for fn in fns:
            skip_code(fn.__code__)
    except Exception:  # noqa: BLE001
        pass


def compiled_frames() -> bool:
    """dynamo has compiled a frame in this process (its counters), where no CompileWatch
    could say so."""
    dynamo = sys.modules.get("torch._dynamo.utils")
    counters = getattr(dynamo, "counters", None) if dynamo is not None else None
    try:
        return bool(counters["frames"]["total"]) if counters is not None else False
    except Exception:  # noqa: BLE001
        return False


def in_place(module: Any) -> bool:
    """Compiled in place (``module.compile()``)."""
    return module.__dict__.get("_compiled_call_impl") is not None


NOTHING_SEEN = ("not counted: no module call outside compiled code was seen in the counted "
                "step (a compiled function, or module.compile(), runs the modules inside the "
                "compiled frame, where wrap's hooks see nothing)")


class CallCounts:
    """The outermost modules' calls in the counted step, kept as fake tensors, and their count
    after the script. ``watch`` hooks a module (a compiled one at its first call, before dynamo
    compiles it); ``begin`` hooks the other outermost modules and captures the next step;
    ``count`` gives (FLOPs, None) or (None, why not)."""

    def __init__(self) -> None:
        self.captures: dict[int, Any] = {}
        self.capturing = False  # inside the counted step
        self.active = False  # the count is of captured calls

    def watch(self, module: Any, skip: Callable[[], bool],
              seen: Callable[[Any], None]) -> Any:
        """Hook ``module``: in the counted step its calls are kept, unless ``skip()`` (the
        loader is running); ``seen(module)`` at each kept call. Returns the hook's handle."""
        from scaleprobe.measure.fakeflops import CallCapture  # heavy: torch

        cap = CallCapture(module)
        self.captures[id(module)] = cap

        def capture(mod: Any, args: Any, kwargs: Any) -> None:
            if self.capturing and not skip():
                cap.add(args, kwargs)
                seen(mod)

        try:
            return module.register_forward_pre_hook(capture, with_kwargs=True)
        except Exception as e:  # noqa: BLE001  (FLOPs then not counted, with the reason)
            cap.error = f"{type(e).__name__}: {e}"
            return None

    def begin(self, modules: Iterable[Any], skip: Callable[[], bool],
              seen: Callable[[Any], None]) -> list[Any]:
        """Capture the next step: the outermost modules not hooked yet get a hook (eager ones:
        a loss module, a model whose parts are compiled). Returns the new handles."""
        handles = [self.watch(m, skip, seen) for m in list(modules)
                   if id(m) not in self.captures and not in_place(m)]
        self.capturing = self.active = True
        return [h for h in handles if h is not None]

    def count(self) -> tuple[int | None, str | None]:
        self.capturing = False
        total, why = 0, None
        for cap in self.captures.values():
            got, err = cap.count()
            if got is None and err and "no matrix product" not in err:
                why = why or err
            total += got or 0
        if why is not None:
            return None, why
        return (total, None) if total > 0 else (None, NOTHING_SEEN)
