"""Where the timed window starts and ends: the co-located jobs' gate, and a time-boxed window
that ends within a step of its time in one process. The engine's real loop drives the fake
step of ``test_engine_phases`` (every phase sleeps; a step takes about 210 ms)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from scaleprobe.config import runconfig as C
from scaleprobe.config.sections import RunConfig
from scaleprobe.measure.timer import StepTimer
from scaleprobe.train import engine
from scaleprobe.train.window_gate import pass_window_gate, server_ready, set_window_gate
from tests.unit.train.test_engine_phases import _parts

pytestmark = pytest.mark.timeout(60)


def _loop(cfg: RunConfig, distributed: bool = False):
    parts = _parts(cfg)
    parts.strategy.distributed = distributed
    timer = StepTimer("cpu")
    st = engine.train_loop(parts, timer, SimpleNamespace(advance=lambda st: None),
                           time.perf_counter)
    return st, timer


def test_the_window_gate_opens_the_timed_window_once(monkeypatch):
    """Co-located jobs wait for each other just before their first timed step, so their
    windows start together whatever their set-up and warm-up took. Bugs caught: a gate passed
    before the warm-up (the windows then start apart by the warm-up's difference), its wait
    counted in the window or the first step, or a gate left set for a later loop."""
    calls = []

    def gate(stopping):
        assert stopping() is False
        calls.append(time.perf_counter())
        time.sleep(0.3)

    set_window_gate(gate)
    try:
        st, timer = _loop(C.build({"steps": 3, "warmup_steps": 2, "progress": False}))
    finally:
        set_window_gate(None)
    assert len(calls) == 1
    assert st.window_t0 - calls[0] >= 0.3  # the window opened after the wait
    assert st.step == 5 and st.timed == 3
    assert max(timer.step_times()) < 0.3  # no step holds the wait
    st2, _ = _loop(C.build({"steps": 1, "warmup_steps": 1, "progress": False}))
    assert len(calls) == 1 and st2.timed == 1


def test_a_time_boxed_window_ends_within_a_step_in_one_process():
    """A 0.5 s window of ~210 ms steps: one process checks its time every step and stops
    after 3 steps (~0.63 s). Bug caught: the check every 5 steps, which ran it to 1.05 s -
    co-located jobs' windows then closed up to 5 steps apart, and a job ran alone at the end
    of the window it was measured "together" in. Ranks of a distributed run still agree every
    5 steps (one collective per check)."""
    cfg = C.build({"steps": "auto", "max_seconds": 0.5, "min_steps": 1, "warmup_steps": 1,
                   "progress": False, "stable_rel_ci": 0.0})
    st, _ = _loop(cfg)
    assert st.timed == 3, st.timed
    window = st.window_t1 - st.window_t0
    assert 0.5 <= window < 0.5 + 0.3, window
    st_d, _ = _loop(cfg, distributed=True)
    assert st_d.timed == 5


def test_a_stop_request_ends_the_wait_at_the_gate(tmp_path, monkeypatch):
    """SIGTERM (the co-location parent stopping every job) while a job waits for the others:
    the wait ends and the run stops at its next step, instead of sleeping until the parent's
    grace period runs out and kills it. A parent that is gone is an error at once."""
    import os
    import threading

    from scaleprobe.measure.outside import wait_at_gate

    barrier = {"ready": str(tmp_path / "a.ready"), "go": str(tmp_path / "go")}
    flag = threading.Event()
    threading.Timer(0.2, flag.set).start()
    t0 = time.monotonic()
    wait_at_gate(barrier, flag.is_set)
    assert 0.15 < time.monotonic() - t0 < 2.0 and (tmp_path / "a.ready").exists()
    # the parent at the start, then init: reparented (not the real parent, which is init
    # itself where the suite runs orphaned, and then never changes)
    parents = iter([os.getpid()])
    monkeypatch.setattr(os, "getppid", lambda: next(parents, 1))
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match="starting process is gone"):
        wait_at_gate(barrier)
    assert time.monotonic() - t0 < 1.0


def test_a_launched_job_is_ready_once_every_rank_is(tmp_path, monkeypatch):
    """The ranks of a launched job share its gate. Bug caught: one ready file for all of them,
    so the starter's go came once the first rank was ready, and the others' timed windows
    opened up to their own set-up later. Each rank (its place among its host's ranks, from
    torch's launcher) now says so in a file of its own, and the job's file follows the
    last."""
    import json
    import threading

    from scaleprobe.measure.outside import WINDOW_GATE_ENV, gate_from_env, wait_at_gate

    ready, go = tmp_path / "job.ready", tmp_path / "go"
    gates = []
    for rank in (1, 0):
        monkeypatch.setenv(WINDOW_GATE_ENV, json.dumps({"ready": str(ready), "go": str(go)}))
        monkeypatch.setenv("LOCAL_RANK", str(rank))
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
        gates.append(gate_from_env())
    assert gates[0]["ranks"] == "1/2" and gate_from_env() is None  # read once
    stop = threading.Event()
    first = threading.Thread(target=wait_at_gate, args=(gates[0], stop.is_set))
    first.start()
    time.sleep(0.1)
    assert (tmp_path / "job.ready.rank1").exists() and not ready.exists()
    go.touch()  # the go, as the starter would give it once the job is ready
    first.join(timeout=2)
    wait_at_gate(gates[1])
    assert ready.exists() and (tmp_path / "job.ready.rank0").exists()


def test_a_parameter_servers_rank_says_it_is_ready_without_waiting(tmp_path, monkeypatch):
    """A parameter server's rank takes no timed step, so it never reaches the loop's gate.
    Bug caught: with a ready file per rank, a co-located ps job was never ready, and its
    partners waited for the starter's time-out. The server says it is ready at once (here
    the last of its host's two ranks: the job's file follows) and waits for no go."""
    import json

    from scaleprobe.measure.outside import WINDOW_GATE_ENV

    ready, go = tmp_path / "job.ready", tmp_path / "go"
    (tmp_path / "job.ready.rank1").touch()  # the worker, at its gate already
    monkeypatch.setenv(WINDOW_GATE_ENV, json.dumps({"ready": str(ready), "go": str(go)}))
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    t0 = time.monotonic()
    server_ready()
    assert time.monotonic() - t0 < 1.0 and not go.exists()
    assert (tmp_path / "job.ready.rank0").exists() and ready.exists()


def test_a_step_that_fails_after_a_stop_was_asked_ends_the_run_interrupted(monkeypatch,
                                                                          capfd):
    """`run --compile` and Ctrl+C while inductor compiled: the terminal's SIGINT reached g++
    too, and the step raised CppCompileError. Bug caught: the run recorded `failed`,
    "InductorError: CppCompileError", for a run the user had stopped. Now the steps timed
    so far are kept and the run is interrupted, the step's error said in one line; an error
    with no stop asked before it is still the run's failure."""
    from scaleprobe.features.interrupt import StopRequest

    real, calls = engine._one_step, []

    def step(p, st, batch, tm):
        calls.append(1)
        if len(calls) == 4:
            if ask:
                stop.signame = "SIGINT"  # the handler ran: the stop was asked
            raise RuntimeError("CppCompileError: C++ compile error\nCommand: g++ ...")
        return real(p, st, batch, tm)

    def run(stop):
        parts = _parts(C.build({"steps": 8, "warmup_steps": 1, "progress": False}))
        return engine.train_loop(parts, StepTimer("cpu"), SimpleNamespace(advance=lambda st: None),
                                 time.perf_counter, stop=stop)

    monkeypatch.setattr(engine, "_one_step", step)
    for ask in (True, False):
        calls.clear()
        stop = StopRequest()
        if not ask:
            with pytest.raises(RuntimeError, match="CppCompileError"):
                run(stop)
            continue
        st = run(stop)
        assert st.interrupted and st.stop_reason == "interrupted" and st.step == 3
        err = capfd.readouterr().err
        assert ("as the SIGINT reached its subprocesses too: RuntimeError: CppCompileError: "
                "C++ compile error\n") in err, err


def test_a_launched_rank_waits_at_the_gate_it_was_told_of_once(tmp_path, monkeypatch):
    """Runs measured together whose training runs in launched ranks (plan --verify's one-rank
    DDP copies, co-located DDP jobs) are told their gate through the environment: the rank
    says it is ready and waits for the go before its first timed step, once; what it
    starts later is not told."""
    import json
    import os
    import threading

    from scaleprobe.measure.outside import WINDOW_GATE_ENV

    gate = {"ready": str(tmp_path / "r.ready"), "go": str(tmp_path / "go")}
    monkeypatch.setenv(WINDOW_GATE_ENV, json.dumps(gate))
    threading.Timer(0.2, (tmp_path / "go").touch).start()
    t0 = time.monotonic()
    pass_window_gate(lambda: False)
    assert 0.15 < time.monotonic() - t0 < 2.0 and (tmp_path / "r.ready").exists()
    assert WINDOW_GATE_ENV not in os.environ
    (tmp_path / "r.ready").unlink()
    pass_window_gate(lambda: False)
    assert not (tmp_path / "r.ready").exists()
