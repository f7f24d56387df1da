"""Progress inside a point: the steps file a point writes, and the experiment's bar that
shows it (a demo point on a busy machine ran for 7 minutes with "ETA -" and nothing else)."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console

from scaleprobe.config.sections import TrainConfig
from scaleprobe.core.result_model import RunResult
from scaleprobe.experiments import sweep_bar as EP
from scaleprobe.experiments.spec import Point
from scaleprobe.measure.progress import FileProgress, read_point_progress


def _parts(**train):
    return SimpleNamespace(cfg=SimpleNamespace(train=TrainConfig(**train)), loader=range(56))


def _st(step, timed, epoch=0, done=0):
    return SimpleNamespace(step=step, timed=timed, epoch=epoch, epochs_complete=done)


def test_the_steps_file_says_where_training_is_and_the_auto_caps(tmp_path):
    path = str(tmp_path / "p.progress")
    fp = FileProgress(path, every_s=0.0)
    fp.begin(_parts(steps="auto", warmup_steps=5, max_steps=200, max_seconds=120.0))
    assert read_point_progress(path) == "setting up: building the model and data"
    fp.advance(_st(3, 0))
    assert read_point_progress(path) == "warm-up step 3 of 5 (untimed)"
    fp.advance(_st(32, 27))
    assert read_point_progress(path) == ("27 steps timed; --steps auto stops when the median "
                                         "is stable, by 200 steps or 120 s")
    fp = FileProgress(path, every_s=0.0)
    fp.begin(_parts(epochs=2, warmup_steps=0))
    fp.advance(_st(93, 93, epoch=1, done=1))
    assert read_point_progress(path) == "epoch 2 of 2, step 37 of 56"
    fp.end()
    assert read_point_progress(path) == "training done: recording the result"
    assert read_point_progress(str(tmp_path / "none")) is None


def test_the_file_is_rewritten_at_most_every_interval(tmp_path):
    path = str(tmp_path / "p.progress")
    fp = FileProgress(path, every_s=3600.0)
    fp.begin(_parts(steps=10, warmup_steps=0))
    fp.advance(_st(1, 1))
    fp.advance(_st(2, 2))  # within the hour: not written again
    assert read_point_progress(path) == "1 of 10 steps timed"


def test_without_a_live_bar_a_running_point_gets_a_line_every_minute(tmp_path, monkeypatch):
    out = io.StringIO()
    bar = EP.SweepProgress(True, Console(file=out, width=200), "demo-batch-size")
    bar.start(4)
    path = tmp_path / "p.progress"
    path.write_text("12 of 400 steps timed")
    monkeypatch.setattr(EP, "LINE_EVERY_S", 0.0)
    watch = EP.PointWatch(bar, "batch_size=32", str(path), every_s=0.05).start()
    import time

    time.sleep(0.5)
    watch.stop()
    bar.stop()
    assert "  ... batch_size=32: 12 of 400 steps timed" in out.getvalue()


def test_without_a_live_bar_the_lines_come_no_more_often_than_the_interval(tmp_path,
                                                                         monkeypatch):
    """Bug: once a minute had passed, every change of the steps file (each second) printed a
    line, the same line again when it had not changed: a piped demo log of one line a step."""
    import time

    out = io.StringIO()
    bar = EP.SweepProgress(True, Console(file=out, width=200), "demo-batch-size")
    bar.start(4)
    path = tmp_path / "p.progress"
    path.write_text("step 0")
    monkeypatch.setattr(EP, "LINE_EVERY_S", 0.4)
    t0 = time.monotonic()
    watch = EP.PointWatch(bar, "batch_size=32", str(path), every_s=0.01).start()
    for i in range(150):  # the file changes every 10 ms for 1.5 s or more
        path.write_text(f"step {i}")
        time.sleep(0.01)
    watch.stop()
    elapsed = time.monotonic() - t0
    bar.stop()
    lines = [ln for ln in out.getvalue().splitlines() if ln.startswith("  ... batch_size=32")]
    assert 1 <= len(lines) <= elapsed / 0.4 + 1, (elapsed, lines)


def test_the_point_names_its_repeat_and_the_watch_ends_with_the_point(tmp_path):
    bar = EP.SweepProgress(True, Console(file=io.StringIO()), "s")
    bar.start(2)
    bar.point_started(Point({"batch_size": 32}, {}), str(tmp_path / "x"), repeat=1)
    assert bar._watch is not None and bar._watch.name == "batch_size=32 (repeat 2)"
    bar.point_done(Point({"batch_size": 32}, {}), RunResult(status="ok"), repeat=1)
    assert bar._watch is None
    bar.stop()


def test_a_line_names_the_first_point_before_it_ends(tmp_path):
    """Bug caught: the point count "[1/15]" appeared only when the first point ended (322 s on
    a busy machine). The first point started is said at once; the others when they end."""
    out = io.StringIO()
    bar = EP.SweepProgress(True, Console(file=out, width=200), "demo-batch-size")
    bar.start(15)
    p = Point({"batch_size": 16}, {})
    bar.point_started(p, None)
    assert "[1/15] batch_size=16: started (a line as each point ends)" in out.getvalue()
    bar.point_done(p, RunResult(status="ok"))
    bar.point_started(Point({"batch_size": 32}, {}), None)
    bar.stop()
    assert out.getvalue().count("started") == 1
    # each point's line says the time left (before: no estimate of it; the quick demo's
    # estimate before it started was 5.7 min, it took 12.1 min as the load grew)
    line = next(ln for ln in out.getvalue().splitlines() if ln.startswith("[1/15]") and
                ": ok" in ln)
    assert "left of demo-batch-size)" in line and "; about 00:00:" in line, line


def test_the_demo_says_how_long_it_will_take_here_and_offers_quick_when_busy():
    """Bug caught: the demo took ~36 min under load (3 min 32 s quiet) and said nothing of it.
    Before it starts it says its runs, the time expected on this machine with the load it
    sees, and on a busy machine what --quick would take."""
    from scaleprobe.commands import demo

    assert (demo.runs_of(False, None), demo.runs_of(True, None), demo.runs_of(False, 1)) == (
        27, 8, 9)
    quiet = demo.plan_line(False, None, cores=2, busy=0.0)
    assert quiet.startswith("27 runs, each its own process; about 1.6 min here (2 cores, a "
                            "load of 0.0 from other work; 1.6 min on a quiet 2-core CPU)")
    assert "--quick" not in quiet
    busy = demo.plan_line(False, None, cores=2, busy=8.0)  # 5x slower: about 7.8 min
    assert "about 7.8 min here (2 cores, a load of 8.0 from other work" in busy
    assert busy.endswith("The machine is busy: `scaleprobe demo --quick` (8 runs) takes about "
                         "2.3 min")
    assert demo.estimate_s(27, 16, 0.0) == (93.0, 1.0)  # idle cores: the reference, no less


def test_the_demo_reads_the_load_now_not_the_minute_behind_it(tmp_path, monkeypatch):
    """Bug caught: right after other work ended, the 1-minute load average still counted it
    (1.9 a second after two busy processes were killed), and the demo stretched its estimate
    and called a quiet machine busy. It reads the threads ready to run now (/proc/loadavg's
    fourth field, itself left out), which count demand beyond the cores as the load average
    does: 8 busy processes on 2 cores read 8.0 (measured with 2 and 8 busy loops, 2.0 and
    8.0; 0.0 a second after they ended)."""
    from scaleprobe.commands import demo

    f = tmp_path / "loadavg"
    f.write_text("1.94 1.18 1.15 9/412 12850\n")  # the average still high, 9 ready now
    assert demo.runnable_now(0.05, 0.01, str(f)) == 8.0
    f.write_text("1.94 1.18 1.15 1/412 12850\n")  # only the reader: nothing else to run
    assert demo.runnable_now(0.05, 0.01, str(f)) == 0.0
    assert demo.runnable_now(0.05, 0.01, str(tmp_path / "none")) is None
    monkeypatch.setattr(demo, "runnable_now", lambda: 8.0)
    cores, busy = demo.machine_load()
    assert busy == 8.0 and cores >= 1
    # where the system does not say: the larger of the load average and the CPU use now
    monkeypatch.setattr(demo, "runnable_now", lambda: None)
    monkeypatch.setattr(demo.os, "getloadavg", lambda: (3.5, 1.0, 1.0))
    assert demo.machine_load()[1] >= 3.5


def test_outside_a_terminal_a_run_prints_a_plain_line_every_interval(monkeypatch, capsys):
    """Bug caught: outside a terminal `run` printed no progress at all (a --compile run:
    nothing for 7 min 52 s). A plain line comes every PLAIN_EVERY_S, also inside a step."""
    import time

    from scaleprobe.measure import progress as MP

    monkeypatch.setattr(MP, "PLAIN_EVERY_S", 0.05)
    bar = MP.StepProgress(True)
    bar.begin(_parts(steps=10, warmup_steps=2))  # pytest's stderr is no terminal
    time.sleep(0.2)  # inside the first step
    bar.advance(_st(5, 3))
    time.sleep(0.2)
    bar.end()
    lines = capsys.readouterr().err.splitlines()
    assert any(ln.startswith("training: setting up, or in the first step") for ln in lines)
    assert any(ln.startswith("training: step 5 of 12; epoch 1, 00:00:00 elapsed")
               for ln in lines), lines


def test_the_bar_keeps_its_figures_in_80_columns():
    """Bug caught: in an 80-column terminal the bar read `training ━━━ 14/… steps 0:… 0:0…`;
    the note and the bar give way, never the counts and times."""
    from scaleprobe.measure.progress import progress_bar

    for width in (80, 60):
        out = io.StringIO()
        con = Console(file=out, width=width, force_terminal=True, color_system=None)
        bar = progress_bar("steps", con, transient=False)
        t = bar.add_task("training", total=205,
                         note="epoch 1; auto: until stable, 200 steps or 120 s")
        bar.update(t, completed=14)
        con.print(bar.make_tasks_table(bar.tasks))
        line = out.getvalue().splitlines()[0]
        assert "14/205 steps 0:00:00" in line and len(line) <= width, line
