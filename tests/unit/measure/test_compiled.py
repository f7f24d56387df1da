"""Compile events (measure/compiled.py): where each falls against the timed window, which are
recompiles, the result's figures, and a real recompile caught inside a window."""

import pytest
import torch

from scaleprobe.core.invariants import check_run, window_line
from scaleprobe.core.rank_record import CompileEvent, RankCompile
from scaleprobe.core.result_model import RunResult
from scaleprobe.measure.compiled import (
    AFTER,
    WARMUP,
    WINDOW,
    CompileWatch,
    Event,
    block,
    classify,
    result_fields,
    summary_line,
)


def _phases(events, window, ends=None, warmup=0):
    return [(e.phase, e.step, e.timed_step) for e in classify(events, window, ends, warmup)]


def test_events_on_either_side_of_the_window_boundaries():
    """An event that ends exactly when the window opens is warm-up; one that is still running
    when it opens is inside (its tail is in the first timed step); one that starts when the
    window closes is after. Steps come from the step ends (3 warm-up steps ending at 1, 2, 3).
    Bugs caught: an event classified by its start alone (a compile that began in the warm-up
    and ran into the window called warm-up), or the boundary counted twice."""
    evs = [Event("dynamo", "0/0", 0.5, 3.0), Event("backward", "0/0", 2.5, 3.2),
           Event("dynamo", "0/1", 4.1, 4.3), Event("dynamo", "1/0", 6.0, 6.5)]
    ends = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert _phases(evs, (3.0, 6.0), ends, warmup=3) == [
        (WARMUP, 0, None), (WINDOW, 2, None), (WINDOW, 4, 1), (AFTER, None, None)]
    # no window opened (stopped in the warm-up): everything was before it
    assert [p for p, _, _ in _phases(evs, (None, None))] == [WARMUP] * 4
    # a window still open at the end (an interrupted run's last step)
    assert _phases(evs, (3.0, None))[-1][0] == WINDOW


def test_recompiles_are_told_by_the_compile_id():
    """``frame/n``: n > 0 recompiles frame ``frame``; a backward compiled lazily carries its
    forward's id and is not a recompile; an id this torch did not give is unknown (None), never
    guessed as "no recompile"."""
    assert Event("dynamo", "0/0", 0, 1).recompile is False
    assert Event("dynamo", "3/2", 0, 1).recompile is True
    assert Event("dynamo", "0/1_1", 0, 1).recompile is True  # a restarted analysis
    assert Event("backward", "0/1", 0, 1).recompile is False
    assert Event("compile", None, 0, 1).recompile is None


def test_result_fields_from_a_rank_record():
    raw = RankCompile(graph_breaks=2, events=classify(
        [Event("dynamo", "0/0", 0.0, 5.0), Event("backward", "0/0", 5.0, 8.0),
         Event("dynamo", "0/1", 10.5, 11.5)], (10.0, 20.0), [9.0, 10.0, 11.0, 12.0], 2,
        {"0/1": "0/0: tensor 'x' size mismatch at index 0. expected 8, actual 6"}))
    m, why = result_fields(raw, "not compiled")
    assert m == {"compile_time_s": 9.0, "compiles": 2, "recompiles": 1,
                 "compiles_in_window": 1, "recompiles_in_window": 1,
                 "compile_in_window_s": 1.0, "graph_breaks": 2}
    assert why == {}
    line = window_line(block(raw, None)["events"])  # as the result holds them
    assert line.startswith("1 recompile inside the timed window, 1.00 s in timed step 1")
    assert "size mismatch" in line
    # another rank recompiled twice in the window: the most of any rank is the run's
    other = RankCompile(events=[CompileEvent(phase=WINDOW, recompile=True, duration_s=1.5,
                                             kind="dynamo")] * 2)
    m2, _ = result_fields(raw, "not compiled", [raw, other])
    assert (m2["compiles_in_window"], m2["recompiles_in_window"], m2["compile_in_window_s"]) == (
        2, 2, 3.0)
    # nothing compiled: every figure null with the reason, never 0
    m3, why3 = result_fields(RankCompile(), "not compiled (add --compile)")
    assert set(m3.values()) == {None} and set(why3.values()) == {"not compiled (add --compile)"}


def test_a_compile_in_the_window_is_an_invariant_and_a_summary_line():
    events = classify([Event("dynamo", "0/0", 0.0, 5.0), Event("dynamo", "0/1", 10.5, 11.5)],
                      (10.0, 20.0), [9.0, 10.0, 11.0], 2)
    m, _ = result_fields(RankCompile(graph_breaks=0, events=events), "-")
    rec = RunResult(status="ok", compile={"mode": "default",
                                          "events": [e.to_dict() for e in events]})
    for k, v in m.items():
        setattr(rec.metrics, k, v)
    broken = [v for v in check_run(rec) if v["name"] == "compile in window"]
    assert len(broken) == 1 and "1 recompile inside the timed window" in broken[0]["detail"]
    line = summary_line(rec.metrics.to_dict(), rec.compile, {})
    assert line.startswith("compile: 5.0 s in the warm-up (2 frames compiled, 1 recompile, "
                           "0 graph breaks), mode default; 1.00 s INSIDE the timed window")
    rec.metrics.compiles_in_window = 0
    assert not [v for v in check_run(rec) if v["name"] == "compile in window"]


def test_a_shape_change_inside_the_window_is_caught_as_a_recompile():
    """A real torch.compile (the eager backend: dynamo's tracing and guards, no code
    generation): two warm-up calls at batch 8, then a window in which the batch becomes 6. The
    guard on the input's size fails and the frame recompiles in the window, at the step it
    happened, with dynamo's own reason."""
    torch._dynamo.reset()
    watch = CompileWatch().install()

    def f(x):
        return torch.nn.functional.relu(x @ x.T).sum()

    fn = torch.compile(f, backend="eager", dynamic=False)
    for _ in range(2):
        fn(torch.randn(8, 4))
        watch.step(None)
    t0 = watch.ends[-1]
    for bs in (8, 6, 8):
        fn(torch.randn(bs, 4))
        watch.step(None)
    rec = watch.record((t0, watch.ends[-1]), watch.ends, warmup=2)
    watch.remove()
    assert rec.reason is None
    got = [(e.compile_id, e.phase, e.timed_step, e.recompile) for e in rec.events]
    assert got == [("0/0", WARMUP, None, False), ("0/1", WINDOW, 1, True)]
    assert "size mismatch" in rec.events[1].reason
    m, _ = result_fields(rec, "-")
    assert m["recompiles_in_window"] == 1 and m["compile_in_window_s"] > 0


def test_callbacks_cleared_by_the_script_are_said(monkeypatch):
    torch._dynamo.reset()
    watch = CompileWatch().install()
    torch._dynamo.reset()  # a script's own reset clears every compile callback
    assert watch.cleared()
    torch.compile(lambda x: x + 1, backend="eager")(torch.ones(2))
    rec = watch.record(None)
    assert rec.cleared and rec.events == []
    watch.remove()  # already gone: no error


def test_a_torch_without_the_callbacks_is_not_measured(monkeypatch):
    """No ``torch._dynamo.callback``: "not measured" with the reason, never a failure."""
    import sys

    monkeypatch.setitem(sys.modules, "torch._dynamo.callback", None)
    watch = CompileWatch().install()
    rec = watch.record((0.0, 1.0))
    assert rec.reason.startswith("not measured")
    m, why = result_fields(rec, "-")
    assert set(m.values()) == {None} and why["compile_time_s"].startswith("not measured")


@pytest.mark.parametrize("n,word", [(1, "1 recompile"), (2, "2 recompiles")])
def test_window_line_plurals(n, word):
    ev = [{"phase": WINDOW, "recompile": True, "duration_s": 0.5, "timed_step": 0}] * n
    assert window_line(ev).startswith(f"{word} inside the timed window")
