"""``--compile`` against eager, on one process: after the timed window, the same model's
forward and backward run compiled and uncompiled (``torch.compile``'s ``_orig_mod``) in turn
on the window's last batch, timed pass by pass: each compiled pass paired with the eager pass
right after it, so load that comes and goes falls on both sides of a pair, and the verdict
reads the pairs (``core/metrics.compile_vs_eager``) beside the window's own compiled steps.

Outside the timed window, so the window is never touched: each pass is bracketed by a
device synchronisation on CUDA (``perf_counter`` around it), the first pass is a warm-up and
not kept. The passes change nothing the run reports afterwards: the gradients are dropped
(``zero_grad(set_to_none=True)``, as after every step), no optimizer step is taken, and the
buffers (BatchNorm's running statistics) are put back as they were. Not run with more than
one process (the eager backward would all-reduce with ranks that are not running it), when
the run was interrupted, or on a parameter server's rank; the reason is recorded.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from scaleprobe.core.rank_record import EagerPasses

PASSES = 5  # timed eager passes (after one untimed)


def eager_passes(p: Any, last_batch: Any, passes: int = PASSES) -> EagerPasses:
    """Seconds per eager forward + backward, each after a compiled one (``compiled_fwd_bwd_s``,
    the same index: a pair), or none and the reason why not."""
    if p.strategy.world > 1:
        return EagerPasses(reason="not measured: more than one process (an eager backward "
                           "would wait for ranks that do not run it)")
    model = getattr(p.model, "_orig_mod", None)
    if model is None or last_batch is None:
        return EagerPasses(reason="not measured: no compiled model or no batch")
    x, y = last_batch
    saved = {k: b.detach().clone() for k, b in model.named_buffers()}
    sync = torch.cuda.synchronize if p.device.type == "cuda" else (lambda: None)
    times: list[float] = []
    compiled: list[float] = []

    def timed(m: Any) -> float:
        sync()
        t0 = time.perf_counter()
        with p.autocast:
            loss = p.task.forward_loss(m, x, y)
        loss.backward()
        sync()
        took = time.perf_counter() - t0
        p.optimizer.zero_grad(set_to_none=True)
        return took

    try:
        for i in range(passes + 1):
            c, e = timed(p.model), timed(model)
            if i:  # the first pair warms the eager path up: not kept
                compiled.append(c)
                times.append(e)
    except torch.OutOfMemoryError:
        p.optimizer.zero_grad(set_to_none=True)
        return EagerPasses(reason="not measured: the eager pass ran out of memory (compiled, "
                           "the step fits)")
    finally:
        with torch.no_grad():
            for k, b in model.named_buffers():
                b.copy_(saved[k])
    return EagerPasses(fwd_bwd_s=times, compiled_fwd_bwd_s=compiled)
