"""Profiles: which capture's top operators the result keeps, and where the profiler's own log
lines go."""

import os
import sys

import pytest
import torch

from scaleprobe.measure.observers import PROFILE_SCHEDULE, Profiles


def _steps_per_capture() -> int:
    """Calls of Profiles.step one capture takes: the call that starts it, then one per
    scheduled step (wait + warm-up + active)."""
    return 1 + sum(PROFILE_SCHEDULE[k] for k in ("wait", "warmup", "active"))


def test_a_capture_cut_short_at_the_end_keeps_the_full_ones_top_operators(tmp_path):
    """Bug: with --profile-every 5 over 40 steps the run ended just after the last capture
    began recording; that capture held next to no operator and replaced the top-operators
    list with [], so result.json had no paths.top_ops and the report no "Top operators"."""
    torch.manual_seed(0)
    a = torch.randn(192, 192)
    prof = Profiles(tmp_path, every_s=1e-9, rank=0, cuda=False)  # captures back to back
    full = _steps_per_capture()
    # one whole capture, then the next one's start, wait and warm-up: recording has begun
    for _ in range(full + 3):
        for _ in range(3):
            a = torch.tanh(a @ a)
        prof.step(None)
    out = prof.close()  # the run ends here, with no work in the second capture's record phase
    assert len(out["traces"]) == 2  # both captures were written
    names = [o["name"] for o in out["top_ops"]]
    assert "aten::mm" in names and "aten::tanh" in names, names
    assert out["top_ops"][0]["self_time_ms"] > 0


class _Talkative:
    """Stands in for torch.profiler.profile: writes what kineto writes, straight to fd 2."""

    def __init__(self, *args, on_trace_ready=None, **kwargs):
        self.ready = on_trace_ready

    def _say(self, text: str) -> None:
        os.write(2, text.encode())

    def __enter__(self):
        self._say("USDT:2026-11-23 19:33:48 5967:5967 SyncActivityProfilerHandler.cpp:39] "
                  "profiler_start\n")
        return self

    def step(self):
        os.write(2, b"\r\x1b[2K training 3/31 steps")  # a progress bar drawn meanwhile
        self._say("ERROR:2026-11-23 19:33:49 5967:5967 DeviceProperties.cpp:56] "
                  "gpuGetDeviceCount failed with code 35\n")
        self._say("WARNING:2026-11-23 19:33:49 5967:5967 CuptiActivityApi.cpp:99] "
                  "CUPTI buffer full\n")

    def __exit__(self, *exc):
        self._say("USDT:2026-11-23 19:33:49 5967:5967 SyncActivityProfilerHandler.cpp:46] "
                  "profiler_stop\n")


def test_profiler_log_lines_do_not_reach_the_terminal(tmp_path, capfd, monkeypatch):
    """Bug: kineto's "USDT: ... profiler_start" lines (and on a machine without a GPU an
    ERROR that none was found) were written to stderr in the middle of the progress bar.
    They go to traces/profiler-rank0.log; a warning that says something is still shown, on
    its own line; other stderr output written meanwhile is passed through."""
    import torch.profiler as tp

    monkeypatch.setattr(tp, "profile", _Talkative)
    prof = Profiles(tmp_path, every_s=1e-9, rank=0, cuda=False)
    for _ in range(3):
        prof.step(None)
    prof.close()
    sys.stderr.flush()
    err = capfd.readouterr().err
    assert "USDT" not in err and "profiler_start" not in err
    assert "gpuGetDeviceCount" not in err  # a CPU run: no GPU is expected
    shown = [x for x in err.split("profiler: ")[1:] if x.startswith("WARNING:")]
    assert len(shown) == 2 and all("CUPTI buffer full\n" in x for x in shown)
    assert "training 3/31 steps" in err  # the bar drawn meanwhile is not swallowed
    log = (tmp_path / "profiler-rank0.log").read_text()
    assert log.count("profiler_start") == 1 and log.count("profiler_stop") == 1
    assert "gpuGetDeviceCount" in log and log.startswith("USDT:")



def test_a_run_shorter_than_the_summary_period_still_gets_its_summary(tmp_path):
    """Bug caught: a run whose steps all fit in one --summary-every period (a fast model, a
    short run) wrote an empty TensorBoard log; the close writes the last steps' figures."""
    from types import SimpleNamespace

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from scaleprobe.measure.observers import Summaries

    s = Summaries(tmp_path / "tb", every_s=3600.0, batch=16)
    for step in range(1, 6):
        s.step(SimpleNamespace(step=step, losses=[2.0, 1.5]))
    out = s.close()
    acc = EventAccumulator(out["tensorboard"])
    acc.Reload()
    assert [e.step for e in acc.Scalars("train/loss")] == [5]


def test_cpu_figures_only_over_an_interval_the_cpu_clock_resolves(tmp_path):
    """Bug caught: the closing write came a few ms after the last periodic one, and one clock
    tick of CPU time over that interval read as hundreds of % of a core (a run's
    rank/cpu_util_pct above 100% of the machine). A write sooner than MIN_CPU_TICKS after the
    last CPU reading skips the CPU figures and leaves that interval to the next reading; the
    loss and throughput are written every time."""
    from types import SimpleNamespace

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from scaleprobe.measure import observers
    from scaleprobe.measure.observers import Summaries

    now = [1000.0]
    s = Summaries(tmp_path / "tb", every_s=0.001, batch=16, clock=lambda: now[0])
    assert s.min_cpu_s == pytest.approx(observers.MIN_CPU_TICKS / os.sysconf("SC_CLK_TCK"))
    for step, dt in enumerate((0.5, 0.002, 0.002, s.min_cpu_s, 0.002), start=1):
        now[0] += dt
        s.step(SimpleNamespace(step=step, losses=[2.0, 1.5]))
    acc = EventAccumulator(s.close()["tensorboard"])
    acc.Reload()
    assert [e.step for e in acc.Scalars("train/loss")] == [1, 2, 3, 4, 5]
    # step 4 is min_cpu_s after step 1's reading + 0.004 s; steps 2, 3, 5 come too soon
    for tag in ("rank/cpu_util_pct", "host/machine_cpu_util_pct"):
        assert [e.step for e in acc.Scalars(tag)] == [1, 4], tag

