"""The DDP strategy's no_sync() really skips the all-reduce, on two gloo processes.

The exposed-communication calibration (engine.calibrate_comm) times synchronised steps against
steps under the strategy's no_sync(); with a no_sync that does not skip the all-reduce the
two cost the same and a run reports no communication at all. calibrate_comm's arithmetic is
tested against a fake clock in tests/unit/train/test_engine_calibration.py; this test holds the
real strategy to the premise, by the gradients rather than by the clock, so that it does not
depend on the machine's load (under two CPU hogs the timed difference is lost in the noise:
exposed 0.0, 0.0 and 4.9 ms of a 40 ms step, against 14 of 35 ms quiet, 2026-11-25)."""

from __future__ import annotations

import json
import multiprocessing as mp
import socket
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, port: int, folder: str) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn

    from scaleprobe.config.sections import DistConfig
    from scaleprobe.strategies.ddp import DDP

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    try:
        torch.manual_seed(0)  # the same initial weights on both ranks
        strategy = DDP(DistConfig(strategy="ddp", nproc=2), torch.device("cpu"))
        model = strategy.wrap(nn.Linear(3, 1))
        x = torch.full((4, 3), float(rank + 1))  # each rank its own batch

        def grads() -> list[float]:
            g = [p.grad.clone().flatten().tolist() for p in model.parameters()]
            model.zero_grad(set_to_none=True)
            return [v for row in g for v in row]

        with strategy.no_sync(model):
            model(x).sum().backward()
        local = grads()
        model(x).sum().backward()
        synced = grads()
        (Path(folder) / f"rank{rank}.json").write_text(json.dumps([local, synced]))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _two_ranks(folder: str) -> int:
    """Both ranks, forked from this process (the tests' CLI server's fork: torch imported, no
    tensor operation run, so no fresh interpreter imports it again); 1 if one failed."""
    port = _free_port()
    ranks = [mp.get_context("fork").Process(target=_rank, args=(r, port, folder))
             for r in (0, 1)]
    for r in ranks:
        r.start()
    for r in ranks:
        r.join(60)
    return 0 if all(r.exitcode == 0 for r in ranks) else 1


def test_no_sync_skips_the_all_reduce_and_sync_averages(tmp_path):
    """Catches a no-op no_sync (the strategy returning a null context instead of DDP's): the
    gradients under it would be the two ranks' average, equal on both, as after a synchronised
    backward."""
    from tests.conftest import run_forked

    p = run_forked(_two_ranks, tmp_path, timeout=90)
    assert p.returncode == 0, p.stderr[-3000:]
    (local0, synced0), (local1, synced1) = (
        json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert local0 != local1  # each rank kept its own gradient
    assert synced0 == pytest.approx(synced1)
    assert synced0 == pytest.approx([(a + b) / 2 for a, b in zip(local0, local1, strict=True)])
