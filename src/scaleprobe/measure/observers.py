"""Optional observers of the training loop, called after each step on the rank that shows
progress: TensorBoard scalars every ``--summary-every`` seconds and torch.profiler captures
(Chrome traces that open in Perfetto and Holistic Trace Analysis) every ``--profile-every``
seconds. Both are off by default; when on, their small cost lands inside the timed window
(a loss read, which synchronises the device, every summary interval; profiled steps run
slower), so the result records that they were on.

The profiler's native library (kineto) writes its own log lines to the process's stderr
(``USDT: ... profiler_start`` at every capture, and on a machine without a GPU an ``ERROR``
that no GPU was found). Written straight to file descriptor 2, they break the progress bar.
They are captured instead: every one goes to ``traces/profiler-rank<r>.log``, and only
warnings and errors that say something are printed again, above the bar."""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from scaleprobe.measure import env as envmod

MAX_CAPTURES = 5  # bounds the traces' total size
PROFILE_SCHEDULE = {"wait": 1, "warmup": 1, "active": 3, "repeat": 1}
TOP_OPS = 15
# CPU figures need an interval the kernel's CPU clock resolves: a process's CPU time moves in
# clock ticks (10 ms on Linux), so over 10 ticks or more one tick either side is at most 20%
# of a core; over a shorter interval (the closing write can come 1 ms after the last one) one
# tick alone would read as 1000% of a core. Such an interval is left to the next reading.
MIN_CPU_TICKS = 10
# kineto's log lines: "LEVEL:2026-11-23 19:33:48 5967:5967 File.cpp:39] text"
KINETO_LINE = re.compile(r"(VERBOSE|INFO|WARNING|STAGE|ERROR|USDT):\d{4}-\d\d-\d\d ")
# printed at every capture for tracing tools, and where no GPU is present: not for the user
KINETO_NOISE = ("USDT:", "VERBOSE:", "INFO:", "STAGE:")
NO_GPU_NOISE = "gpuGetDeviceCount failed"


class Summaries:
    """TensorBoard scalars through torch.utils.tensorboard. Names say whose figure it is:
    ``host/`` the whole machine (every process on it), ``rank/`` this training process and
    its loader workers. ``host/machine_cpu_util_pct`` is not result.json's ``cpu_util_pct``
    (the run's own process tree, every rank, as % of all cores); ``rank/cpu_util_pct`` is
    that figure for this rank alone."""

    def __init__(self, log_dir: Path, every_s: float, batch: int,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        from torch.utils.tensorboard import SummaryWriter  # heavy: torch

        self.writer = SummaryWriter(str(log_dir))
        self.every_s, self.batch = every_s, batch
        self.clock = clock
        self._t = clock()
        self._step = 0
        self._samples = 0
        self._st: Any = None  # the loop's state at the last step seen
        self._me = psutil.Process()
        self._procs: dict[int, Any] = {}
        try:
            tick = 1.0 / os.sysconf("SC_CLK_TCK")
        except (AttributeError, ValueError, OSError):
            tick = 0.01
        self.min_cpu_s = MIN_CPU_TICKS * tick
        psutil.cpu_percent(None)  # both CPU readings count from here
        self._rank_cpu_pct()
        self._cpu_t = self._t

    def step(self, st: Any) -> None:
        self._st = st
        now = self.clock()
        if now - self._t < self.every_s or not st.losses:
            return
        self._write(st, now)

    def _write(self, st: Any, now: float) -> None:
        import torch  # heavy: torch: TensorBoard scalars, only with --summary-every

        w = self.writer
        w.add_scalar("train/loss", float(st.losses[-1]), st.step)
        samples = getattr(st, "samples", None)  # wrap: counted; the built-in loop: steps x batch
        done = (samples - self._samples if samples is not None
                else (st.step - self._step) * self.batch)
        w.add_scalar("perf/samples_per_s", done / (now - self._t), st.step)
        self._samples = samples or 0
        if now - self._cpu_t >= self.min_cpu_s:  # else: too short to resolve (MIN_CPU_TICKS)
            w.add_scalar("host/machine_cpu_util_pct", psutil.cpu_percent(None), st.step)
            w.add_scalar("rank/cpu_util_pct", self._rank_cpu_pct(), st.step)
            self._cpu_t = now
        w.add_scalar("rank/rss_bytes", self._me.memory_info().rss, st.step)
        if torch.cuda.is_available():
            w.add_scalar("device/allocated_bytes", torch.cuda.memory_allocated(), st.step)
            util = _gpu_util_pct()
            if util is not None:
                w.add_scalar("device/gpu_util_pct", util, st.step)
        self._t, self._step = now, st.step

    def _rank_cpu_pct(self) -> float:
        """CPU of this process and its loader workers since the last reading, % of all cores
        (as the run's monitor counts it)."""
        try:
            tree = [self._me, *self._me.children(recursive=True)]
        except psutil.Error:
            tree = [self._me]
        total = 0.0
        for p in tree:
            p = self._procs.setdefault(p.pid, p)  # the same object keeps its last reading
            try:
                total += p.cpu_percent(None)
            except psutil.Error:
                continue
        return total / envmod.cpu_count()

    def close(self) -> dict[str, Any]:
        st = self._st
        if st is not None and st.losses and st.step > self._step:
            self._write(st, self.clock())  # the last steps, however short the run
        self.writer.flush()
        self.writer.close()
        return {"tensorboard": self.writer.log_dir}


def _gpu_util_pct() -> float | None:
    """This process's GPU's utilisation from NVML (torch.cuda.utilization), if it answers."""
    import torch  # heavy: torch: NVML through torch.cuda, only where the GPU is read

    try:
        return float(torch.cuda.utilization())
    except Exception:  # noqa: BLE001  (no NVML, or a driver that does not say)
        return None


class Profiles:
    """A few steps under torch.profiler every ``every_s`` seconds, one Chrome trace each. The
    first capture starts at the first step, so a run shorter than ``every_s`` still gets one."""

    def __init__(self, trace_dir: Path, every_s: float, rank: int, cuda: bool) -> None:
        self.dir, self.every_s, self.rank, self.cuda = trace_dir, every_s, rank, cuda
        self.dir.mkdir(parents=True, exist_ok=True)
        self._next = time.perf_counter()
        self._prof: Any = None  # torch.profiler.profile while one is open
        self.traces: list[str] = []
        self.top_ops: list[dict[str, Any]] = []
        self._top_total = 0.0  # operator time of the capture top_ops comes from
        self.log = self.dir / f"profiler-rank{rank}.log"

    def _start(self) -> None:
        from torch.profiler import ProfilerActivity, profile, schedule  # heavy: torch

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        n = len(self.traces)
        path = self.dir / f"trace-rank{self.rank}-{n}.json"

        def ready(prof: Any) -> None:
            prof.export_chrome_trace(str(path))
            self.traces.append(str(path))
            self._top(prof)

        self._prof = profile(activities=acts, schedule=schedule(**PROFILE_SCHEDULE),
                             on_trace_ready=ready, record_shapes=False, with_stack=False)
        with self._native_log():
            self._prof.__enter__()
        self._left = sum(PROFILE_SCHEDULE[k] for k in ("wait", "warmup", "active"))

    def _top(self, prof: Any) -> None:
        """The top operators of the capture with the most operator time so far. A capture cut
        short when the run ends holds little or nothing; it must not replace a full one."""
        key = "self_device_time_total" if self.cuda else "self_cpu_time_total"
        rows = sorted((e for e in prof.key_averages() if not e.key.startswith("ProfilerStep")),
                      key=lambda e: getattr(e, key, 0), reverse=True)  # steps are not operators
        total = sum(getattr(e, key, 0) for e in rows)
        if total <= self._top_total:
            return
        self._top_total = total
        self.top_ops = [{"name": e.key, "self_time_ms": getattr(e, key, 0) / 1000.0,
                         "calls": e.count} for e in rows[:TOP_OPS]]

    @contextmanager
    def _native_log(self) -> Iterator[None]:
        """Around the profiler's calls: kineto's lines into the log (see the module
        docstring); anything else written to stderr meanwhile goes back to it unchanged."""
        with _fd2_captured() as captured:
            yield
        text = captured()
        if not text:
            return
        kept, said = [], []
        for line in text.splitlines(keepends=True):
            m = KINETO_LINE.search(line)  # at the start, or after a bar drawn meanwhile
            kept.append(line[:m.start()] if m else line)
            if m:
                said.append(line[m.start():])
        if "".join(kept):
            os.write(2, "".join(kept).encode(errors="replace"))
        if said:
            with self.log.open("a") as f:
                f.writelines(said)
        for line in said:
            if not line.startswith(KINETO_NOISE) and not (NO_GPU_NOISE in line and not self.cuda):
                print(f"profiler: {line.rstrip()}", file=sys.stderr)

    def step(self, st: Any) -> None:
        if self._prof is not None:
            with self._native_log():
                self._prof.step()
                self._left -= 1
                if self._left <= 0:
                    self._prof.__exit__(None, None, None)
                    self._prof = None
            if self._prof is None:
                self._next = time.perf_counter() + self.every_s
            return
        if len(self.traces) < MAX_CAPTURES and time.perf_counter() >= self._next:
            self._start()

    def close(self) -> dict[str, Any]:
        if self._prof is not None:
            with self._native_log():
                self._prof.__exit__(None, None, None)
            self._prof = None
        return {"traces": self.traces, "top_ops": self.top_ops}


@contextmanager
def _fd2_captured() -> Iterator[Any]:
    """File descriptor 2 points at a temporary file inside the block; yields a function that
    returns what was written there (after the block)."""
    sys.stderr.flush()
    saved = os.dup(2)
    out: list[str] = []
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield lambda: "".join(out)
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            out.append(tmp.read().decode(errors="replace"))


def build_observers(measure_cfg: Any, run_dir: str | None, rank: int, batch: int,
                    cuda: bool, summaries: bool = True) -> list[Any]:
    """Profiles on every training rank (one trace file per rank and capture); TensorBoard
    summaries on the rank that shows progress (``summaries``)."""
    if not run_dir:
        return []
    obs: list[Any] = []
    if measure_cfg.summary_every and summaries:
        obs.append(Summaries(Path(run_dir) / "tensorboard", measure_cfg.summary_every, batch))
    if measure_cfg.profile_every:
        obs.append(Profiles(Path(run_dir) / "traces", measure_cfg.profile_every, rank, cuda))
    return obs
