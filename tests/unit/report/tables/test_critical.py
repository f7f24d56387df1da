"""The critical batch: the fit of McCandlish et al.'s S = S_min (1 + B_crit/B) to steps to a
target, against points generated from the model with known S_min and E_min; and how the
batch table and rule show it beside the gradient noise scale."""

import math
import random

import pytest

from scaleprobe.report.render.critical_plot import critical_plot
from scaleprobe.report.tables import critical as C
from scaleprobe.report.tables.batch import batch_table as _table
from scaleprobe.report.tables.batch import batch_table_parts as _parts
from scaleprobe.report.tables.batch_rule import recommend_batch as _recommend
from tests.unit.report.factory import run, typed_api

recommend_batch, batch_table, batch_table_parts = (typed_api(_recommend), typed_api(_table),
                                                   _parts)

S_MIN, E_MIN = 40.0, 4000.0  # B_crit = 100
BATCHES = (8, 16, 32, 64, 128, 256)


def _model_points(noise=0.0, seeds=3, seed=0):
    rng = random.Random(seed)
    return [(b, S_MIN * (1 + (E_MIN / S_MIN) / b) * (1 + rng.gauss(0, noise)))
            for b in BATCHES for _ in range(seeds)]


def test_exact_points_give_the_models_parameters():
    fit = C.fit_critical(_model_points())
    assert fit.s_min == pytest.approx(S_MIN, rel=1e-9)
    assert fit.e_min == pytest.approx(E_MIN, rel=1e-9)
    assert fit.b_crit == pytest.approx(100.0, rel=1e-9)
    assert fit.lo == pytest.approx(100.0) and fit.hi == pytest.approx(100.0)  # no spread
    assert fit.beyond is None and fit.runs == 18
    assert fit.samples(100) == pytest.approx(2 * E_MIN)


def test_noisy_seeds_recover_b_crit_and_the_interval_covers_it():
    """10% seed-to-seed noise in the steps: over 30 independent sweeps the estimate lands
    within 25% of 100 in most, and the bootstrap interval holds 100 in most."""
    near = covered = 0
    for seed in range(30):
        fit = C.fit_critical(_model_points(noise=0.1, seed=seed), resamples=300)
        near += abs(fit.b_crit / 100 - 1) < 0.25
        covered += (fit.lo or 0) <= 100 <= (fit.hi or float("inf"))
    assert near >= 25
    assert covered >= 24  # ~95% nominal; percentile bootstrap of 3 seeds under-covers


def test_a_coarse_evaluation_schedule_widens_the_interval_to_hold_the_truth():
    """Exact steps read by evaluations every 40 steps (each run's figure is the evaluation
    that reached it, the one before 40 steps earlier): fitted to the hits alone the seeds
    agree exactly, on 73 for a true B_crit of 100, with no spread; taken midway between
    the evaluations with the brackets drawn, 113 [91, 183], which holds 100. Evaluations
    every 2 steps (the example sweep's) barely widen it."""
    def read(every):
        out = []
        for b, st in _model_points():
            hit = math.ceil(st / every) * every
            out.append((b, hit, hit - every))
        return out

    coarse = read(40)
    bare = C.fit_critical([(b, st) for b, st, _ in coarse])
    assert bare.lo == bare.hi and not bare.lo <= 100 <= bare.hi  # no spread, and off
    fit = C.fit_critical(coarse, resamples=500)
    assert bare.b_crit == pytest.approx(73.3, abs=0.1)
    assert fit.b_crit == pytest.approx(113.2, abs=0.1)  # midway between the evaluations
    assert fit.lo <= fit.b_crit <= fit.hi and fit.lo <= 100 <= fit.hi
    assert fit.hi / fit.lo > 1.2
    fine = C.fit_critical(read(2), resamples=500)
    assert fine.lo <= 100 <= fine.hi and fine.hi / fine.lo < 1.1


def test_no_floor_in_steps_says_the_critical_batch_is_above_the_range():
    pts = [(b, 5000.0 / b) for b in BATCHES for _ in range(2)]  # S ~ 1/B exactly: S_min = 0
    fit = C.fit_critical(pts)
    assert fit.b_crit is None and fit.s_min <= 1e-9
    assert "above the largest measured" in C.fit_text(fit)
    assert C.fit_critical([(8, 10.0), (16, 5.0)]) is None  # two batch sizes: no fit


def _rec(bs, seed, steps, path, simple=None):
    r = run(f"b{bs}s{seed}", batch=bs, epoch_s=10.0, sps=bs * 10.0,
            experiment={"id": "cb", "kind": "sweep", "point": {"batch_size": bs},
                        "repeat": seed})
    r["config"]["train"].update(target="accuracy=0.9", lr=0.05, lr_scaling="none", seed=seed)
    r["target"] = {"metric": "accuracy", "target": 0.9, "reached": True,
                   "time_to_target_s": steps * 0.01, "steps_to_target": steps,
                   "samples_to_target": steps * bs, "curve": []}
    r["gns"] = {"b_simple": simple or path, "b_simple_lo": path * 0.8, "b_simple_hi": path * 1.3,
                "b_noise_path": path, "steps": 50, "global_batch": bs, "method": "micro_batches",
                "series": [{"step": 5, "steps": 25, "samples": 5 * bs, "b_simple": path * 0.7},
                           {"step": 30, "steps": 25, "samples": 30 * bs,
                            "b_simple": path + 10}]}
    return r


SWEEP = [_rec(b, s, round(S_MIN * (1 + 100 / b) * (1 + 0.03 * (s - 1))), 80 + 10 * s)
         for b in (16, 64, 256) for s in range(3)]


SWEEP_BRACKETED = [_rec(b, s, round(S_MIN * (1 + 100 / b) * (1 + 0.03 * (s - 1))), 80 + 10 * s)
                   for b in (16, 64, 256) for s in range(3)]


def test_batch_table_shows_b_noise_and_where_each_batch_lies():
    rows = batch_table(SWEEP)
    headers, cells = batch_table_parts(rows)
    assert headers[-2:] == ["B_noise", "Batch vs B_noise"]
    by = {c[0]: c for c in cells}
    assert by["16"][-2] == "100 (90-110)"  # B_noise at each run's end: median, range
    assert [by[b][-1] for b in ("16", "64", "256")] == ["below", "near", "above"]


def test_the_rule_names_predicted_and_measured_critical_batch_with_their_ratio():
    text = recommend_batch(SWEEP)["text"]
    pred = next(ln for ln in text.splitlines() if "predicted by the gradient noise" in ln)
    assert "B_noise 100 samples at each run's end (median over 9 distinct runs, one per batch size and seed, range 90-110" in pred
    assert "along each run's path 90" in pred
    meas = next(ln for ln in text.splitlines() if "measured from the steps" in ln)
    assert "E_min / S_min = 10" in meas and "3 batch sizes (16, 64, 256), 9 runs" in meas
    ratio = float(meas.split("measured / predicted = ")[1].split(",")[0])
    assert ratio == pytest.approx(C.group_fit(batch_table(SWEEP)).b_crit / 100, rel=0.01)
    assert "within a factor of 2 (along the path: " in meas
    model = next(ln for ln in text.splitlines() if ln.startswith("- By the model"))
    assert "below it (16)" in model and "above it (256)" in model
    # the memory/time rule's most efficient batch (256: most samples/s per GiB here) lies
    # above the critical batch; its fastest is undecided (equal epoch times): not named
    assert "most efficient batch 256 lies above the critical batch" in text
    assert "fastest per epoch batch" not in text


def test_one_repeat_shows_the_figures_and_decides_no_verdict():
    """Verdicts need MIN_REPEATS_TO_DECIDE runs at every batch size: one seed's steps to a
    target and noise scale show no seed-to-seed spread. The figures stay; where each batch
    lies, whether measured and predicted agree, and the disagreement with the memory/time
    rule do not appear."""
    one = [r for r in SWEEP if r["experiment"]["repeat"] == 0]
    _, cells = batch_table_parts(batch_table(one))
    assert [c[-1] for c in cells] == ["inconclusive (1 seed)"] * 3
    assert [c[-2] for c in cells] == ["90"] * 3  # the figure is still shown
    text = recommend_batch(one)["text"]
    meas = next(ln for ln in text.splitlines() if "measured from the steps" in ln)
    assert "E_min / S_min = " in meas and "(no repeats: no interval)" in meas
    assert "inconclusive (1 seed) at a batch size: whether they agree within a factor" in meas
    assert "not within" not in meas and ", within" not in meas
    assert "- Where each batch size lies against the measured critical batch" in text
    assert "below it (" not in text and "above it (" not in text
    assert "lies above the critical batch" not in text
    # one batch size with a single run is enough to hold the verdicts back
    mixed = [r for r in SWEEP if r["experiment"]["repeat"] < 2 or r["batch"]["global"] == 64]
    mixed = [r for r in mixed if not (r["batch"]["global"] == 16 and r["experiment"]["repeat"])]
    assert C.group_fit(batch_table(mixed)).min_runs == 1
    assert "inconclusive (1 seed) at a batch size" in recommend_batch(mixed)["text"]
    two = [r for r in SWEEP if r["experiment"]["repeat"] < 2]
    assert C.group_fit(batch_table(two)).min_runs == 2
    text2 = recommend_batch(two)["text"]
    assert "inconclusive (" not in text2.split("measured from the steps")[1].split("\n")[0]
    assert "- By the model with the measured critical batch" in text2


def test_without_gns_the_table_and_rule_are_unchanged():
    plain = [_rec(b, 0, 50, 80) for b in (16, 64)]
    for r in plain:
        del r["gns"]
    headers, _ = batch_table_parts(batch_table(plain))
    assert "B_noise" not in headers
    assert "Critical batch" not in recommend_batch(plain)["text"]


def test_plot_draws_the_fit_and_the_series_with_nothing_cut():
    plot = critical_plot(batch_table(SWEEP), "Critical batch: cb")
    left, right = plot.meta["axes"]
    assert left["xscale"] == right["xscale"] == "linear" or left["xscale"] == "log"
    assert (left["xlabel"], left["ylabel"]) == ("steps to target", "samples to target")
    assert left["points"] == ["B=16", "B=64", "B=256"]  # each batch size labelled once
    assert right["ylim"][0] == 0 and right["ylabel"] == "B_noise (samples)"
    w, h = plot.meta["width"], plot.meta["height"]
    x0, y0, x1, y1 = plot.meta["content"]
    assert x0 >= 0 and y0 >= 0 and x1 <= w and y1 <= h  # no text leaves the figure
    plain = [_rec(b, 0, 50, 80) for b in (16, 64)]
    for r in plain:
        del r["gns"], r["target"]
    assert critical_plot(batch_table(plain), "x") is None
    assert "crossed between evaluations" not in left["legend"]
    # each run's bracket (the evaluation before the hit) is drawn, named once in the legend
    for r in SWEEP_BRACKETED:
        r["target"]["steps_to_target_lo"] = r["target"]["steps_to_target"] - 10
    left = critical_plot(batch_table(SWEEP_BRACKETED), "x").meta["axes"][0]
    assert left["legend"].count("crossed between evaluations") == 1


def test_a_batch_table_measured_with_half_batches_says_so():
    """Measuring B_noise on one process runs each step as two half-batches: the rows' epoch
    time and memory are that step's, and the table must say so (under DDP it says nothing)."""
    from scaleprobe.core.experiment_records import typed
    from scaleprobe.report.render import sections_exp as X
    from scaleprobe.report.render.doc import Section, Text

    def notes(recs):
        s = Section("t")
        X._batch_blocks(s, "cb", [typed(r) for r in recs])
        return " ".join(b.text for b in s.blocks if isinstance(b, Text))

    assert "two half-batches" in notes(SWEEP)
    ddp = [{**r, "gns": {**r["gns"], "method": "ddp_hook"}} for r in SWEEP]
    assert "two half-batches" not in notes(ddp)


def test_repeats_of_one_seed_are_one_measurement_of_b_noise():
    """Bug caught (the demo): three timing repeats of a point, one seed, gave B_noise
    "35,158 (35,158-35,158)" and a decided "below": identical runs are not three pieces of
    evidence. The verdict counts seeds."""
    same = [_rec(b, s, 100, 80.0) for b in (16, 64, 256) for s in range(3)]
    for r in same:
        r["config"]["train"]["seed"] = 0
    cells = [c[-1] for c in batch_table_parts(batch_table(same))[1]]
    assert cells == ["inconclusive (1 seed)"] * 3


def test_b_noise_is_over_distinct_runs_and_its_median_was_measured():
    """Bug caught: "B_noise 88 samples (median over 4 runs, range 30-146)" from 4 runs
    that were 2 seeds' duplicates; 88 is the mean of two values no run measured. Here each
    of batch sizes 16, 64 and 256 ran seeds 0 and 1 twice each (repeats 0-3: seed 0, 1, 0,
    1); B_noise at each run's end is the series' last point, path + 10: seed 0 gives 30 (its
    second repeat 34), seed 1 gives 146. Distinct runs: 2 per batch size, 6 in all; the
    median of (30, 30, 30, 146, 146, 146) that a run measured is 30 (the lower middle), not
    88 = (30 + 146) / 2."""
    recs = []
    for b in (16, 64, 256):
        for rep, (seed, path) in enumerate([(0, 20.0), (1, 136.0), (0, 24.0), (1, 136.0)]):
            r = _rec(b, rep, 100 + b, path)
            r["config"]["train"]["seed"] = seed
            recs.append(r)
    rows = batch_table(recs)
    pred = C.predicted(rows)
    assert pred is not None and pred.runs == 6
    assert pred.b_noise == 30 and (pred.lo, pred.hi) == (30, 146)
    text = recommend_batch(recs)["text"]
    # of an even count the lower middle, named so (was "median over 2 ... range 30-123": a
    # reader takes a median of two for their middle)
    assert ("B_noise 30 samples at each run's end (lower middle of 6 distinct runs, one per "
            "batch size and seed, range 30-146") in text
    cells = {c[0]: c for c in batch_table_parts(rows)[1]}
    assert cells["16"][-2] == "30 (30-146)"  # the point's 2 distinct runs, lower middle


def test_the_half_batch_note_sits_under_every_batch_table_of_sweep_md():
    """Bug caught: CRITICAL_BATCH.md says the batch table says when B_noise was
    measured on one process as two half-batches; sweep.md (which the terminal prints) did
    not. The rows here were measured so (gns method micro_batches)."""
    from scaleprobe.report.render.sweep_tables import batch_sections as _sections
    from scaleprobe.report.render.sweep_tables import render_markdown
    from scaleprobe.report.tables.batch import HALF_BATCH_NOTE

    batch_sections = typed_api(_sections)
    sections, _, _ = batch_sections(SWEEP, "cb")
    assert sections and all(HALF_BATCH_NOTE in s["notes"] for s in sections)
    md = render_markdown({"id": "cb", "sections": sections, "notes": []})
    assert "two half-batches with accumulated gradients" in md
    plain = [_rec(b, s, 100, 80.0) for b in (16, 64) for s in range(2)]
    for r in plain:
        r["gns"]["method"] = "ddp_hook"
    sections, _, _ = batch_sections(plain, "cb")
    assert not any(HALF_BATCH_NOTE in s.get("notes", []) for s in sections)


def test_one_spike_is_clipped_and_named_and_a_lone_panel_fills_the_figure():
    """Bugs caught: one block's B_noise of 35,000 among values of 20-700 flattened every
    other line onto the axis; a sweep with B_noise but no fit (two batch sizes) drew its one
    panel beside an empty half of the figure."""
    from scaleprobe.report.render.critical_plot import clipped_note

    recs = [_rec(b, s, round(S_MIN * (1 + 100 / b)), 80 + 10 * s) for b in (16, 64, 256)
            for s in range(3)]
    spiky = recs[1]["gns"]["series"]
    spiky.append({"step": 40, "steps": 25, "samples": 40 * 16, "b_simple": 35000.0})
    plot = critical_plot(batch_table(recs), "Critical batch: cb")
    right = plot.meta["axes"][-1]
    assert plot.meta["clipped"] == [{"batch": 16, "samples": 640, "b_noise": 35000.0}]
    assert 100 < right["ylim"][1] < 1000  # scaled to the rest, not to the spike
    assert "35,000" in right["points"]  # marked at the top edge with its value
    note = clipped_note(plot)
    assert "batch 16: 35,000 at 640 samples trained" in note
    assert clipped_note(critical_plot(batch_table(SWEEP), "x")) is None  # nothing cut
    two = [r for r in recs if r["config"]["train"]["batch_size"] != 256]  # no fit
    lone = critical_plot(batch_table(two), "Critical batch: cb")
    assert [a["title"] for a in lone.meta["axes"]] == ["B_noise over training (blocks of steps)"]
    x0, _, x1, _ = lone.meta["content"]
    assert (x1 - x0) > 0.9 * lone.meta["width"]  # no empty half
    assert lone.meta["width"] < plot.meta["width"] * 0.7


def test_where_a_batch_lies_and_the_ratio_are_judged_on_the_whole_interval():
    """A fit of 1,282 samples [136, unbounded] put every batch of 32-256 "below it" from its
    point estimate, though 128 and 256 lie within a factor of 2 of the interval's low end:
    "near" is all the interval allows. The measured / predicted ratio likewise: within a
    factor of 2 only where its whole range is."""
    rows = batch_table(SWEEP)
    (line,) = C._model_lines(rows, 1282.0, (136.0, math.inf), "measured", None)
    assert "below it (16, 64)" in line and "near it (256)" in line
    assert "critical batch 1,282 [136, unbounded]" in line
    (tight,) = C._model_lines(rows, 100.0, (94.0, 106.0), "measured", None)
    assert "below it (16)" in tight and "near it (64)" in tight and "above it (256)" in tight
    assert C._ratio_text(100, 100, True, (0.6, 1.5)) == "1.00, within a factor of 2"
    assert C._ratio_text(500, 100, True, (2.5, 8.0)) == "5.00, not within a factor of 2"
    assert C._ratio_text(100, 100, True, (0.3, 1.5)) == (
        "1.00 [0.30, 1.50], whether within a factor of 2 not decided by the intervals")
    assert C._ratio_text(100, 100, True, (0.6, math.inf)).startswith("1.00 [0.60, unbounded]")
