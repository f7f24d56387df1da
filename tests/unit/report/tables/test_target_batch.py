"""A batch-size sweep with --target names the batch size that reaches it soonest and the one
that needs the fewest samples, each only when the seeds' intervals decide it."""

import math

import pytest

from scaleprobe.core import metrics as M
from scaleprobe.report.tables.batch_rule import recommend_batch as _recommend_batch
from tests.unit.report.factory import run, typed_api

recommend_batch = typed_api(_recommend_batch)


def _rec(bs, seed, ttt, samples, epoch_s=10.0):
    status = "ok" if ttt is not None else "target_not_reached"
    r = run(f"b{bs}s{seed}", batch=bs, epoch_s=epoch_s, sps=bs * 10.0,
            experiment={"id": "bt", "kind": "sweep", "point": {"batch_size": bs},
                        "repeat": seed})
    r["status"] = status
    r["config"]["train"].update(target="accuracy=0.9", lr=0.05, lr_scaling="none")
    r["target"] = {"metric": "accuracy", "target": 0.9, "reached": ttt is not None,
                   "time_to_target_s": ttt, "samples_to_target": samples,
                   "curve": [{"train_wall_s": 10.0, "value": 0.5},
                             {"train_wall_s": ttt or 40.0, "value": 0.9 if ttt else 0.8}]}
    return r


# batch 32: slower per sample but fewest samples; batch 128: sooner in wall clock, more
# samples (past the critical batch size); batch 512: never reached in 3 seeds
SWEEP = ([_rec(32, s, t, n) for s, (t, n) in enumerate([(30.0, 4000), (31.0, 4100),
                                                         (29.5, 3900)])]
         + [_rec(128, s, t, n) for s, (t, n) in enumerate([(20.0, 6000), (20.5, 6400),
                                                          (19.0, 5900)])]
         + [_rec(512, s, None, None) for s in range(3)])


def test_soonest_and_fewest_samples_are_different_batch_sizes_each_with_its_interval():
    """Bugs caught: the soonest batch picked by samples (or the reverse), which hides the
    point the larger batch stops paying in quality; a batch size that never reached the
    target dropped from the text (or picked, with no time at all)."""
    rec = recommend_batch(SWEEP)
    assert rec["soonest"]["batch_size"] == 128
    assert rec["fewest_samples"]["batch_size"] == 32
    text = rec["text"]
    line = next(ln for ln in text.splitlines() if "Soonest to accuracy >= 0.9" in ln)
    assert "batch 128" in line and "3 of 3 runs" in line and "inconclusive" not in line
    assert "ahead of batch 32 (" in line and "3 repeats)" in line  # the deciding interval
    assert "Never reached: batch 512 (0 of 3 runs)" in line
    few = next(ln for ln in text.splitlines() if "Fewest samples to" in ln)
    assert "batch 32" in few and "4,000 samples" in few
    assert "- Learning rate: --lr " in text  # the step size the comparison was made at


def test_seeds_that_do_not_separate_two_batch_sizes_give_inconclusive():
    """Bug caught: a "soonest" claim from medians 2% apart whose seeds cross."""
    recs = ([_rec(32, s, t, 4000) for s, t in enumerate([20.0, 24.0, 19.0])]
            + [_rec(64, s, t, 4000) for s, t in enumerate([21.0, 19.5, 23.0])])
    rec = recommend_batch(recs)
    assert rec["soonest"] is None
    line = next(ln for ln in rec["text"].splitlines() if "Soonest to" in ln)
    assert "inconclusive" in line and "not told apart from batch" in line


def test_without_a_target_nothing_is_said_about_it():
    recs = [run(f"b{bs}", batch=bs, experiment={"id": "b", "kind": "sweep",
                                                 "point": {"batch_size": bs}, "repeat": 0})
            for bs in (32, 64)]
    rec = recommend_batch(recs)
    assert rec["soonest"] is None and "Soonest" not in rec["text"]


def test_the_report_draws_each_batch_sizes_metric_against_time(tmp_path):
    """Bug caught: a batch sweep with a target whose report had only the throughput plot,
    so the user could not see where a larger batch reached the target later."""
    from scaleprobe.report import build_report
    from tests.unit.report.factory import write_results

    md, _ = build_report(write_results(tmp_path, SWEEP), tmp_path / "out")
    text = md.read_text()
    assert "metric against training wall clock, one line per batch size" in text
    assert "Soonest to accuracy >= 0.9" in text
    # the batch table gives each batch size's time to target over its seeds
    row32 = next(ln for ln in text.splitlines() if ln.startswith("| 32 |"))
    assert "30.0 s (29.5 s-31.0 s)" in row32 and "| 3/3 |" in row32 and "4,000" in row32
    row512 = next(ln for ln in text.splitlines() if ln.startswith("| 512 |"))
    assert "not reached" in row512 and "| 0/3 |" in row512


def test_single_runs_with_a_target_get_their_own_section_and_plot(tmp_path):
    """Bug caught: runs with --target outside an experiment had their curves only in the run
    folder; a run that missed the target must show "not reached" with its best value, not
    vanish or show a time."""
    from scaleprobe.report import build_report
    from tests.unit.report.factory import write_results

    a = _rec(32, 0, 12.5, 3000)
    b = _rec(64, 0, None, None)
    b["target"]["best_value"] = 0.83
    for r in (a, b):
        r["experiment"] = None
    a["target"]["epochs_to_target"] = 1.5
    md, _ = build_report(write_results(tmp_path, [a, b]), tmp_path / "out")
    text = md.read_text()
    sec = text.split("## Time to target", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in sec.splitlines() if ln.startswith("| ") and "accuracy" in ln]
    assert len(rows) == 2
    assert "12.5 s" in rows[0] and "1.50" in rows[0] and "3,000" in rows[0]
    assert "not reached" in rows[1] and "0.83" in rows[1]
    assert "one line per run" in sec


def test_a_sweep_over_another_axis_with_a_target_draws_one_line_per_point(tmp_path):
    """Bug caught: a sweep over, say, the learning rate with a target drew no curves (only
    batch sweeps and scales did), so the configurations could not be compared in time."""
    from scaleprobe.report import build_report
    from tests.unit.report.factory import write_results

    recs = []
    for lr, t in ((0.05, 20.0), (0.2, 12.0)):
        r = _rec(32, 0, t, 3000)
        r["experiment"] = {"id": "lr", "kind": "sweep", "point": {"lr": lr}, "repeat": 0}
        recs.append(r)
    md, _ = build_report(write_results(tmp_path, recs), tmp_path / "out")
    text = md.read_text()
    assert "metric against training wall clock, one line per point" in text
    assert "## Time to target" not in text  # sweep runs are drawn in their sweep


def _bracketed(bs, seed, ttt, before_s, before_step, samples):
    """A run whose evaluation before the hit was at ``before_s`` (step ``before_step``)."""
    r = _rec(bs, seed, ttt, samples)
    r["target"].update(time_to_target_lo_s=before_s, steps_to_target_lo=before_step)
    return r


def test_a_soonest_claim_holds_only_beyond_what_the_evaluations_leave_open():
    """Bug caught: two batch sizes evaluated once an epoch, each reaching the target at its
    first evaluation, were ranked by those evaluations' times though either may have
    crossed the target long before: the seeds' interval is widened to each run's bracket
    (between the evaluation before the hit and the hit), and a bracket from 0 decides
    nothing. With evaluations close together the same times still decide."""
    coarse = ([_bracketed(32, s, t, 0.0, 0, 4000) for s, t in enumerate([30.0, 31.0, 29.5])]
              + [_bracketed(128, s, t, 0.0, 0, 6000) for s, t in enumerate([20.0, 20.5, 19.0])])
    rec = recommend_batch(coarse)
    assert rec["soonest"] is None
    line = next(ln for ln in rec["text"].splitlines() if "Soonest to" in ln)
    assert "inconclusive" in line
    fine = ([_bracketed(32, s, t, t - 0.5, 10, 4000) for s, t in enumerate([30.0, 31.0, 29.5])]
            + [_bracketed(128, s, t, t - 0.5, 5, 6000)
               for s, t in enumerate([20.0, 20.5, 19.0])])
    rec = recommend_batch(fine)
    assert rec["soonest"]["batch_size"] == 128


def test_the_bracket_widens_the_ratio_by_hand():
    """B / A paired by seed lies in [B_lo / A, B / A_lo]: one pair each way by hand."""
    from scaleprobe.core.result_model import RunResult
    from scaleprobe.report.tables import time_to_target as T

    def point(bs, ttts, los):
        return [RunResult.from_dict(_bracketed(bs, s, t, lo, 1, 100))
                for s, (t, lo) in enumerate(zip(ttts, los, strict=True))]

    a, b = point(32, [10.0, 11.0], [8.0, 9.0]), point(64, [20.0, 21.0], [15.0, 16.0])
    a[0].repeats, b[0].repeats = a, b  # each point's seeds, as group_repeats makes them
    iv = T.target_ratio(a[0], b[0], T.time_to_target_s)
    plain = M.ratio_interval([10.0, 11.0], [20.0, 21.0])
    assert iv.estimate == plain.estimate
    assert iv.lo == pytest.approx(M.ratio_interval([10.0, 11.0], [15.0, 16.0]).lo)
    assert iv.hi == pytest.approx(M.ratio_interval([8.0, 9.0], [20.0, 21.0]).hi)
    assert iv.lo < plain.lo and iv.hi > plain.hi and "evaluation brackets" in iv.method
    # a run whose first evaluation reached it: that side is unbounded
    b[1].target.time_to_target_lo_s = 0.0
    assert T.target_ratio(a[0], b[0], T.time_to_target_s).lo == 0.0
    a[1].target.time_to_target_lo_s = 0.0
    assert T.target_ratio(a[0], b[0], T.time_to_target_s).hi == math.inf
    # a record without the lower ends (an older run): taken as it is
    for x in (*a, *b):
        x.target.time_to_target_lo_s = None
    assert T.target_ratio(a[0], b[0], T.time_to_target_s) == plain


def test_the_reports_time_to_target_of_a_run_says_what_its_evaluations_leave_open(tmp_path):
    """A single run's row in the report's Time to target table: a hit at the first
    evaluation says it was crossed after 0 s; a bracket within 10% says nothing more."""
    from scaleprobe.report import build_report
    from tests.unit.report.factory import write_results

    def one(name, ttt, lo):
        r = run(name)
        r["config"]["train"].update(target="accuracy=0.9")
        r["target"] = {"metric": "accuracy", "target": 0.9, "reached": True,
                       "time_to_target_s": ttt, "time_to_target_lo_s": lo,
                       "steps_to_target": 100, "steps_to_target_lo": 0 if lo == 0 else 95,
                       "epochs_to_target": 1.0, "samples_to_target": 3200,
                       "curve": [{"train_wall_s": ttt, "value": 0.95}]}
        return r

    md, _ = build_report(write_results(tmp_path, [one("coarse", 685.3, 0.0),
                                                  one("fine", 30.0, 29.0)]), tmp_path / "out")
    text = md.read_text()
    rows = [ln for ln in text.splitlines() if "| accuracy >= 0.9 |" in ln]
    coarse = next(ln for ln in rows if ln.startswith("| coarse"))
    fine = next(ln for ln in rows if ln.startswith("| fine"))
    assert "| 11.4 min (crossed after the start) |" in coarse
    assert "| 30.0 s |" in fine and "crossed" not in fine


def test_one_seed_a_batch_size_is_not_decided_against_never_not_told_apart():
    """Bug caught: "Soonest to" and "Fewest samples to" called the ranking with its default
    of 2 repeats, so one seed a batch size (no interval at all) read "inconclusive: ... not
    told apart from batch 32 (no spread)", words that say the repeats saw the spread."""
    recs = [_rec(32, 0, 30.0, 4000), _rec(128, 0, 20.0, 6000)]
    lines = recommend_batch(recs)["text"].splitlines()
    for head in ("Soonest to", "Fewest samples to"):
        line = next(ln for ln in lines if head in ln)
        assert "inconclusive (1 repeat)" in line and "not decided against batch" in line
        assert "not told apart" not in line


def test_the_target_picks_carry_the_load_caveat_of_the_runs_they_compare():
    """Bug caught: Fastest and Most efficient carried "measured under load" for a loaded
    run of their group, the Soonest / Fewest samples lines over the same runs did not."""
    recs = [dict(r) for r in SWEEP]
    recs[4] = {**recs[4], "load": {"flag": True, "machine_cores": 4}}  # batch 128, seed 1
    lines = recommend_batch(recs)["text"].splitlines()
    for head in ("Fastest", "Soonest to", "Fewest samples to"):
        line = next(ln for ln in lines if ln.lstrip("- ").startswith(head))
        assert "measured under load: " in line, line
        assert "batch_size=128 (repeat 2)" in line
    quiet = recommend_batch(SWEEP)["text"]
    assert "measured under load" not in quiet


def test_a_runs_time_to_target_measured_under_load_says_so():
    """Bug caught: the Time to target section showed a loaded run's time bare, where every
    other figure of a run measured under load says "under load" beside it."""
    from scaleprobe.report.render.sections_exp import target_runs_section

    a, b = _rec(32, 0, 12.5, 3000), _rec(64, 0, 10.0, 3000)
    for r in (a, b):
        r["experiment"] = None
    b["load"] = {"flag": True, "machine_cores": 4}
    s = target_runs_section(typed_api(lambda x: x)([a, b]))
    rows = s.blocks[0].rows
    assert rows[0][2] == "12.5 s" and rows[1][2] == "10.0 s, under load"
