"""calibrate.calibrate_comm on a fake model and strategy whose sync cost is known exactly: a
fake clock advances by the forward and backward costs, and by the sync cost unless the
strategy's no_sync() context is active (as DDP's hooks skip the all-reduce under no_sync)."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest

from scaleprobe.config.runconfig import build
from scaleprobe.config.sections import DistConfig
from scaleprobe.core.errors import ConfigError
from scaleprobe.train.calibrate import calibrate_comm

FORWARD_S, BACKWARD_S, SYNC_S = 0.010, 0.020, 0.005


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class FakeStrategy:
    """Sync costs SYNC_S inside backward; ``no_sync()`` skips it unless ``broken`` (a no-op
    no_sync, the bug the calibration must not hide)."""

    has_overlapped_comm = True

    def __init__(self, world: int = 2, broken: bool = False) -> None:
        self.world, self.broken, self.skipping, self.barriers = world, broken, False, 0

    def no_sync(self, model):
        @contextlib.contextmanager
        def ctx():
            self.skipping = not self.broken
            try:
                yield
            finally:
                self.skipping = False
        return ctx()

    def barrier(self) -> None:
        self.barriers += 1


class Run:
    """The parts calibrate_comm touches, with a log of each step's mode and a cost per call
    that a test can shape (first-call warm-up, sync cost)."""

    def __init__(self, strategy: FakeStrategy, steps: int = 8, sync_s: float = SYNC_S,
                 first_extra_s: tuple[float, float] = (0.0, 0.0)) -> None:
        self.clock, self.modes = Clock(), []
        self.sync_s, self.first_extra = sync_s, list(first_extra_s)
        s = self

        class Loss:
            def backward(self) -> None:
                s.clock.t += BACKWARD_S + (0.0 if strategy.skipping else s.sync_s)

        class Task:
            def forward_loss(self, model, x, y):
                sync = not strategy.skipping
                s.modes.append("sync" if sync else "no_sync")
                i = 0 if sync else 1
                s.clock.t += FORWARD_S + s.first_extra[i]
                s.first_extra[i] = 0.0
                return Loss()

        self.parts = SimpleNamespace(
            strategy=strategy, model=None, task=Task(), autocast=contextlib.nullcontext(),
            device=SimpleNamespace(type="cpu"),
            scaler=SimpleNamespace(scale=lambda loss: loss),
            optimizer=SimpleNamespace(zero_grad=lambda set_to_none=True: None),
            cfg=SimpleNamespace(dist=SimpleNamespace(calibrate_comm=True,
                                                     calibration_steps=steps)))
        self.state = SimpleNamespace(last_batch=("x", "y"))

    def calibrate(self):
        return calibrate_comm(self.parts, self.state, clock=self.clock)


def test_exposed_comm_is_the_sync_that_no_sync_skips():
    """Catches a calibration that measures nothing: with a no_sync() that does not skip the
    sync (a no-op, under which the old integration test still passed), exposed comm must
    drop to 0, and with a working one it must be exactly the sync cost."""
    out = Run(FakeStrategy()).calibrate()
    assert out["exposed_s"] == pytest.approx(SYNC_S)
    assert out["sync_step_s"] == pytest.approx(FORWARD_S + BACKWARD_S + SYNC_S)
    assert out["no_sync_step_s"] == pytest.approx(FORWARD_S + BACKWARD_S)
    assert out["wrapper_overhead_s"] is None
    assert Run(FakeStrategy(broken=True)).calibrate()["exposed_s"] == pytest.approx(0.0)


def test_blocks_alternate_ending_synchronised_with_a_barrier_before_each():
    """Catches a calibration that runs all sync steps, then all no_sync steps: drift and
    other load would then land on one mode only; and one that ends under no_sync, which
    leaves FSDP holding unsynchronised gradients when the memory probe starts."""
    run = Run(FakeStrategy(), steps=3)
    out = run.calibrate()
    assert run.modes == ["no_sync", "sync"] * 3
    assert run.parts.strategy.barriers == 6
    assert len(out["samples"]["sync"]) == len(out["samples"]["no_sync"]) == 3


def test_first_sample_of_each_mode_is_dropped():
    """Catches the first step of each mode (mode switch, first-touch allocations) leaking
    into the medians: with two steps per mode the median would be the mean of a 1 s
    warm-up and a normal step."""
    out = Run(FakeStrategy(), steps=2, first_extra_s=(1.0, 0.5)).calibrate()
    assert out["samples"]["sync"][0] > 1.0 and out["samples"]["no_sync"][0] > 0.5
    assert out["sync_step_s"] == pytest.approx(FORWARD_S + BACKWARD_S + SYNC_S)
    assert out["exposed_s"] == pytest.approx(SYNC_S)


def test_negative_difference_is_clipped_at_zero():
    """Catches a negative exposed time (no_sync slower by noise) reaching the breakdown,
    where it would be added to backward and subtracted from comm."""
    out = Run(FakeStrategy(), sync_s=-0.004).calibrate()
    assert out["sync_step_s"] < out["no_sync_step_s"]
    assert out["exposed_s"] == 0.0 and out["sync_cost_s"] == 0.0


def test_one_process_has_wrapper_overhead_not_communication():
    """Catches vgg19_bn --nproc 1 under DDP reporting 217 ms (8%) of exposed communication:
    with one process the sync cost is the wrapper's bookkeeping, recorded apart."""
    out = Run(FakeStrategy(world=1)).calibrate()
    assert out["exposed_s"] == 0.0
    assert out["wrapper_overhead_s"] == pytest.approx(SYNC_S)


def test_no_calibration_without_overlapped_comm_or_when_switched_off():
    run = Run(FakeStrategy())
    run.parts.cfg.dist.calibrate_comm = False
    assert run.calibrate() is None
    run = Run(FakeStrategy())
    run.parts.strategy.has_overlapped_comm = False
    assert run.calibrate() is None and run.modes == []


def test_fewer_than_two_calibration_steps_is_a_config_error():
    """Catches calibration_steps = 1, which left nothing after dropping the first sample
    and crashed the run after training (median of an empty list)."""
    assert DistConfig().calibration_steps >= 2
    with pytest.raises(ConfigError, match="dist.calibration_steps: expected a whole number >= 2, got 1"):
        build({"strategy": "ddp", "nproc": 2, "dist.calibration_steps": 1})
