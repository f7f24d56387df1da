"""Scaling table: speedup, efficiency and what the gap was lost to."""

from __future__ import annotations

import pytest

from scaleprobe.report.tables import scale as _scale
from tests.unit.report.factory import loaded, run, scale_point, typed_module

S = typed_module(_scale)


def _bd(data: float, comm: float, compute: float) -> dict[str, float]:
    return {"data": data, "h2d": 0.0, "forward": compute * 0.4, "backward": compute * 0.5,
            "optimizer": compute * 0.1, "comm": comm}


def _scale_records() -> list[dict]:
    one = run("n1", strategy="ddp", nproc=1, sps=100.0, bd=_bd(0.005, 0.0, 0.095),
              experiment=scale_point("sc", 1))
    two = run("n2", strategy="ddp", nproc=2, sps=162.0, bd=_bd(0.0112, 0.0148, 0.0975),
              experiment=scale_point("sc", 2))
    four = run("n4", status="failed", error="rank 3 lost", strategy="ddp", nproc=4,
               experiment=scale_point("sc", 4))
    return [four, two, one]


def test_scale_table_speedup_efficiency_and_losses():
    rows = S.scale_table(_scale_records())
    assert [r["nproc"] for r in rows] == [1, 2, 4]
    assert rows[0]["speedup"] == pytest.approx(1.0)
    two = rows[1]
    assert two["speedup"] == pytest.approx(1.62)
    assert two["efficiency"] == pytest.approx(0.81)
    total = 0.0112 + 0.0148 + 0.0975
    assert two["lost"]["communication"] == pytest.approx(0.0148 / total)
    assert two["lost"]["data wait"] == pytest.approx((0.0112 - 0.005) / total)
    assert two["lost"]["slower compute"] == pytest.approx((0.0975 - 0.095) / total)
    # one repeat: the runs' own spread (1% each) widened to the 10% process-to-process floor
    assert two["line"] == ("2 processes x 2 threads: 1.62x [1.47, 1.78], 1 repeat: inconclusive "
                           "(1 repeat), leaning faster than 1 process; efficiency 81% [74%, "
                           "89%]; lost to: communication 12%, data wait 5%, slower compute 2%")
    assert rows[2]["line"] == "4 processes x 2 threads: failed: rank 3 lost"
    assert S.scale_cells(rows[1])[1:6] == ["2", "162", "1.62x",
                                          "1.62x [1.47, 1.78], inconclusive (1 repeat)",
                                          "81% [74%, 89%]"]
    assert S.scale_cells(rows[0])[5] == "100%"  # the baseline: no interval


def _repeated(eid: str, sps: dict[int, list[float]]) -> list[dict]:
    out = []
    for n, vals in sps.items():
        for r, v in enumerate(vals):
            exp = {**scale_point(eid, n), "repeat": r}
            out.append(run(f"n{n}r{r}", strategy="ddp", nproc=n, sps=v, experiment=exp))
    return out


def test_speedup_interval_pairs_repeats_interleaved():
    """Catches unpaired (or median-of-medians) speedups: the machine drifts between repeats,
    the ratio within each repeat is steady at 1.8x."""
    rows = S.scale_table(_repeated("p", {1: [100.0, 70.0, 130.0], 2: [180.0, 126.0, 234.0]}))
    two = rows[1]
    assert two["repeats"] == 3 and two["speedup"] == pytest.approx(1.8)
    assert two["speedup_interval"].lo == pytest.approx(1.8, rel=0.02)
    assert two["efficiency_interval"].estimate == pytest.approx(0.9)
    assert two["verdict_ok"]


def test_implausible_speedup_is_marked_and_kept_out_of_verdicts():
    """The 6.02x on 2 processes that was printed without a warning."""
    recs = _repeated("v", {1: [30.0], 2: [180.6]})
    for r in recs:
        if r["config"]["dist"]["nproc"] == 1:
            r["metrics"]["step_time_s"]["rel_ci"] = 0.39
    two = S.scale_table(recs)[1]
    assert two["speedup"] == pytest.approx(6.02)
    assert two["implausible"] and not two["verdict_ok"]
    assert "implausible" in two["line"] and "+/-39.0% within a run" in two["line"]
    assert "(implausible)" in S.scale_cells(two)[4]
    from scaleprobe.core.thresholds import DEFAULT
    from scaleprobe.report.findings.across_runs import _scaling

    found = _scaling(loaded(recs), DEFAULT)
    assert [f.verdict for f in found] == ["implausible speedup"]


def test_scaling_loss_needs_the_whole_interval_below_the_bar():
    """A noisy 0.7-0.95 efficiency is not reported as a scaling loss; a steady 0.6 is."""
    from scaleprobe.core.thresholds import DEFAULT
    from scaleprobe.report.findings.across_runs import _scaling

    noisy = _repeated("a", {1: [100.0, 100.0, 100.0], 2: [140.0, 190.0, 160.0]})
    assert _scaling(loaded(noisy), DEFAULT) == []
    steady = _repeated("b", {1: [100.0, 102.0, 98.0], 2: [120.0, 122.0, 119.0]})
    assert [f.verdict for f in _scaling(loaded(steady), DEFAULT)] == ["scaling loss"]


def test_two_experiments_with_the_same_point_labels_stay_apart():
    """Every scale point is labelled nproc=2: two experiments in one folder must not mix."""
    a = _repeated("scale-digits", {1: [100.0], 2: [190.0]})
    b = _repeated("scale-vgg", {1: [10.0], 2: [12.0]})
    rows = {(r["experiment"], r["nproc"]): r for r in S.scale_table(a + b)}
    assert rows[("scale-digits", 2)]["speedup"] == pytest.approx(1.9)
    assert rows[("scale-vgg", 2)]["speedup"] == pytest.approx(1.2)


def test_strong_scaling_expects_less_compute_per_step():
    base = run("g1", nproc=1, batch=64, sps=100.0, bd=_bd(0.0, 0.0, 0.64),
               experiment=scale_point("st", 1))
    half = run("g2", nproc=2, batch=32, sps=180.0, bd=_bd(0.0, 0.02, 0.34),
               experiment=scale_point("st", 2))
    two = S.scale_table([base, half])[1]
    assert two["lost"]["slower compute"] == pytest.approx((0.34 - 0.32) / 0.36)


def test_without_a_1_process_point_the_smallest_count_is_the_baseline():
    """`scale --nproc 2 --nnodes 1,2` has no 1-process point. Catches such a scale giving no
    speedup at all (the command then failed), and one judged against a 1-process ideal: 4
    processes against 2 are ideally 2x, so 1.5x is 75% efficient, and above 2 x 1.1 is
    implausible, not above 4 x 1.1."""
    recs = _repeated("b2", {2: [200.0, 190.0, 210.0], 4: [300.0, 285.0, 315.0]})
    two, four = S.scale_table(recs)
    assert two["is_base"] and two["speedup"] == pytest.approx(1.0)
    assert two["line"].startswith("2 processes x 2 threads: the baseline, 200 samples/s")
    assert four["base_nproc"] == 2 and not four["is_base"]
    assert four["speedup"] == pytest.approx(1.5) and four["efficiency"] == pytest.approx(0.75)
    assert four["efficiency_interval"].estimate == pytest.approx(0.75)
    assert four["line"].startswith("4 processes x 2 threads against 2: 1.50x [")
    odd = S.scale_table(_repeated("b2", {2: [100.0, 100.0], 4: [240.0, 240.0]}))[1]
    assert odd["implausible"].startswith("above 4/2 x 1.1") and "baseline (2 processes)" in \
        odd["implausible"]
    single = S.scale_table([run("n2", nproc=2, experiment=scale_point("x", 2))])
    assert single[0]["is_base"] and "the baseline" in single[0]["line"]


def test_a_failed_smallest_point_leaves_the_next_as_the_baseline():
    """Catches a scale whose 1-process point failed giving no figure for the rest."""
    recs = _repeated("f", {2: [200.0], 4: [360.0]})
    recs.append(run("n1", status="failed", error="boom", nproc=1, experiment=scale_point("f", 1)))
    rows = S.scale_table(recs)
    assert [r["nproc"] for r in rows] == [1, 2, 4] and rows[0]["line"] == "1 process x 2 threads: failed: boom"
    assert rows[1]["is_base"] and rows[2]["speedup"] == pytest.approx(1.8)


def test_threads_per_rank_are_part_of_the_pairing():
    """Bug caught: the 1-process baseline ran 2 threads beside ranks of 1 thread each; under
    load every 2-process point was then 4-9x "faster" and blamed on "a measuring error, most
    likely in the 1-process baseline": the configuration scaleprobe chose. The pairing states
    the difference and gives no verdict."""
    recs = _repeated("t", {1: [25.0, 24.0], 2: [210.0, 214.0]})
    for r in recs:
        r["env"]["threads"] = 2 if r["config"]["dist"]["nproc"] == 1 else 1
    two = S.scale_table(recs)[1]
    assert two["implausible"].startswith("above 2 x 1.1: not like for like (threads per rank: "
                                         "2 -> 1)"), two["implausible"]
    assert "measuring error" not in two["line"] and not two["verdict_ok"]
    assert S.scale_cells(two)[1] == "1"
    same = _repeated("u", {1: [100.0, 102.0], 2: [180.0, 183.0]})  # 2 threads everywhere
    two = S.scale_table(same)[1]
    assert two["unlike"] == [] and two["verdict_ok"] and two["threads"] == 2
    for r in same:
        if r["config"]["dist"]["nproc"] == 2:
            r["config"]["train"]["optimizer"] = "adamw"
    two = S.scale_table(same)[1]
    assert two["unlike"] == ["train.optimizer: (absent) -> adamw"] and not two["verdict_ok"]
    assert "not like for like" in two["line"] and "(not like for like)" in S.scale_cells(two)[4]


def test_no_loss_is_attributed_above_full_efficiency():
    """Bug caught: "Lost to: communication 14%" on a 332%-efficiency row (3% on its rerun)."""
    recs = _repeated("w", {1: [100.0, 100.0], 2: [205.0, 206.0]})
    for r in recs:
        if r["config"]["dist"]["nproc"] == 2:
            r["metrics"]["breakdown_s"] = _bd(0.0, 0.02, 0.08)
    two = S.scale_table(recs)[1]
    assert two["efficiency"] > 1.0 and two["lost"] == {} and "lost to" not in two["line"]


def _busy(rec: dict, cores: float) -> dict:
    """``rec`` measured while ``cores`` cores of a 4-core machine were busy outside it."""
    rec["metrics"]["outside_cpu_cores"] = cores
    rec["load"] = {"flag": cores > 0.4, "outside_cpu_cores": cores, "machine_cores": 4}
    return rec


def test_speedup_whose_interval_holds_1_is_not_resolved_in_words():
    """Bug caught: `1.13x [0.88, 1.44] ... lost to` without saying 2 processes were not
    resolved faster than 1. Paired ratios 1.0, 1.1, 1.3: log-mean by hand below."""
    import math
    recs = _repeated("nr", {1: [100.0, 100.0, 100.0], 2: [100.0, 110.0, 130.0]})
    two = S.scale_table(recs)[1]
    logs = [0.0, math.log(1.1), math.log(1.3)]
    m = sum(logs) / 3
    sd = math.sqrt(sum((x - m) ** 2 for x in logs) / 2)
    lo = math.exp(m - 4.302653 * sd / math.sqrt(3))  # t(0.975, 2) = 4.3027
    assert lo < 1.0 < math.exp(m)
    assert two["line"].startswith(f"2 processes x 2 threads: {math.exp(m):.2f}x [{lo:.2f}, ")
    assert ": not resolved (the interval includes 1x)" in two["line"]
    assert S.scale_cells(two)[4].endswith(", not resolved")
    # the paired efficiency beside it carries the same interval, halved (it stood bare)
    assert S.scale_cells(two)[5] == "56% [41%, 78%]"
    assert math.exp(m) / 2 == pytest.approx(0.563, abs=0.001)
    # seeds too far apart: both say so (a user read "83%" beside "spread too large")
    wide = S.scale_table(_repeated("w", {1: [100.0] * 3, 2: [80.0, 150.0, 260.0]}))[1]
    assert S.scale_cells(wide)[4:6] == ["1.46x (spread too large, 3 repeats), not resolved",
                                        "73% (spread too large, 3 repeats)"]


def test_load_caveat_rides_on_the_speedup_and_lost_to_figures():
    """Bug caught: 'lost to: slower compute 31%' read as a property of 2-process DDP when
    every run had 1.5-1.7 cores of outside load."""
    recs = [_busy(r, 1.7 if "n2" in r["name"] else 0.05) for r in _scale_records()[1:]]
    two = S.scale_table(recs)[1]
    assert two["lost"]
    line = two["line"]
    assert "lost to: communication 12%" in line
    assert line.endswith("measured under load: nproc=2: 1.70 cores outside (1 of 2 source "
                         "runs); the figure may be slower than the machine allows")
    cells = S.scale_cells(two)
    assert cells[4].endswith("inconclusive (1 repeat), under load")
    assert cells[9].endswith("(under load)")


def test_no_caveat_when_no_run_was_loaded():
    recs = [_busy(r, 0.05) for r in _scale_records()[1:]]
    two = S.scale_table(recs)[1]
    assert "under load" not in two["line"] and "under load" not in " ".join(S.scale_cells(two))


def test_scale_md_and_scale_json_say_the_same_words(tmp_path):
    """The scale command writes the speedup claim to scale.md and scale.json: one renderer,
    the load caveat in both."""
    import json

    from scaleprobe.commands.scale import _write_table

    recs = [_busy(r, 1.7 if "n2" in r["name"] else 0.05) for r in _scale_records()[1:]]
    rows = S.scale_table(recs)
    assert _write_table(tmp_path, "sc", rows) == 0
    md = (tmp_path / "scale.md").read_text()
    (claim,) = json.loads((tmp_path / "scale.json").read_text())["claims"]
    assert claim["nproc"] == 2 and claim["under_load"] is True
    assert claim["rule"] == "fewer than 2 repeats a side"
    assert f"- {claim['text']}" in md
    assert "measured under load: nproc=2: 1.70 cores outside" in claim["text"]


def test_scale_md_lists_the_points_under_load_and_marks_what_they_stand_behind(tmp_path):
    """Bug caught: scale.md wrote its table and lines but never the "Measured under load" list
    sweep.md and the report give, and a loaded 1-process baseline - the usual cause of an
    implausible row - left that row, the baseline's line and the Samples/s, Speedup and Step
    cells unmarked."""
    from scaleprobe.commands.scale import _write_table

    recs = _repeated("v", {1: [30.0], 2: [180.6]})
    for r in recs:
        _busy(r, 1.7 if r["config"]["dist"]["nproc"] == 1 else 0.05)
    rows = S.scale_table(recs)
    base, two = rows
    assert two["implausible"]
    _write_table(tmp_path, "v", rows)
    md = (tmp_path / "scale.md").read_text()
    assert "- Measured under load (1 of 2 points): nproc=1 (repeat 1) (1.70 cores outside)" in md
    caveat = ("measured under load: nproc=1 (repeat 1): 1.70 cores outside (1 of 2 source "
              "runs); the figure may be slower than the machine allows")
    assert two["line"].endswith("left out of every verdict; " + caveat)
    assert base["line"].endswith("; " + caveat.replace("1 of 2", "1 of 1"))
    b, t = S.scale_cells(base), S.scale_cells(two)
    assert b[2] == "30.0, under load" and b[6].endswith(", under load")  # its own run
    assert t[2] == "181" and not t[6].endswith("under load")  # a quiet run's own figures
    assert t[3] == "6.02x, under load"  # the ratio of the two: one of them loaded
    assert t[4] == "6.02x (implausible), under load"
    # not like for like: the same
    for r in recs:
        r["env"]["threads"] = 2 if r["config"]["dist"]["nproc"] == 1 else 1
    two = S.scale_table(recs)[1]
    assert "not like for like" in two["line"] and two["line"].endswith(caveat)
    quiet = _repeated("q", {1: [100.0], 2: [180.0]})
    _write_table(tmp_path, "q", S.scale_table([_busy(r, 0.05) for r in quiet]))
    assert "under load" not in (tmp_path / "scale.md").read_text()


def _gap_records(sps_two: float) -> list[dict]:
    """1 process: data 5 ms, compute 95 ms; 2 processes: data 5.8 ms (+0.6% of its step,
    below minor_fraction), communication 20 ms, compute 98.5 ms (a 124.3 ms step)."""
    one = run("n1", strategy="ddp", nproc=1, sps=100.0, bd=_bd(0.005, 0.0, 0.095),
              experiment=scale_point("g", 1))
    two = run("n2", strategy="ddp", nproc=2, sps=sps_two, bd=_bd(0.0058, 0.02, 0.0985),
              experiment=scale_point("g", 2))
    return [one, two]


def test_lost_to_adds_up_to_the_efficiency_gap_in_its_row():
    """Bug caught: "Lost to" listed the median repeat's shares, minor ones dropped, beside a
    paired efficiency whose gap they did not add up to (81% beside shares of 19% read as
    complete). The listed shares and "other/unexplained" now add up to 100% - the
    efficiency shown, within the cells' rounding (whole percents: exactly)."""
    import re

    two = S.scale_table(_gap_records(160.0))[1]
    total = 0.0058 + 0.02 + 0.0985
    assert "data wait" not in two["lost"]  # 0.6%: below minor_fraction, not listed
    assert two["lost"]["communication"] == pytest.approx(0.02 / total)
    cells = S.scale_cells(two)
    assert cells[5].startswith("80% ")
    assert cells[9] == "communication 16%, slower compute 3%, other/unexplained 1%"
    shares = [int(x) for x in re.findall(r"(-?\d+)%", cells[9])]
    assert sum(shares) == 100 - 80
    assert "lost to: communication 16%, slower compute 3%, other/unexplained 1%" in two["line"]
    # the shares exceed the gap: the remainder says by how much, negative
    over = S.scale_table(_gap_records(180.0))[1]
    assert S.scale_cells(over)[9] == "communication 16%, slower compute 3%, other/unexplained -9%"
    assert S.lost_parts(over)[-1] == ("other/unexplained", -9)
    # the parts add up exactly: no remainder shown
    exact = S.scale_table(_gap_records(162.0))[1]
    assert S.scale_cells(exact)[9] == "communication 16%, slower compute 3%"
