"""FLOPs of a compiled model, counted on its eager module with fake tensors: nothing is
computed and nothing the training holds changes.

``torch.utils.flop_counter.FlopCounterMode`` counts operators as they dispatch. A compiled
frame does not run its operators through the dispatcher one by one, and a frame called under a
dispatch mode is not compiled at all (dynamo skips it and runs it eagerly), so the step count of
``measure/flops.py`` cannot be taken on a compiled step without changing what the step runs.
Here the count is taken on the original module (``OptimizedModule._orig_mod``, inside any
DistributedDataParallel), outside the timed window, under ``FakeTensorMode``: its parameters
and buffers are replaced for the call by fake copies of the same shapes, dtypes and devices
(``torch.func.functional_call``, tied weights kept tied), the inputs are fake tensors of the
real batch's shapes, and the backward is ``torch.autograd.grad`` with respect to the fake
parameters. No kernel runs; no real parameter, gradient, buffer (batch-norm statistics) or
random-number state changes (the CPU and current CUDA generators are restored regardless). The
count uses the same operator formulas as the eager count, so a model counts the same compiled
or not (``tests/unit/measure/test_fakeflops.py``). A model sharded by FSDP2 (``--strategy fsdp``)
is counted whole: its parameters' fakes take the unsharded shapes and FSDP's forward hooks (the
all-gather of the real shards) are off for the count and put back after. A model whose forward needs real values
(data-dependent shapes: detection's box matching, triplet mining) cannot run on fake tensors:
it is then not counted, with the error as the reason.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.func import functional_call
from torch.utils._pytree import tree_leaves, tree_map_only

from scaleprobe.core.rank_record import RankFlops
from scaleprobe.measure.flops import StepFlops, flop_counter

METHOD = ("torch.utils.flop_counter.FlopCounterMode over one forward and backward of the eager "
          "module (the compiled model's original) on fake tensors of the real inputs' shapes "
          "(FakeTensorMode: nothing computed, nothing changed), outside the timed window; 2 "
          "FLOPs per multiply-add; attention's products on the full T x T scores, without "
          "recomputation; element-wise operators and the optimizer update count 0")


def eager_module(model: Any) -> Any:
    """The module a compiled (and possibly DDP- or DataParallel-wrapped) model runs:
    ``torch.compile``'s ``OptimizedModule`` and the data-parallel wrappers taken off."""
    wrappers = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)
    for _ in range(8):  # compile(DDP(compile(m))): a few layers at most
        inner = getattr(model, "_orig_mod", None)
        if inner is None and isinstance(model, wrappers):
            inner = model.module
        if inner is None:
            return model
        model = inner
    return model


def is_compiled(model: Any) -> bool:
    """``torch.compile(module)``'s wrapper, or a module compiled in place
    (``module.compile()``, whose ``__call__`` runs the compiled call)."""
    if getattr(model, "_compiled_call_impl", None) is not None:
        return True
    try:
        from torch._dynamo.eval_frame import OptimizedModule  # heavy: torch

        return isinstance(model, OptimizedModule)
    except Exception:  # noqa: BLE001  (no dynamo: nothing is compiled)
        return type(model).__name__ == "OptimizedModule"


class FakeRun:
    """One fake-tensor context for a module: ``fake(x)`` makes fake inputs (tensors anywhere in
    nested lists, tuples and dicts), ``count(body)`` runs ``body(call)`` under the FLOP
    counter, where ``call(*args, **kwargs)`` is the module's forward on fake parameters, and
    ``body`` returns the tensors to differentiate (a loss, or outputs, with ones as their
    gradient) with respect to those parameters."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.mode = FakeTensorMode(allow_non_fake_inputs=False)

    def fake(self, value: Any) -> Any:
        return tree_map_only(torch.Tensor, self.mode.from_tensor, value)

    def count(self, body: Callable[[Callable[..., Any]], list[Any]],
              training: bool | None = None, autocast: Any = None) -> int:
        mod = self.module
        with self.mode:
            params = {k: self._fake(p).detach().requires_grad_(p.requires_grad)
                      for k, p in mod.named_parameters()}
        buffers = {k: self._fake(b) for k, b in mod.named_buffers()}
        state = {**params, **buffers}

        def call(*args: Any, **kwargs: Any) -> Any:
            return functional_call(mod, state, args, kwargs)

        counter = flop_counter()  # the eager count's formulas, attention's included
        with (_kept(mod, training), _fsdp_hooks_off(mod), torch.enable_grad(), self.mode,
              counter):
            with autocast if autocast is not None else contextlib.nullcontext():
                outs = [o for o in body(call) if isinstance(o, torch.Tensor)
                        and o.requires_grad]
            wrt = [p for p in params.values() if p.requires_grad]
            if outs and wrt:
                torch.autograd.grad(outs, wrt, grad_outputs=[torch.ones_like(o) for o in outs],
                                    allow_unused=True)
        return int(counter.get_total_flops())

    def _fake(self, t: Any) -> Any:
        """A fake copy of a parameter or buffer; a sharded one (FSDP2's DTensor) as a plain
        tensor of its whole (unsharded) shape, the shape the forward computes with."""
        if hasattr(t, "full_tensor"):  # DTensor: its shape is the global one
            return torch.empty(t.shape, dtype=t.dtype, device=t.device)
        return self.mode.from_tensor(t)


@contextlib.contextmanager
def _fsdp_hooks_off(module: Any) -> Iterator[None]:
    """FSDP2's (``fully_shard``) forward hooks taken off the module's units for the count, put
    back in their order after: they all-gather the real shards before each unit's forward and
    register the backward's reduce-scatter, which neither runs nor is needed on fake tensors
    of the whole parameters."""
    saved: list[tuple[Any, dict[Any, Any]]] = []
    for m in module.modules():
        get = getattr(m, "_get_fsdp_state", None)
        state = get() if callable(get) else None
        for name in ("_pre_forward_hook_handle", "_post_forward_hook_handle"):
            handle = getattr(state, name, None)
            if handle is None:
                continue
            hooks = handle.hooks_dict_ref()
            if hooks is not None and handle.id in hooks:
                saved.append((hooks, dict(hooks)))
                del hooks[handle.id]
    try:
        yield
    finally:
        for hooks, before in reversed(saved):
            hooks.clear()
            hooks.update(before)


@contextlib.contextmanager
def _kept(module: Any, training: bool | None) -> Iterator[None]:
    """Train / eval flags of every submodule and the random-number state, as they were; a
    module compiled in place runs its eager call meanwhile."""
    flags = [(m, m.training) for m in module.modules()]
    inplace = module.__dict__.get("_compiled_call_impl")
    cpu = torch.get_rng_state()
    cuda = (torch.cuda.get_rng_state() if torch.cuda.is_available()
            and torch.cuda.is_initialized() else None)
    try:
        if training is not None:
            module.train(training)
        if inplace is not None:
            module._compiled_call_impl = None
        yield
    finally:
        if inplace is not None:
            module._compiled_call_impl = inplace
        for m, t in flags:
            m.training = t
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state(cuda)


def outputs(value: Any) -> list[Any]:
    """The tensors in a module's output (a tensor, or nested tuples, lists and dicts)."""
    return [v for v in tree_leaves(value) if isinstance(v, torch.Tensor)]


def count_step(model: Any, forward_loss: Callable[[Any, Any, Any], Any], x: Any, y: Any,
               autocast: Any = None) -> tuple[int | None, str | None]:
    """(FLOPs, None) of one training step's forward and backward of ``model``'s eager module on
    fake tensors shaped as ``x`` and ``y`` (``forward_loss(model, x, y)`` gives the loss, as
    the task computes it), or (None, why not)."""
    try:
        run = FakeRun(eager_module(model))
        fx, fy = run.fake(x), run.fake(y)
        total = run.count(lambda call: [forward_loss(call, fx, fy)], autocast=autocast)
    except Exception as e:  # noqa: BLE001  (a figure, never the run's failure)
        return None, f"not counted: the model does not run on fake tensors ({_short(e)})"
    if total <= 0:
        return None, "not counted: no matrix product or convolution in the step"
    return total, None


class CallCapture:
    """The calls of one compiled module in a step (``wrap``: the script's last warm-up step),
    kept as fake tensors of their inputs (metadata only: no memory held, nothing computed), and
    counted later (``count``) on the module's eager original, forward and backward, with ones
    as the outputs' gradient. The count is the module's own work: a loss computed outside it
    (element-wise, 0 FLOPs by the counter's convention) is not in it."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.calls: list[tuple[Any, Any]] = []
        self.training: bool | None = None
        self.error: str | None = None
        self._run: FakeRun | None = None

    def add(self, args: Any, kwargs: Any) -> None:
        if self.error is not None:
            return
        try:
            if self._run is None:
                self._run = FakeRun(eager_module(self.module))
            self.training = bool(self.module.training)
            self.calls.append((self._run.fake(tuple(args)), self._run.fake(dict(kwargs or {}))))
        except Exception as e:  # noqa: BLE001
            self.error = _short(e)

    def count(self) -> tuple[int | None, str | None]:
        """(FLOPs, None) of the captured calls, (None, why) when they cannot be counted, or
        (None, None) when the module was not called in the counted step."""
        if self.error is not None:
            return None, f"not counted: a compiled module's inputs could not be captured ({self.error})"
        if not self.calls or self._run is None:
            return None, None
        calls = self.calls

        def body(call: Callable[..., Any]) -> list[Any]:
            return [o for args, kwargs in calls for o in outputs(call(*args, **kwargs))]

        try:
            total = self._run.count(body, training=self.training)
        except Exception as e:  # noqa: BLE001
            return None, f"not counted: the model does not run on fake tensors ({_short(e)})"
        if total <= 0:
            return None, "not counted: no matrix product or convolution in the compiled module"
        return total, None


class CompiledStepFlops(StepFlops):
    """`run --compile`: no step runs under the counter; after the timed window
    (``after_loop``), one step of the eager module on fake tensors of the last batch's shapes."""

    @contextlib.contextmanager
    def around(self, step: int, timed: bool) -> Iterator[None]:
        yield

    def after_loop(self, p: Any, st: Any) -> None:
        if self.reason is not None:
            return
        if st.last_batch is None:
            self.reason = "not counted: no step ran"
            return
        x, y = st.last_batch
        self.flops, self.reason = count_step(p.model, p.task.forward_loss, x, y, p.autocast)

    def result(self) -> RankFlops:
        out = super().result()
        out.method = METHOD
        return out


def step_flops(compiled: bool, warmup_steps: int, towers: int = 1) -> StepFlops:
    """The built-in loop's FLOP count: the first warm-up step under the counter
    (``measure/flops.StepFlops``), or, for a compiled model, ``CompiledStepFlops``."""
    if compiled:
        return CompiledStepFlops(max(1, warmup_steps), towers)
    return StepFlops(warmup_steps, towers)


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text[:200]}" if text else type(e).__name__
