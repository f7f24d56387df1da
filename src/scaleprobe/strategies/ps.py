"""Parameter server over torch.distributed point-to-point messages.

Rank 0 is the server: it holds the parameters (on its device, or on the CPU with
``--ps-device cpu``) and the optimizer. Ranks 1..N-1 are workers: each computes gradients on
its own shard, sends them to the server and receives fresh parameters. Every message crosses
the server's link, so that link carries (N-1) x the gradient bytes in and out per step.

sync:  the server waits for one gradient from every worker, applies their mean, sends the new
       parameters back to all. Workers move in lockstep.
async: the server applies each gradient as it arrives and answers that worker alone. Workers
       proceed independently; each update records its staleness (server updates applied
       between the parameters a worker used and the update its gradient made).
Messages are flat float32 tensors: gradients + [version, done flag]; parameters + [version].
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from scaleprobe.core.traits import TRAITS
from scaleprobe.measure.stats import median
from scaleprobe.strategies.ddp import SAMPLERS
from scaleprobe.strategies.single import Single


def _flat(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.reshape(-1).float() for t in tensors])


def _unflat_into(flat: torch.Tensor, tensors: list[torch.Tensor]) -> None:
    i = 0
    for t in tensors:
        n = t.numel()
        t.copy_(flat[i:i + n].view_as(t).to(t.dtype))
        i += n


class ParameterServer(Single):
    traits = TRAITS["ps"]
    name = "ps"
    distributed = True
    explicit_comm = True
    progress_rank = 1

    def __init__(self, dist_cfg: Any, device: torch.device) -> None:
        super().__init__(dist_cfg, device)
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.is_server = self.rank == 0
        self.mode = dist_cfg.ps_mode
        # gloo moves CPU tensors; nccl needs device tensors
        self.wire = self.device if dist.get_backend() == "nccl" else torch.device("cpu")
        self.version = 0
        self.stats: dict[str, Any] = {"role": "server" if self.is_server else "worker",
                                      "mode": self.mode}
        self._params: list[torch.Tensor] = []

    # --- setup -----------------------------------------------------------------------------
    def wrap(self, model: nn.Module) -> nn.Module:
        if self.is_server and self.cfg.ps_device == "cpu":
            model = model.cpu()
        self._params = [p for p in model.parameters()]
        flat = _flat([p.data for p in self._params]).to(self.wire)
        dist.broadcast(flat, src=0)
        if not self.is_server:
            _unflat_into(flat.to(self.device), [p.data for p in self._params])
        return model

    def sampler(self, dataset: Any, seed: int, shuffle: bool = True) -> Any:
        """Worker w reads shard w - 1 of N - 1 (the server takes no batch); ``dist.sampler``
        picks the sampler as for DDP, faults for the shard audit included."""
        if self.is_server:
            return None
        cls = SAMPLERS[self.cfg.sampler]
        return cls(dataset, num_replicas=self.world - 1, rank=self.rank - 1, shuffle=shuffle,
                   seed=seed, drop_last=True)

    @property
    def workers(self) -> int:
        return self.traits.training_ranks(self.world)

    # --- worker side: one step ---------------------------------------------------------------
    def before_optimizer(self, model: nn.Module) -> None:
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self._params]
        msg = torch.cat([_flat(grads), torch.tensor([float(self.version), 0.0],
                                                    device=grads[0].device)]).to(self.wire)
        dist.send(msg, dst=0)
        reply = torch.empty(msg.numel() - 1, device=self.wire)
        dist.recv(reply, src=0)
        self.version = int(reply[-1].item())
        _unflat_into(reply[:-1].to(self.device), [p.data for p in self._params])

    def optimizer_step(self, optimizer: torch.optim.Optimizer, scaler: Any) -> None:
        """Workers do not update: the server applied the step."""

    def sync_bytes(self, model: nn.Module) -> int:
        """Bytes of one push (and of one pull): every parameter as float32."""
        return 4 * sum(p.numel() for p in self._params)

    def coll_device(self) -> torch.device:
        return self.wire

    def finish_worker(self) -> None:
        n = sum(p.numel() for p in self._params)
        msg = torch.zeros(n + 2, device=self.wire)
        msg[-1] = 1.0
        dist.send(msg, dst=0)

    # --- server side -------------------------------------------------------------------------
    def serve(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        n = sum(p.numel() for p in self._params)
        buf = torch.empty(n + 2, device=self.wire)
        done: set[int] = set()
        per_worker = {w: 0 for w in range(1, self.world)}
        staleness: list[int] = []
        stale_by: dict[int, list[int]] = {w: [] for w in range(1, self.world)}
        busy_s = wait_s = 0.0
        pending: list[tuple[int, torch.Tensor, int]] = []
        arrived: dict[int, float] = {}  # this round's pushes: when each was in
        lags: dict[int, list[float]] = {w: [] for w in range(1, self.world)}
        while len(done) < self.workers:
            t0 = time.perf_counter()
            src = dist.recv(buf, src=None)
            t1 = time.perf_counter()
            wait_s += t1 - t0
            if buf[-1].item() > 0.5:
                done.add(src)
            else:
                pending.append((src, buf[:-2].clone(), int(buf[-2].item())))
                arrived[src] = t1
            active = self.workers - len(done)
            if not pending or (self.mode == "sync" and len(pending) < active):
                continue
            if len(arrived) == self.workers:  # a round with every worker: who came last
                first = min(arrived.values())
                for w, t in arrived.items():
                    lags[w].append(t - first)
            arrived = {}
            grads = torch.stack([g for _, g, _ in pending]).mean(0)
            self._apply(optimizer, grads)
            for w, _, v in pending:
                staleness.append(self.version - 1 - v)
                stale_by[w].append(self.version - 1 - v)
            reply = torch.cat([_flat([p.data for p in self._params]).to(self.wire),
                               torch.tensor([float(self.version)], device=self.wire)])
            for w, _, _ in pending:
                per_worker[w] += 1
                dist.send(reply, dst=w)
            pending = []
            busy_s += time.perf_counter() - t1
        self.stats.update({"updates": self.version, "per_worker_updates":
                           {str(k): v for k, v in per_worker.items()},
                           "staleness_mean": sum(staleness) / len(staleness) if staleness else 0,
                           "staleness_max": max(staleness, default=0),
                           "per_worker_staleness": {
                               str(w): {"mean": sum(v) / len(v) if v else 0,
                                        "max": max(v, default=0)}
                               for w, v in stale_by.items()},
                           "server_wait_s": wait_s, "server_busy_s": busy_s,
                           "grad_bytes": 4 * n,
                           # per worker: the median time its push came in after the
                           # round's first (sync rounds with every worker): the one the
                           # others wait for has the largest
                           "per_worker_arrival_lag_s": {
                               str(w): median(v) if v else None for w, v in lags.items()}})
        return self.stats

    def _apply(self, optimizer: torch.optim.Optimizer, flat_grad: torch.Tensor) -> None:
        i = 0
        for p in self._params:
            k = p.numel()
            p.grad = flat_grad[i:i + k].view_as(p).to(p.device, p.dtype)
            i += k
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        self.version += 1

    def extra_metrics(self) -> dict[str, Any]:
        return dict(self.stats)

    def gather(self, obj: Any) -> list[Any] | None:
        out = [None] * self.world if self.rank == 0 else None
        dist.gather_object(obj, out, dst=0)
        return out

    def barrier(self) -> None:
        dist.barrier()

    def any_true(self, flag: bool) -> bool:
        return flag  # workers stop on a fixed step count; the server serves until all are done
