"""What ``scaleprobe wrap`` sees inside a user's script, through PyTorch's public hooks and two
small patches on the DataLoader's iterator (its ``__next__``, and the sampler's
``_next_index`` for the indices a rank read: ``patches.py``), installed before the script's
first line; what each loader handed out is kept as ``loaderlog.py`` records it.

A step is one call of the optimizer that stepped first, cut on ``perf_counter`` into phases
that add up to it exactly (data, forward, optimizer, h2d, backward, and comm under DDP on the
CPU through ``ddp_comm.py``); the last warm-up step is counted for FLOPs. docs/WRAP.md ("What
is measured, and how") says what each phase holds and how the outermost modules' global hooks
give way to per-module ones. The hooks never make a compiled frame break, fail a guard or
recompile (capture.py says how): once the script has compiled anything, the global hooks stay
(dynamo guards on them) and that step's FLOPs are counted on fake tensors after the script.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any

from scaleprobe.config.sections import GLOO_IO_THREAD
from scaleprobe.measure.env import minor_faults, set_gloo_io, threads_cpu_s, threads_named
from scaleprobe.measure.monitor import note_file_rss
from scaleprobe.wrap.capture import CallCounts, compiled_frames, compiling, not_frames
from scaleprobe.wrap.loaderlog import Epoch, LoaderLog, batch_len, ints, sampler_name, token_len
from scaleprobe.wrap.patches import patch_backward, patch_loader

STEP_PHASES = ("data", "h2d", "forward", "backward", "optimizer")
FLOPS_METHOD = ("torch.utils.flop_counter.FlopCounterMode over the script's last warm-up step "
                "(all it ran between two optimizer steps; 2 FLOPs per multiply-add; "
                "element-wise operators and the optimizer update count 0)")
CAPTURED = ("; every call of the script's outermost modules (a compiled model, a loss module) "
            "in its last warm-up step (work outside modules is not counted)")


def _never() -> bool:
    return False


# torch.compiler.is_compiling once torch is there (``Recorder.install``): True while dynamo
# traces a hook, which then returns at once and leaves nothing in the graph
_compiling = _never


class StopScript(BaseException):  # noqa: N818  (not an error: the requested end of a script)
    """Raised from the optimizer's post hook after ``--steps`` timed steps; a BaseException, so
    the script's own ``except Exception`` does not swallow it."""


class Recorder:
    """Collects one rank's steps and reads; ``install`` puts its hooks in place."""

    def __init__(self, warmup_steps: int, stop_after: int | None = None, beat: Any = None,
                 gloo_io: str = "default") -> None:
        self.warmup = warmup_steps
        self.gloo_io = gloo_io
        self.stop_after = stop_after
        self.beat = beat
        self.step_times: list[float] = []
        self.phases: dict[str, list[float]] = {p: [] for p in STEP_PHASES}
        self.samples: list[int] = []
        self.walls: list[float] = []  # time.time() at the end of each step
        # the process's minor page faults at the first step's start and each step's end
        self.faults0: int | None = None
        self.faults: list[int] = []
        # gloo's socket threads (found at the first step: the script's groups exist by then)
        # and their CPU time then and at each step's end; None where there are none
        self.io_tids: list[int] = []
        self.io0: float | None = None
        self.io: list[float | None] = []
        self.wall0: float | None = None  # time.time() at the start of the first step
        self.forward_seen = self.data_seen = False
        self.loaders: dict[int, LoaderLog] = {}
        self.top_params: dict[int, int] = {}
        self._start: float | None = None
        self._events: list[tuple[str, float, float]] = []
        self._depth = 0
        self._fwd_t0: float | None = None
        self._opt_t0: float | None = None
        self._primary: int | None = None
        self._in_data = 0
        self._pending_loader: Any = None  # the loader whose iterator is being made
        self._step_samples = 0
        # token ids [B, T] as batches (an LM script): T, read from the first batch taken;
        # None: not token batches (or none taken yet)
        self.tokens_per_sample: int | None = None
        self._tokens_read = False
        # per step, the loaders (their LoaderLog ids) whose epoch's first batch it took, each
        # with its own wait for that batch (its iter() and first __next__)
        self.step_epoch_starts: list[dict[int, float]] = []
        self._step_starts: dict[int, float] = {}
        self._handles: list[Any] = []
        self._global: list[Any] = []  # the global module hooks, until the outermost are known
        self._top: dict[int, Any] = {}  # the outermost modules seen, by id
        self._new_top = False  # this step called an outermost module not seen before
        self.observers: list[Any] = []  # --summary-every / --profile-every (measure/observers)
        self.last_loss: Any = None  # the last scalar a backward() started from
        # FLOPs of the last warm-up step: counted from the end of the step before it
        self.count_at = warmup_steps - 1 if warmup_steps >= 2 else None
        self.flops: int | None = None
        self.flops_reason: str | None = (
            None if self.count_at is not None else
            "not counted: wrap counts on a warm-up step after the first (--warmup-steps 2 or more)")
        self.flops_device: str | None = None  # where the counted step's model ran
        self.flops_amp = "none"  # bf16 / fp16 under autocast or in those dtypes
        self._flop_mode: Any = None
        self.comm: Any = None  # wrap/ddp_comm.CommTimer: DDP's all-reduces, through its comm hook
        self.comm_exposed: list[float | None] = []  # per step; None: nothing was sent
        self.comm_in_flight: list[float | None] = []
        self.ends: list[float] = []  # perf_counter at the end of each step
        self.opt_compiled = False  # an optimizer step ran inside compiled code
        self.t_first: float | None = None  # perf_counter at the start of the first step
        self.watch: Any = None  # measure/compiled.CompileWatch: the script's compilations
        self._compiled: set[int] = set()  # the ids of compiled outermost modules
        self.calls = CallCounts()  # with anything compiled: the counted step's module calls
        self.flops_method = FLOPS_METHOD

    # --- events ---------------------------------------------------------------------------
    def _begin(self, t: float) -> None:
        if self._start is None:
            self._start = self.t_first = t
            self.wall0 = time.time() - (time.perf_counter() - t)
            self.faults0 = minor_faults()
            set_gloo_io(self.gloo_io)
            self.io_tids = threads_named(GLOO_IO_THREAD)
            self.io0 = threads_cpu_s(self.io_tids) if self.io_tids else None

    def _data(self, t0: float, t1: float) -> None:
        self._begin(t0)
        self._events.append(("data", t0, t1))
        if self.beat is not None:  # progress, for the launcher's stall check
            self.beat.passed("data")

    def fwd_pre(self, module: Any, _args: Any) -> None:
        if _compiling():  # traced into a compiled frame: leave nothing there
            return
        if self._in_data:  # a transform module run by the loader: data, not forward
            return
        if self._depth == 0:
            t = time.perf_counter()
            self._begin(t)
            self._fwd_t0 = t
            if id(module) not in self.top_params:
                self.top_params[id(module)] = sum(p.numel() for p in module.parameters())
            if self._flop_mode is not None and self.flops_device is None:
                self._flops_where(module)
            if self._global and id(module) not in self._top:
                self._top[id(module)] = module
                self._new_top = True
                if _is_compiled(module):  # hooked now, before dynamo compiles it
                    self._compiled.add(id(module))
                    self._handles.append(self.calls.watch(module, self._loading,
                                                          self._flops_where))
        self._depth += 1

    def fwd_post(self, _module: Any, _args: Any, _out: Any) -> None:
        if _compiling():
            return
        if self._in_data or self._depth == 0:
            return
        self._depth -= 1
        if self._depth == 0 and self._fwd_t0 is not None:
            self._events.append(("forward", self._fwd_t0, time.perf_counter()))
            self._fwd_t0 = None
            self.forward_seen = True
            if self.beat is not None:
                self.beat.passed("forward")

    def opt_pre(self, opt: Any, _args: Any, _kwargs: Any) -> None:
        if _compiling():  # a compiled optimizer step: traced, it must leave nothing there
            self.opt_compiled = True  # (replayed by dynamo: says why no step was seen)
            return
        if self._primary is None:
            self._primary = id(opt)
        self._depth, self._fwd_t0 = 0, None  # a forward that raised never closed
        self._opt_t0 = time.perf_counter()
        self._begin(self._opt_t0)

    def opt_post(self, opt: Any, _args: Any, _kwargs: Any) -> None:
        if _compiling():
            return
        t = time.perf_counter()
        self._events.append(("optimizer", self._opt_t0 if self._opt_t0 is not None else t, t))
        if id(opt) == self._primary:
            self._end_step(t)

    def _end_step(self, t: float) -> None:
        if self._flop_mode is not None:
            self.flops_end()
        self.calls.capturing = False
        start = self._start if self._start is not None else t
        ev = self._events
        total = {p: 0.0 for p in STEP_PHASES}
        for kind, a, b in ev:
            total[kind] += max(0.0, min(b, t) - max(a, start))
        fwd = [a for kind, a, _ in ev if kind == "forward"]
        if fwd:
            first = max(start, min(fwd))
            before = sum(max(0.0, min(b, first) - max(a, start)) for k, a, b in ev if k == "data")
            total["h2d"] = max(0.0, first - start - before)
        dur = t - start
        total["backward"] = max(0.0, dur - sum(total.values()))
        exposed = in_flight = None
        if self.comm is not None:
            from scaleprobe.measure.comm.hook import step_figures  # heavy: numpy

            got = step_figures(self.comm.take())
            if got is not None:  # the wait on the network is inside backward: split it out
                exposed, in_flight = min(got[0], total["backward"]), got[1]
                total["backward"] -= exposed
        self.comm_exposed.append(exposed)
        self.comm_in_flight.append(in_flight)
        self.step_times.append(dur)
        for p in STEP_PHASES:
            self.phases[p].append(total[p])
        self.samples.append(self._step_samples)
        self.walls.append(time.time())
        self.faults.append(minor_faults())
        self.io.append(threads_cpu_s(self.io_tids) if self.io_tids else None)
        self.ends.append(t)
        self.step_epoch_starts.append(self._step_starts)
        self._events, self._start, self._step_samples = [], t, 0
        self._step_starts = {}
        if self._global:
            self._narrow()
        if self.beat is not None:
            self.beat.step_done(len(self.step_times))
        if self.observers:
            self._observe()
        if len(self.step_times) == self.count_at:
            self._flops_begin()
        if len(self.step_times) == self.warmup - 1 >= 1:
            # after a full step, inside the warm-up: the next step starts at ``t``, so this
            # reading is timed with a warm-up step, never a timed one (measure/monitor.py)
            note_file_rss()
        if self.stop_after is not None and len(self.step_times) - self.warmup >= self.stop_after:
            raise StopScript()

    def _narrow(self) -> None:
        """After a step that called only outermost modules seen before (and no sooner than
        the end of the warm-up): hooks on those modules replace the global ones, which made
        every submodule call take PyTorch's slow path. A script that makes a new outermost
        module every step (``nn.CrossEntropyLoss()(out, y)``) keeps the global hooks."""
        new, self._new_top = self._new_top, False
        if new or not self._top or len(self.step_times) < max(2, self.warmup):
            return
        if self._compiled or (self.watch is not None and self.watch.compiled):
            return  # dynamo guards on the global hooks: changing them would recompile
        for h in self._global:
            h.remove()
        self._handles = [h for h in self._handles if h not in self._global]
        self._global = []
        for m in self._top.values():
            self._handles += [m.register_forward_pre_hook(self.fwd_pre),
                              m.register_forward_hook(self.fwd_post)]

    # --- FLOPs ------------------------------------------------------------------------------
    def _flops_begin(self) -> None:
        """Enters the FLOP counter for the next step. Once anything is compiled, the step must
        not run under it (a frame called under a dispatch mode is not compiled): the calls of
        the outermost modules in it are captured instead, counted after the script
        (``count_captured``)."""
        if self.flops_reason is not None or self.flops is not None:
            return
        if self._compiled or (self.watch is not None and self.watch.compiled) \
                or compiled_frames():
            from scaleprobe.measure.fakeflops import METHOD  # heavy: torch

            self._handles += self.calls.begin(self._top.values(), self._loading,
                                              self._flops_where)
            self.flops_method = METHOD + CAPTURED
            return
        try:
            # heavy: torch: loaded when the hooks go in, in the script's own process
            from scaleprobe.measure.flops import flop_counter  # with the CPU attention formulas

            mode = flop_counter()
            mode.__enter__()
        except Exception as e:  # noqa: BLE001  (a figure, never the script's failure)
            self.flops_reason = f"not counted: {type(e).__name__}: {e}"
            return
        self._flop_mode = mode

    def flops_end(self, complete: bool = True) -> None:
        """Leaves the counter: at the end of the counted step, or (``complete`` False) when
        the script ended inside it, which counts nothing."""
        mode, self._flop_mode = self._flop_mode, None
        if mode is None:
            return
        try:
            mode.__exit__(None, None, None)
            total = int(mode.get_total_flops())
        except Exception as e:  # noqa: BLE001
            self.flops_reason = f"not counted: {type(e).__name__}: {e}"
            return
        if not complete:
            self.flops_reason = "not counted: the script ended inside the counted step"
        elif total > 0:
            self.flops = total
        else:
            self.flops_reason = "not counted: no matrix product or convolution in the step"

    def _loading(self) -> bool:
        return bool(self._in_data)

    def count_captured(self) -> None:
        """After the script: the FLOPs of the module calls captured in the counted step
        (capture.py), forward and backward on the eager modules with fake tensors."""
        if not self.calls.active or self.flops is not None or self.flops_reason is not None:
            return
        self._in_data += 1  # the eager modules' calls it makes are not the script's
        try:
            self.flops, why = self.calls.count()
        finally:
            self._in_data -= 1
        self.flops_reason = why

    def _flops_where(self, module: Any) -> None:
        """The device and dtype of the counted step's model, for the peak its MFU is held
        against: its first parameter's device; bf16 / fp16 under autocast or as its dtype.
        Once known, kept."""
        if self.flops_device is not None:
            return
        try:
            import torch  # heavy: torch: loaded when the hooks go in, in the script's own process

            p = next(module.parameters(), None)
            if p is None:
                return
            self.flops_device = str(p.device)
            kind = p.device.type
            dtype = torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else p.dtype
            self.flops_amp = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, "none")
        except Exception:  # noqa: BLE001  (an older torch: no peak, never a failure)
            self.flops_device = None

    def _observe(self) -> None:
        """TensorBoard summaries and profiler captures, as in `run`: they see the step count,
        the samples so far and the last loss; an observer's failure never stops the script."""
        loss = self.last_loss
        st = _State(len(self.step_times), [loss] if loss is not None else [], sum(self.samples))
        for ob in list(self.observers):
            try:
                ob.step(st)
            except Exception as e:  # noqa: BLE001
                print(f"scaleprobe: {type(ob).__name__} stopped: {type(e).__name__}: {e}",
                      file=sys.stderr)
                self.observers.remove(ob)

    # --- the DataLoader ---------------------------------------------------------------------
    def _epoch(self, it: Any) -> Epoch:
        si = getattr(it, "_sampler_iter", None)
        if getattr(it, "_sp_si", None) is not si or getattr(it, "_sp_ep", None) is None:
            log = self._log_of(it)
            ep = Epoch()
            log.epochs.append(ep)
            it._sp_si, it._sp_ep, it._sp_log = si, ep, log
        return it._sp_ep

    def _log_of(self, it: Any) -> LoaderLog:
        owner = getattr(it, "_index_sampler", None)
        log = self.loaders.get(id(owner))
        if log is None or log.owner is not owner:
            loader = getattr(it, "_sp_loader", None) or self._pending_loader
            try:
                n = len(it._dataset)
            except (TypeError, AttributeError, NotImplementedError):
                n = None
            log = LoaderLog(sampler=sampler_name(loader) if loader is not None else "?",
                            dataset_len=n, batch_size=getattr(loader, "batch_size", None),
                            workers=int(getattr(it, "_num_workers", 0) or 0), owner=owner)
            self.loaders[id(owner)] = log
        return log

    def next_index(self, it: Any, idx: Any) -> None:
        self._epoch(it).dispatched.append(ints(idx))

    def consumed(self, it: Any, batch: Any, waited: float = 0.0) -> None:
        self.data_seen = True
        ep, log = getattr(it, "_sp_ep", None), getattr(it, "_sp_log", None)
        n = 0
        if ep is not None:
            ep.consumed += 1
            got = ep.dispatched[ep.consumed - 1] if ep.consumed <= len(ep.dispatched) else None
            n = len(got) if got is not None else 0
        if log is not None:
            log.batches += 1
            if ep is not None and ep.consumed == 1:  # a loader prefetches none across epochs
                self._step_starts[id(log)] = waited + (getattr(it, "_sp_iter_s", 0.0) or 0.0)
        self._step_samples += n or batch_len(batch)
        if not self._tokens_read:  # once: the first batch says what the batches hold
            self._tokens_read = True
            self.tokens_per_sample = token_len(batch)

    def exhausted(self, it: Any) -> None:
        ep = getattr(it, "_sp_ep", None)
        if ep is not None:
            ep.complete = True

    # --- installing -------------------------------------------------------------------------
    def install(self, loss: bool = True) -> Recorder:
        """The hooks; ``loss``: also keep the scalar each ``backward()`` starts from (only the
        observers read it: without --summary-every the patch is left out, and its cost)."""
        # heavy: torch: loaded when the hooks go in, in the script's own process
        import torch.nn.modules.module as mm
        import torch.optim.optimizer as oo
        from torch.utils.data import dataloader as dl

        global _compiling
        _compiling = compiling()
        not_frames(Recorder.fwd_pre, Recorder.fwd_post, Recorder.opt_pre, Recorder.opt_post)

        self._global = [mm.register_module_forward_pre_hook(self.fwd_pre),
                        mm.register_module_forward_hook(self.fwd_post)]
        self._handles = [*self._global, oo.register_optimizer_step_pre_hook(self.opt_pre),
                         oo.register_optimizer_step_post_hook(self.opt_post)]
        patch_loader(dl, self)
        if loss:
            patch_backward(self)
        return self

    def train_loader(self) -> LoaderLog | None:
        """The loader that fed training: the one that handed out the most batches."""
        logs = [log for log in self.loaders.values() if log.batches]
        return max(logs, key=lambda log: log.batches) if logs else None


def _is_compiled(module: Any) -> bool:
    from scaleprobe.measure.fakeflops import is_compiled  # heavy: torch

    return is_compiled(module)


@dataclass
class _State:
    """What the observers read of a step (the built-in loop's LoopState has the same names)."""

    step: int
    losses: list[Any]
    samples: int
