"""The scale table with --target: time-to-target speedup beside the throughput speedup."""

from scaleprobe.report.tables import scale as _scale
from scaleprobe.report.tables import time_to_target as _target
from scaleprobe.report.tables.scale import SCALE_HEADERS, scale_cells
from scaleprobe.report.tables.time_to_target import table_parts
from tests.unit.report.factory import typed_api

scale_table = typed_api(_scale.scale_table)
explain = typed_api(_target.explain)



def _run(n, rep, sps, ttt, samples, status="ok"):
    reached = ttt is not None
    return {"kind": "run", "status": status, "run_id": f"r{n}-{rep}", "name": f"n{n}",
            "config": {"train": {"target": "accuracy=0.8", "lr": 0.05, "lr_scaling": "none",
                                 "warmup_steps": 5, "seed": rep}, "dist": {"nproc": n}},
            "experiment": {"id": "scale-x-ttt", "kind": "scale", "point": {"nproc": n},
                           "repeat": rep},
            "batch": {"world_size": n, "global": 64 * n},
            "env": {"world_size": n},
            "metrics": {"samples_per_s": sps, "step_time_s": {"median": 0.1, "rel_ci": 0.01},
                        "lr_effective": 0.05},
            "target": {"metric": "accuracy", "target": 0.8, "reached": reached,
                       "time_to_target_s": ttt, "samples_to_target": samples}}


def _rows(recs):
    return scale_table(recs)


def test_table_shows_both_speedups_and_the_samples_it_took():
    """Bug caught: a scale with --target that showed only the throughput speedup would tell
    a user the second process pays (1.8x samples/s) while it reached the target no sooner
    (it needed twice the samples)."""
    recs = []
    for rep, (t1, t2) in enumerate([(10.0, 10.5), (12.0, 11.0), (11.0, 11.8)]):
        recs += [_run(1, rep, 100.0 + rep, t1, 1000), _run(2, rep, 180.0 + rep, t2, 2000)]
    rows = _rows(recs)
    headers, cells = table_parts(SCALE_HEADERS, rows, scale_cells)
    assert "Paired speedup" in headers and "Paired TTT speedup" in headers
    two = dict(zip(headers, cells[1], strict=True))
    assert two["Paired speedup"].startswith("1.79x [")  # throughput: decided, with its interval
    # 0.95-1.09 over 3 seeds: not decided, and the interval holds 1
    assert two["Paired TTT speedup"].endswith(", not resolved")
    assert two["Reached"] == "3/3" and two["Samples to target"] == "2,000"
    text = "\n".join(explain(rows, recs))
    assert "statistical efficiency 0.50" in text and "2.00x the samples" in text
    assert "--lr-scaling none" in text and "MLPerf" in text


def test_a_clear_time_to_target_gain_is_stated_with_its_interval():
    recs = []
    for rep, (t1, t2) in enumerate([(10.0, 5.5), (12.0, 6.4), (11.0, 6.0)]):
        recs += [_run(1, rep, 100.0, t1, 1000), _run(2, rep, 190.0, t2, 1050)]
    row = _rows(recs)[1]
    assert row["ttt_speedup_interval"].above(1.0)
    assert "sooner than 1 process" in explain([row], recs)[0]


def test_a_clear_time_to_target_loss_is_later_with_its_interval():
    """The words of the other side come from the same claim (``ttt_claim``) as the table's
    cell: 2 processes that needed 3x the samples reach the target later, decided."""
    recs = []
    for rep, (t1, t2) in enumerate([(10.0, 16.0), (12.0, 18.5), (11.0, 17.0)]):
        recs += [_run(1, rep, 100.0, t1, 1000), _run(2, rep, 190.0, t2, 3000)]
    row = _rows(recs)[1]
    line = explain([row], recs)[0]
    assert row["ttt_speedup_interval"].below(1.0)
    assert "reached later than 1 process by 0.6" in line and "sooner" not in line


def test_runs_that_missed_the_target_still_count_for_throughput_and_are_reported():
    """A seed that did not reach the target (status target_not_reached) is a complete
    throughput measurement; its time drops out of the pairs, and the table says 1 of 2."""
    recs = [_run(1, 0, 100.0, 10.0, 1000), _run(2, 0, 180.0, 7.0, 1400),
            _run(1, 1, 101.0, 11.0, 1100),
            _run(2, 1, 181.0, None, None, status="target_not_reached")]
    row = _rows(recs)[1]
    assert row["repeats"] == 2 and row["ttt_reached"] == 1
    assert row["speedup_interval"] is not None and row["speedup_interval"].n == 2
    assert row["ttt_speedup_interval"] is None  # one pair reached: no spread to judge by
    assert table_parts(SCALE_HEADERS, [row], scale_cells)[1][0][-1].endswith(
        ", inconclusive (1 repeat)")


def test_no_time_to_target_verdict_from_runs_with_an_implausible_throughput():
    """Bug caught (seen on a loaded machine): a 1-process baseline slowed by other load gave
    an implausible 4.2x throughput speedup on 2 processes AND a "4.35x sooner" time-to-target
    verdict from the same runs; the second must be withheld like the first."""
    recs = []
    for rep, (t1, t2) in enumerate([(14.8, 2.2), (11.1, 3.1), (9.6, 2.9)]):
        recs += [_run(1, rep, 100.0, t1, 1408), _run(2, rep, 440.0, t2, 2816)]
    row = _rows(recs)[1]
    assert row["implausible"]
    line = explain([row], recs)[0]
    assert "left out of every verdict" in line and "sooner" not in line
    assert "implausible" in table_parts(SCALE_HEADERS, [row], scale_cells)[1][0][-1]


def test_each_repeats_own_seed_is_not_a_difference_between_the_rows():
    """Bug caught: under --target each repeat trains with its own seed, paired by repeat;
    where the median repeats by samples/s fell on different seeds (1 process: seed 2, 2
    processes: seed 1) the row read "1.40x (not like for like)" and was left out of every
    verdict, though every pair behind its interval shares a seed."""
    recs = []
    for rep, (s1, s2) in enumerate([(100.0, 180.0), (102.0, 181.0), (101.0, 182.0)]):
        recs += [_run(1, rep, s1, 10.0, 1000), _run(2, rep, s2, 10.0, 2000)]
    base, two = _rows(recs)
    assert base["record"].cfg("train.seed") != two["record"].cfg("train.seed")
    assert two["unlike"] == [] and two["verdict_ok"]
    # any other difference still counts
    recs[3]["config"]["train"]["lr"] = 0.1  # the 2-process row shown: its repeat 1
    assert _rows(recs)[1]["unlike"] == ["train.lr: 0.05 -> 0.1"]


def test_statistical_efficiency_names_the_real_baseline():
    """Bug caught: a scale over 2 and 4 processes (no 1-process point, so 2 is the baseline)
    said 4 processes needed "2.00x the samples of 1 process"."""
    recs = []
    for rep, (t2, t4) in enumerate([(10.0, 10.5), (12.0, 11.0), (11.0, 11.8)]):
        recs += [_run(2, rep, 100.0 + rep, t2, 1000), _run(4, rep, 180.0 + rep, t4, 2000)]
    rows = _rows(recs)
    assert rows[1]["base_nproc"] == 2
    line = explain(rows, recs)[0]
    assert "2.00x the samples of 2 processes" in line and "of 1 process" not in line


def test_time_to_target_figures_from_runs_under_load_say_so():
    """Bug caught: the Paired TTT speedup cell and the time-to-target line were built from
    a claim with no sources, so a run measured under load left no mark on them while the
    paired speedup beside them (the same runs) said "under load"."""
    recs = []
    for rep, (t1, t2) in enumerate([(10.0, 5.5), (12.0, 6.4), (11.0, 6.0)]):
        recs += [_run(1, rep, 100.0, t1, 1000), _run(2, rep, 190.0, t2, 1050)]
    recs[0]["load"] = {"flag": True, "machine_cores": 4}  # 1 process, seed 0
    row = _rows(recs)[1]
    headers, cells = table_parts(SCALE_HEADERS, [row], scale_cells)
    cell = dict(zip(headers, cells[0], strict=True))
    assert cell["Paired speedup"].endswith("under load")
    assert cell["Paired TTT speedup"].endswith("under load")
    line = explain([row], recs)[0]
    assert "sooner than 1 process" in line
    assert "measured under load: nproc=1 (repeat 1)" in line and "(1 of 6 source runs)" in line
    quiet = []
    for rep, (t1, t2) in enumerate([(10.0, 5.5), (12.0, 6.4), (11.0, 6.0)]):
        quiet += [_run(1, rep, 100.0, t1, 1000), _run(2, rep, 190.0, t2, 1050)]
    qrow = _rows(quiet)[1]
    assert "under load" not in table_parts(SCALE_HEADERS, [qrow], scale_cells)[1][0][-1]
    assert "under load" not in explain([qrow], quiet)[0]
