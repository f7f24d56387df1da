"""--target: parsing and config checks, the evaluation clock, the result it summarises to."""

import pytest

from scaleprobe.config import runconfig as C
from scaleprobe.core.errors import ConfigError
from scaleprobe.core.rank_record import RankTarget
from scaleprobe.core.result_model import RunResult
from scaleprobe.core.run_parts import TimeToTarget
from scaleprobe.features.target import (
    Target,
    TargetWatch,
    copies_for,
    more_often,
    not_reached_line,
    parse_target,
    read_curve_csv,
    summarize,
    summary_line,
    write_curve_csv,
)


@pytest.mark.parametrize("text, why", [
    ("accuracy", "METRIC=VALUE"),
    ("top5=0.9", "unknown metric"),
    ("accuracy=high", "not a number"),
    ("accuracy=95", "a fraction"),
    ("accuracy=0", "a fraction"),
])
def test_bad_targets_are_one_line_errors(text, why):
    """A mistyped --target must be a clear one-line error before any training, not a run
    that never stops or a target of 95 (percent typed for a fraction) that can never be met."""
    with pytest.raises(ConfigError, match=why):
        C.build({"target": text})


def test_target_metric_must_belong_to_the_task():
    """map50 on a classification run would never get a value: the user must hear why."""
    with pytest.raises(ConfigError, match="--task detection"):
        C.build({"target": "map50=0.3"})
    assert C.build({"target": "accuracy=0.9"}).train.target == "accuracy=0.9"


@pytest.mark.parametrize("extra", [{"epochs": 2}, {"steps": 10}])
def test_target_refuses_a_fixed_length(extra):
    """--target with --epochs/--steps would stop before (or regardless of) the target."""
    with pytest.raises(ConfigError, match="--max-epochs"):
        C.build({"target": "accuracy=0.9", **extra})


def test_target_refuses_the_parameter_server():
    """ps workers stop on their own: they could not all stop at the step that hit the target."""
    with pytest.raises(ConfigError, match="same step"):
        C.build({"target": "accuracy=0.9", "strategy": "ps", "nproc": 2})


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_evaluation_time_is_excluded_from_the_training_clock():
    """MLPerf's rule: evaluation does not count toward the time to train. A slow evaluation
    (10 s here, against 1 s of training per step) must not appear in train_wall_s, and must
    be reported in eval_time_s."""
    clock = FakeClock()
    w = TargetWatch(Target("accuracy", 0.9), eval_every=2, clock=clock)
    w.start()
    values = iter([0.5, 0.95])

    def slow_eval():
        clock.t += 10.0
        return {"accuracy": next(values)}

    stopped_at = None
    for step in range(1, 7):
        clock.t += 1.0  # one training step
        if w.due(step) and w.evaluate(step, slow_eval):
            stopped_at = step
            break
    assert stopped_at == 4
    assert [p.train_wall_s for p in w.points] == [2.0, 4.0]
    assert w.eval_total_s == 20.0 and [p.eval_s for p in w.points] == [10.0, 10.0]


def test_a_rank_that_does_not_evaluate_follows_the_agreed_verdict():
    """In ddp only one rank evaluates; the others must stop at the same step (or they would
    wait in a collective forever), so the verdict comes from ``agree`` (the all-reduce)."""
    w = TargetWatch(Target("accuracy", 0.9), eval_every=None, clock=FakeClock())
    w.start()
    assert not w.due(5) and w.due(5, epoch_end=True)
    assert w.evaluate(5, None, agree=lambda mine: True) is True
    assert w.points == []  # nothing measured on this rank


def test_summary_takes_the_first_evaluation_that_reached_it_and_the_best():
    """The time to target is the FIRST evaluation at or above the target (a later, higher
    value must not move it), epochs and samples come from the step count."""
    raw = {"metric": "accuracy", "value": 0.9, "eval_every": 10, "eval_time_s": 3.0,
           "steps_per_epoch": 20,
           "points": [{"step": 10, "train_wall_s": 1.0, "eval_s": 1.0, "value": 0.7},
                      {"step": 20, "train_wall_s": 2.0, "eval_s": 1.0, "value": 0.91},
                      {"step": 30, "train_wall_s": 3.0, "eval_s": 1.0, "value": 0.97}]}
    tt = summarize(RankTarget.from_dict(raw), steps_per_epoch=99, global_batch=128, max_epochs=5)
    assert tt["reached"] and tt["time_to_target_s"] == 2.0 and tt["steps_to_target"] == 20
    assert tt["epochs_to_target"] == 1.0  # the loader's own steps per epoch wins
    assert tt["samples_to_target"] == 20 * 128
    assert tt["best_value"] == 0.97 and tt["best_at_epoch"] == 1.5
    assert TimeToTarget.from_dict(tt).to_dict() == tt  # declared: round-trips unchanged


def test_not_reached_keeps_the_best_value_and_when():
    raw = {"metric": "accuracy", "value": 0.99, "eval_every": None, "eval_time_s": 2.0,
           "points": [{"step": 10, "train_wall_s": 1.5, "eval_s": 1.0, "value": 0.8},
                      {"step": 20, "train_wall_s": 3.0, "eval_s": 1.0, "value": 0.75}]}
    tt = summarize(RankTarget.from_dict(raw), steps_per_epoch=10, global_batch=64, max_epochs=2)
    assert not tt["reached"] and tt["time_to_target_s"] is None
    assert (tt["best_value"], tt["best_at_s"], tt["best_at_epoch"]) == (0.8, 1.5, 1.0)


def test_curve_csv_round_trips(tmp_path):
    """The curve file is what the report plots from and users load: every row and column."""
    raw = {"metric": "accuracy", "value": 0.5, "eval_time_s": 0.1,
           "points": [{"step": 3, "train_wall_s": 0.25, "eval_s": 0.1, "value": 0.625}]}
    tt = summarize(RankTarget.from_dict(raw), steps_per_epoch=3, global_batch=8, max_epochs=1)
    write_curve_csv(tmp_path / "c.csv", tt["curve"])
    (row,) = read_curve_csv(tmp_path / "c.csv")
    assert row == {"evaluation": 1, "step": 3, "epoch": 1.0, "samples": 24,
                   "train_wall_s": 0.25, "eval_s": 0.1, "value": 0.625, "looked_back": 0}


def test_run_result_declares_the_target_block():
    rec = RunResult(target=TimeToTarget(metric="accuracy", target=0.9)).to_dict()
    assert rec["target"]["metric"] == "accuracy"
    assert RunResult.from_dict(rec).target.target == 0.9
    assert parse_target(" accuracy = 0.5").value == 0.5


@pytest.mark.parametrize("argv, needle", [
    (["run", "--target", "top5=0.9"], "unknown metric"),
    (["run", "--target", "accuracy"], "METRIC=VALUE"),
    (["run", "--target", "accuracy=0.9", "--epochs", "2"], "--max-epochs"),
    (["run", "--target", "accuracy=0.9", "--eval-every", "0"], "--eval-every"),
])
def test_cli_target_mistakes_exit_2_in_one_line(capsys, tmp_path, argv, needle):
    """The flags reach the same checks from the command line: exit code 2, one line, no run
    folder made."""
    from scaleprobe.cli import main

    code = main([*argv, "--out", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and needle in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


def test_learning_rate_warm_up_in_epochs_counts_this_runs_steps():
    """Goyal et al. warm up over epochs: 5 epochs at 2 processes are half the steps of 5
    epochs at 1. Bugs caught: --warmup-epochs ignored (the ramp over the untimed
    --warmup-steps, 5 steps), or counted in the steps of another batch size."""
    from scaleprobe.config.runconfig import build
    from scaleprobe.train.parts import lr_warmup_steps

    cfg = build({"lr_scaling": "linear", "warmup_epochs": 2.5, "warmup_steps": 3})
    assert lr_warmup_steps(cfg, 28) == 70
    assert lr_warmup_steps(cfg, 14) == 35
    assert lr_warmup_steps(cfg, None) == 3  # no epoch length known: the untimed steps
    assert lr_warmup_steps(build({"warmup_steps": 0}), 28) == 1
    assert lr_warmup_steps(build({"warmup_epochs": 0.01}), 28) == 1


# ---- the direction of a metric: loss and perplexity are lower-is-better -------------------

LM = {"task": "lm", "dataset": "tokens-synthetic"}


@pytest.mark.parametrize("text, why", [
    ("loss=0", "above 0"),
    ("loss=-1", "above 0"),
    ("loss=inf", "finite"),
    ("perplexity=1", "above 1"),
])
def test_bad_lower_is_better_targets_are_one_line_errors(text, why):
    """A loss target of 0 (or a perplexity of 1) can never be reached."""
    with pytest.raises(ConfigError, match=why):
        C.build({**LM, "target": text})


def test_loss_targets_belong_to_the_lm_task_and_take_values_above_one():
    assert C.build({**LM, "target": "loss=2.5"}).train.target == "loss=2.5"
    assert parse_target("perplexity=12").value == 12  # not a fraction: no (0, 1] check
    with pytest.raises(ConfigError, match="--task lm"):
        C.build({"target": "loss=2.5"})
    with pytest.raises(ConfigError, match="reports loss"):
        C.build({**LM, "target": "accuracy=0.5"})


def test_a_lower_is_better_target_is_reached_at_or_below_it():
    loss = Target("loss", 2.0)
    assert loss.lower and loss.text() == "loss <= 2"
    assert loss.reached(2.0) and loss.reached(1.2) and not loss.reached(2.01)
    assert not loss.reached(float("nan")) and not loss.reached(None)
    acc = Target("accuracy", 0.9)
    assert not acc.lower and acc.text() == "accuracy >= 0.9"
    assert acc.reached(0.95) and not acc.reached(0.89)


def _loss_raw(target, values):
    return RankTarget.from_dict({"metric": "loss", "value": target, "eval_every": 10, "eval_time_s": 1.0,
            "steps_per_epoch": 100,
            "points": [{"step": 10 * (i + 1), "train_wall_s": float(i + 1), "eval_s": 0.1,
                        "value": v} for i, v in enumerate(values)]})


def test_the_time_to_a_loss_target_is_the_first_evaluation_at_or_below_it():
    """Bug caught: with "higher is better" everywhere the first evaluation (the highest loss)
    'reached' a loss target and the run stopped untrained."""
    tt = summarize(_loss_raw(2.0, [5.5, 2.4, 1.9, 1.7]), 100, 32, 3)
    assert tt["reached"] and tt["steps_to_target"] == 30 and tt["time_to_target_s"] == 3.0
    assert tt["best_value"] == 1.7 and tt["best_at_s"] == 4.0  # the lowest


def test_a_loss_target_not_reached_names_the_lowest_loss():
    tt = summarize(_loss_raw(1.0, [5.5, 2.4, 2.6]), 100, 32, 2)
    assert not tt["reached"] and tt["best_value"] == 2.4 and tt["best_at_s"] == 2.0
    line = not_reached_line(tt)
    # how far it got: the last evaluation's step and epoch (30 of 100 per epoch), its value
    assert line == ("loss <= 1 not reached: 3 evaluations up to step 30, epoch 0.30 of at "
                    "most 2; last 2.6000, best 2.4000 at 2.0 s of training, epoch 0.20")
    assert "loss <= 1 not reached" in summary_line(tt)
    hit = summarize(_loss_raw(3.0, [5.5, 2.4]), 100, 32, 2)
    assert summary_line(hit).startswith("time to target: loss <= 3 reached in 2.00 s")


def test_the_time_to_target_says_the_bracket_its_evaluations_leave_open():
    """Bug caught: gpt_tiny on the stdlib's text, --target loss=3.0 without --eval-every,
    evaluated first at the end of its epoch (5,459 steps, 685 s) and printed "reached in
    685.30 s" though its training loss was 3.07 at step 60: the target is crossed somewhere
    after the evaluation before the hit (the start, at the first), and the line says so."""
    first = summarize(_loss_raw(3.0, [2.9]), 100, 32, 2)
    assert (first["steps_to_target_lo"], first["time_to_target_lo_s"]) == (0, 0.0)
    line = summary_line(first)
    assert ("crossed somewhere after the start: it was the first evaluation, so the time to "
            "it is 0.00-1.00 s (steps 0-10): evaluate more often to narrow it (--eval-every "
            "1: 10 evaluations up to step 10)") in line
    assert more_often(5469) == "--eval-every 273: 20 evaluations up to step 5,469"
    tt = summarize(_loss_raw(2.0, [5.5, 2.4, 1.9, 1.7]), 100, 32, 3)
    assert (tt["steps_to_target_lo"], tt["time_to_target_lo_s"]) == (20, 2.0)
    assert "after the evaluation before it, step 20 at 2.00 s, so the time to it is 2.00-3.00 s" \
        in summary_line(tt)
    # a bracket within 10% of the figure is not worth a line
    tight = summarize(RankTarget.from_dict({
        "metric": "loss", "value": 2.0, "eval_every": 1, "eval_time_s": 0.1,
        "points": [{"step": 100, "train_wall_s": 10.0, "eval_s": 0.1, "value": 2.5},
                   {"step": 101, "train_wall_s": 10.1, "eval_s": 0.1, "value": 1.9}]}),
        100, 32, 3)
    assert tight["time_to_target_lo_s"] == 10.0 and "crossed" not in summary_line(tight)
    missed = summarize(_loss_raw(1.0, [5.5, 2.4]), 100, 32, 2)
    assert missed["steps_to_target_lo"] is None and missed["time_to_target_lo_s"] is None


def test_a_watch_stops_when_the_loss_falls_to_the_target():
    w = TargetWatch(Target("loss", 2.0), eval_every=1, clock=FakeClock())
    w.start()
    assert w.evaluate(1, lambda: {"loss": 3.1, "perplexity": 22.2}) is False
    assert w.evaluate(2, lambda: {"loss": 1.99, "perplexity": 7.3}) is True and w.reached


def test_the_report_writes_the_targets_direction():
    from scaleprobe.core.result_model import RunResult
    from scaleprobe.report.tables.time_to_target import target_text

    def text(rec):
        return target_text(RunResult.from_dict({"kind": "run", **rec}))

    assert text({"target": {"metric": "loss", "target": 1.5}}) == "loss <= 1.5"
    assert text({"config": {"train": {"target": "perplexity=9"}}}) == "perplexity <= 9"
    assert text({"config": {"train": {"target": "accuracy=0.9"}}}) == "accuracy >= 0.9"


def _trained(w, clock, reached, last_step=400, eval_s=5.0):
    """Train ``w`` one step per second up to ``last_step``, evaluating when due (once an
    epoch of 100 steps, or ``eval_every``; each evaluation ``eval_s`` on the clock) and
    keeping copies when due; the model's state is its step, and ``reached(state)`` says
    whether it reaches the target. Returns every verdict ``agree`` gave (in order), the
    states the look back loaded and the step the run stopped at."""
    state = {"step": 0}
    loaded, agreed = [], []

    def ev():
        clock.t += eval_s
        return {"accuracy": 0.95 if reached(state["step"]) else 0.5}

    def agree(verdict):
        agreed.append(verdict)
        return verdict

    def load(s):
        loaded.append(s)
        if s is not None:
            state["step"] = s

    w.start()
    for step in range(1, last_step + 1):
        clock.t += 1.0
        state["step"] = step
        end = step % 100 == 0
        if w.due(step) or (end and w.due(step, epoch_end=True)):
            if w.evaluate(step, ev, agree):
                w.look_back(ev, load, agree)
                return agreed, loaded, step
        elif w.keep_due(step):
            w.keep(step, lambda s=step: s)
    return agreed, loaded, None


def _epochs(copies=24):
    clock = FakeClock()
    return TargetWatch(Target("accuracy", 0.9), eval_every=None, clock=clock,
                       steps_per_epoch=100, copies=copies), clock


def test_copies_kept_between_evaluations_narrow_the_hit():
    """Bug caught: with one evaluation an epoch (the default) a target reached at step 237
    read as step 300, and its bracket as steps 200-300. Copies kept every 4 steps between
    evaluations, evaluated after the hit in step order, put it between two copies 4 steps
    apart, each at the training clock of its own step."""
    w, clock = _epochs()
    assert w.copies_every == 4  # 100 steps over 25 gaps
    _, loaded, stopped = _trained(w, clock, reached=lambda s: s >= 237)
    assert stopped == 300
    # the copies of the hit's bracket only (those of the first two epochs were let go), up
    # to the first that reached it
    assert w.looked_at == 24 and not w.kept and w.stopped_early is None
    assert loaded == list(range(204, 241, 4))
    tt = summarize(w.record(), steps_per_epoch=100, global_batch=8, max_epochs=5)
    assert (tt["steps_to_target_lo"], tt["steps_to_target"]) == (236, 240)
    # the training clock at each copy's step: 1 s a step, evaluations and copies excluded
    assert (tt["time_to_target_lo_s"], tt["time_to_target_s"]) == (236.0, 240.0)
    assert tt["looked_back"] == 10 and tt["evaluations"] == 3 + 10
    assert [c["step"] for c in tt["curve"]] == sorted(c["step"] for c in tt["curve"])
    assert "10 of them on copies of the model" in summary_line(tt)
    assert TimeToTarget.from_dict(tt).to_dict() == tt


def test_the_look_back_finds_the_first_copy_that_reached_it():
    """A metric that reaches the target, falls back and reaches it again (noise near the
    target): the first copy at or past it, as evaluating at every copy's step would have
    found (a bisection found the later crossing on a real 2-rank run: step 9 for 6)."""
    w, clock = _epochs()
    _, loaded, _ = _trained(w, clock, reached=lambda s: s == 212 or s >= 232)
    tt = summarize(w.record(), steps_per_epoch=100, global_batch=8, max_epochs=5)
    assert (tt["steps_to_target_lo"], tt["steps_to_target"]) == (208, 212)
    assert loaded == [204, 208, 212]


def test_the_look_back_stops_after_as_long_as_the_training_to_the_hit():
    """Evaluations slower than the training (60 s each, 300 s of training to the hit) end
    the look back once it has spent 300 s: the target then lies after the last copy looked
    at, and the record says why it stopped."""
    w, clock = _epochs()
    _, loaded, _ = _trained(w, clock, reached=lambda s: s >= 290, eval_s=60.0)
    assert loaded == [204, 208, 212, 216, 220]  # 5 x 60 s = 300 s
    tt = summarize(w.record(), steps_per_epoch=100, global_batch=8, max_epochs=5)
    assert (tt["steps_to_target_lo"], tt["steps_to_target"]) == (220, 300)
    assert tt["copies_stopped"].startswith("stopped after 5 of 24 copies")


def test_a_stop_asked_for_ends_the_look_back_at_the_next_copy():
    """Ctrl+C during a look back (which may take as long as the training did) ends it at
    the next copy, keeping what it found: the target lies after the last copy evaluated."""
    clock = FakeClock()
    w = TargetWatch(Target("accuracy", 0.9), eval_every=100, clock=clock, copies=24)
    state, seen = {"step": 0}, []

    def ev():
        seen.append(state["step"])
        return {"accuracy": 0.95 if state["step"] >= 290 else 0.5}

    w.start()
    for step in range(1, 301):
        clock.t += 1.0
        state["step"] = step
        if w.due(step):
            if w.evaluate(step, ev):
                w.look_back(ev, lambda s: state.update(step=s),
                            asked_to_stop=lambda: len(seen) >= 5)
                break
        elif w.keep_due(step):
            w.keep(step, lambda s=step: s)
    assert seen == [100, 200, 300, 204, 208]
    assert w.stopped_early == "stopped after 2 of 24 copies: asked to stop"
    tt = summarize(w.record(), steps_per_epoch=100, global_batch=8, max_epochs=5)
    assert (tt["steps_to_target_lo"], tt["steps_to_target"]) == (208, 300)


def test_a_wide_bracket_says_why_the_copies_did_not_narrow_it():
    w, clock = _epochs()
    _trained(w, clock, reached=lambda s: s >= 290, eval_s=60.0)
    tt = summarize(w.record(), steps_per_epoch=100, global_batch=8, max_epochs=5)
    assert summary_line(tt).endswith("; copies of the model looked back at: stopped after 5 "
                                     "of 24 copies: 300.0 s, as long as the training to the "
                                     "hit")
    w = TargetWatch(Target("accuracy", 0.9), eval_every=100, clock=FakeClock(), copies=0,
                    copies_reason="turned off (train.target_copies = 0)")
    _trained(w, w.clock, reached=lambda s: s >= 150)
    tt = summarize(w.record(), steps_per_epoch=100, global_batch=8, max_epochs=5)
    assert summary_line(tt).endswith("; copies of the model looked back at: turned off "
                                     "(train.target_copies = 0)")


def test_a_rank_that_keeps_no_state_looks_back_in_step_with_the_evaluating_one():
    """Every rank joins each ``agree`` of the look back (an all-reduce): a rank that does
    not evaluate keeps the same schedule without state and follows the agreed verdicts."""
    clock = FakeClock()
    mine = TargetWatch(Target("accuracy", 0.9), eval_every=50, clock=clock, copies=9)
    agreed, loaded, _ = _trained(mine, clock, reached=lambda s: s >= 137)
    other = TargetWatch(Target("accuracy", 0.9), eval_every=50, clock=FakeClock(), copies=9)
    other.start()
    said = iter(agreed)  # what the all-reduce gave, call by call
    asked = []

    def agree(mine):
        asked.append(mine)
        return next(said)

    calls = 0
    for step in range(1, 151):
        if other.due(step):
            if other.evaluate(step, None, agree=agree):
                calls = other.look_back(None, lambda s: None, agree=agree)
                break
        elif other.keep_due(step):
            other.keep(step, lambda: None)
    assert calls == len(loaded) and other.points == []
    assert len(asked) == len(agreed) and not any(asked)  # it never says more than "no"


def test_copies_fit_a_memory_budget_or_are_left_out_with_why():
    assert copies_for(3 << 20) == (32, None)
    assert copies_for(500 << 20) == (4, None)  # 2 GiB / 500 MiB
    n, why = copies_for(1500 << 20)
    assert n == 0 and "fewer than 2 copies in 2 GiB" in why
    assert copies_for(3 << 20, wanted=0)[0] == 0


def test_no_copies_without_a_spacing_or_when_turned_off():
    assert TargetWatch(Target("accuracy", 0.9), eval_every=None, copies=8).copies_every is None
    w = TargetWatch(Target("accuracy", 0.9), eval_every=10, copies=0)
    assert w.copies_every is None and not any(w.keep_due(s) for s in range(1, 30))


def test_the_experiments_seed_is_read_back_from_any_repeat():
    """``experiment_seed`` undoes ``repeat_config``: the one rule pairing compares runs by."""
    from scaleprobe.features.target import experiment_seed, repeat_config

    cfg = C.build({"target": "accuracy=0.8", "seed": 7})
    for r in range(4):
        got, _ = repeat_config(cfg, r)
        assert got.train.seed == 7 + r
        assert experiment_seed(got.train.seed, r, got.train.target) == 7
    plain = C.build({"seed": 7})
    assert repeat_config(plain, 3)[0].train.seed == 7 == experiment_seed(7, 3, None)
