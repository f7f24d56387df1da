"""compare: noise-aware verdicts, sides given as files or folders, sweeps by point."""

from __future__ import annotations

import argparse
import json

import pytest

from scaleprobe.commands import compare as cmd
from scaleprobe.core import fmt
from scaleprobe.core.errors import ConfigError
from scaleprobe.report.compare import compare_paths, to_markdown
from scaleprobe.report.compare import compare_runs as _compare_runs
from tests.unit.report.factory import run, sweep_point, typed_api, write_results

compare_runs = typed_api(_compare_runs)


@pytest.mark.parametrize(("a_s", "b_s", "ci", "leans"), [
    (0.100, 0.080, 0.01, "faster"),   # 1.25x: beyond one run's +/-10% noise, still one run
    (0.100, 0.130, 0.01, "slower"),   # 0.77x
    (0.100, 0.101, 0.01, None),       # 1% apart: one run a side cannot say "no change"
    (0.100, 0.103, 0.001, None),      # 3%, steady runs: still within one run's noise
    (0.100, 0.115, 0.08, None),       # 15% inside two 8% within-run spreads
])
def test_one_run_a_side_is_never_a_verdict(a_s, b_s, ci, leans):
    """Catches a verdict from one run a side: "faster together" at 0.59x and "use 2 loader
    workers" were decided from one repeat under drifting load, which one repeat's within-run
    spread cannot see. One run a side is "inconclusive (1 run a side)", leaning where its
    interval (at least +/-10%) excludes 1, with the repeats that would decide."""
    pair = compare_runs(run("a", step_s=a_s, rel_ci=ci), run("b", step_s=b_s, rel_ci=ci))
    assert pair.verdict == "inconclusive", pair.summary
    assert pair.summary.startswith("inconclusive (1 run a side)")
    assert pair.interval.estimate == pytest.approx(a_s / b_s)
    assert pair.interval.n == 1 and pair.interval.hi / pair.interval.lo >= 1.1 ** 2 * 0.999
    assert (f"leaning {leans}" in pair.summary) if leans else "leaning" not in pair.summary
    assert "would decide it" in pair.summary
    assert "smaller than the noise" not in pair.summary  # no noise between runs was measured
    if leans:
        assert pair.need is not None and pair.need >= 2


def _repeated(eid: str, sps: list[float], **kw) -> list[dict]:
    return [run(f"{eid}{i}", sps=v, experiment=sweep_point(eid, repeat=i, batch_size=32), **kw)
            for i, v in enumerate(sps)]


def test_repeats_on_both_sides_give_welch_s_interval(tmp_path):
    """Three repeats a side, from two sessions (not paired): B 10% faster in every repeat is
    "faster"; B within 1% with a tight spread is "no change" (the interval lies inside
    +/-2%), which one run a side can never show."""
    a = write_results(tmp_path / "a", _repeated("s", [100.0, 102.0, 98.0]))
    b = write_results(tmp_path / "b", _repeated("s", [110.0, 112.0, 108.0]))
    (p,) = compare_paths(a, b).pairs
    assert p.verdict == "faster" and p.interval.method.startswith("Welch")
    assert p.interval.estimate == pytest.approx(1.0999, rel=1e-3)
    assert 1.0 < p.interval.lo < 1.1 < p.interval.hi
    steady = write_results(tmp_path / "a2", _repeated("s", [100.0, 100.4, 99.8]))
    same = write_results(tmp_path / "c", _repeated("s", [100.2, 99.9, 100.1]))
    (q,) = compare_paths(steady, same).pairs
    assert q.verdict == "no change", q.summary
    noisy = write_results(tmp_path / "d", _repeated("s", [90.0, 125.0, 104.0]))
    (r,) = compare_paths(a, noisy).pairs
    assert r.verdict == "inconclusive" and "Welch t over the repeats" in r.summary
    # B as fast, A +/-2%: more repeats would show "no change" (the interval
    # narrowing inside +/-2%), not "faster" - the count is of either decision
    close = write_results(tmp_path / "e", _repeated("s", [100.5, 100.0, 99.5]))
    (c,) = compare_paths(a, close).pairs
    assert c.verdict == "inconclusive" and c.need is not None and c.need > 3, c.summary
    assert f"about {c.need} repeats a side would decide it" in c.summary


def test_what_differs_between_a_and_b_is_named(tmp_path):
    """Catches a verdict that reads as the effect of the code change while A and B also
    differed in a key or ran on another machine."""
    same = compare_runs(run("a"), run("b"))
    assert same.differs == []
    b = run("b", batch=64, workers=4)
    b["env"]["host"], b["env"]["cores"] = "otherhost", 8
    b["metrics"]["outside_cpu_cores"] = 3.0
    p = compare_runs(run("a"), b)
    assert "train.batch_size: 32 -> 64" in p.differs and "data.workers: 2 -> 4" in p.differs
    assert "host: testhost -> otherhost" in p.differs and "cores: 4 -> 8" in p.differs
    assert "measured under load: B" in p.differs
    assert "measured under load: B b: 3.00 cores outside (1 of 2 source runs)" in p.summary
    md = to_markdown(compare_paths(write_results(tmp_path / "a", [run("a")]),
                                   write_results(tmp_path / "b", [b])))
    assert "A and B differ in (every verdict measures these together): " in md
    assert "train.batch_size: 32 -> 64" in md


def test_different_global_batch_compares_samples_per_s():
    pair = compare_runs(run("a", batch=32, step_s=0.1), run("b", batch=64, step_s=0.15))
    assert "leaning faster" in pair.summary  # one run a side: no verdict
    assert pair.interval.estimate == pytest.approx((64 / 0.15) / 320)


def test_failed_side_is_not_comparable():
    pair = compare_runs(run("a"), run("b", status="oom", error="oom"))
    assert pair.verdict.startswith("not comparable") and "out of memory" in pair.verdict


def test_sides_as_result_json_run_folder_and_jsonl(tmp_path):
    a_dir = tmp_path / "a" / "run-a"
    a_dir.mkdir(parents=True)
    (a_dir / "result.json").write_text(json.dumps(run("a", step_s=0.1)))
    b_jsonl = write_results(tmp_path / "b", [run("b", step_s=0.07)])
    cmp = compare_paths(a_dir, b_jsonl)
    assert "leaning faster" in cmp.pairs[0].summary
    cmp2 = compare_paths(a_dir / "result.json", tmp_path / "b")
    assert cmp2.pairs[0].summary == cmp.pairs[0].summary
    md = to_markdown(cmp)
    assert "| Metric | A | B | Change |" in md and "leaning faster" in md
    assert "| samples/s | 320 | 457 | +42.9% |" in md


def test_sweeps_matched_by_point(tmp_path):
    def sweep(scale: float) -> list[dict]:
        return [run(f"b{bs}", batch=bs, step_s=0.01 * bs * scale,
                    experiment=sweep_point("s", batch_size=bs)) for bs in (16, 32)]
    a = write_results(tmp_path / "a", sweep(1.0))
    b_recs = sweep(1.0)
    b_recs[1] = run("b32", batch=32, step_s=0.5, experiment=sweep_point("s", batch_size=32))
    b_recs.append(run("b64", batch=64, experiment=sweep_point("s", batch_size=64)))
    b = write_results(tmp_path / "b", b_recs)
    cmp = compare_paths(a, b)
    assert [p.label for p in cmp.pairs] == ["batch_size=16", "batch_size=32"]
    assert [p.verdict for p in cmp.pairs] == ["inconclusive", "inconclusive"]  # one run a side
    assert "leaning" not in cmp.pairs[0].summary and "leaning slower" in cmp.pairs[1].summary
    assert cmp.only_b == ["batch_size=64"]
    md = to_markdown(cmp)
    assert "| batch_size=32 |" in md and "Only in B: batch_size=64" in md


def test_many_plain_runs_are_refused(tmp_path):
    a = write_results(tmp_path / "a", [run("x"), run("y")])
    b = write_results(tmp_path / "b", [run("z")])
    with pytest.raises(ConfigError, match="not points of one sweep"):
        compare_paths(a, b)
    with pytest.raises(ConfigError, match="no such file"):
        compare_paths(tmp_path / "nope", b)


def test_command_prints_and_writes_markdown(tmp_path, capsys):
    a = write_results(tmp_path / "a", [run("a", step_s=0.1)])
    b = write_results(tmp_path / "b", [run("b", step_s=0.1)])
    parser = argparse.ArgumentParser()
    cmd.add_arguments(parser)
    md = tmp_path / "out" / "cmp.md"
    assert cmd.run(parser.parse_args([str(a), str(b), "--md", str(md)])) == 0
    out = capsys.readouterr().out
    assert "no change" in out and "samples/s" in out
    assert "no change" in md.read_text()


def test_two_sweeps_in_one_folder_are_kept_apart(tmp_path):
    def side(step_b: float) -> list[dict]:
        return [run("x16", batch=16, experiment=sweep_point("x", batch_size=16)),
                run("y16", batch=16, step_s=step_b, experiment=sweep_point("y", batch_size=16))]

    cmp = compare_paths(write_results(tmp_path / "a", side(0.1)),
                        write_results(tmp_path / "b", side(0.2)))
    # y's point against y's (2x slower: leaning, one run a side), x's against x's (equal)
    summaries = sorted(p.summary.split(":")[0] for p in cmp.pairs)
    assert summaries == ["inconclusive (1 run a side)",
                         "inconclusive (1 run a side), leaning slower"], summaries
    renamed = compare_paths(write_results(tmp_path / "c", [
        run("z16", batch=16, experiment=sweep_point("z", batch_size=16))]),
        write_results(tmp_path / "d", [
            run("w16", batch=16, experiment=sweep_point("w", batch_size=16)),
            run("w32", batch=32, experiment=sweep_point("w", batch_size=32))]))
    assert len(renamed.pairs) == 1 and renamed.only_b == ["batch_size=32"]


def test_a_difference_of_one_point_is_named_under_that_point(tmp_path):
    """Catches a load (or key) that differs at one point of a sweep comparison said of every
    verdict: the shared differences go on one line, a single point's under its name."""
    def side(loaded: bool) -> list[dict]:
        out = []
        for b in (16, 32):
            r = run(f"b{b}", batch=b, experiment=sweep_point("s", batch_size=b))
            r["metrics"]["outside_cpu_cores"] = 3.0 if loaded and b == 32 else 0.0
            out.append(r)
        return out

    cmp = compare_paths(write_results(tmp_path / "a", side(False)),
                        write_results(tmp_path / "b", side(True)))
    md = to_markdown(cmp)
    assert "batch_size=32 also differs in: measured under load: B" in md
    assert "every verdict measures these together" not in md
    # the verdict that stands on the loaded run says so, in its row and under the table
    assert "| inconclusive, under load |" in md and md.count("under load |") == 1
    assert ("Caveat: batch_size=32: measured under load: B batch_size=32: 3.00 cores outside "
            "(1 of 2 source runs)") in md


def _loaded_repeats(eid: str, sps: list[float], loaded: set[int]) -> list[dict]:
    """``_repeated``, each run's outside load measured: 3.0 of 4 cores on the repeats in
    ``loaded`` (under load), none on the others."""
    out = _repeated(eid, sps)
    for i, r in enumerate(out):
        r["metrics"]["outside_cpu_cores"] = 3.0 if i in loaded else 0.0
    return out


def test_a_loaded_repeat_that_is_not_the_median_puts_the_caveat_on_the_verdict(tmp_path):
    """Bug caught: the load was read from each side's median repeat only, while Welch's
    interval behind "faster" reads every repeat: B's repeat 1 (114 samples/s, not the median
    110) ran beside 3 cores of other work and the verdict printed no caveat. Every repeat
    of both sides is a source of the verdict, named with its side."""
    a = write_results(tmp_path / "a", _loaded_repeats("s", [100.0, 102.0, 98.0], set()))
    b = write_results(tmp_path / "b", _loaded_repeats("s", [114.0, 110.0, 108.0], {0}))
    cmp = compare_paths(a, b)
    (p,) = cmp.pairs
    assert p.verdict == "faster" and p.interval.method.startswith("Welch")
    assert p.b.repeat == 1  # the median repeat shown is not the loaded one
    assert len(p.sources) == 6 and [s.under_load for s in p.sources] == [False] * 3 + [
        True, False, False]
    caveat = ("measured under load: B batch_size=32 (repeat 1): 3.00 cores outside (1 of 6 "
              "source runs); the figure may be slower than the machine allows")
    assert p.summary.startswith("faster: ") and p.summary.endswith(caveat), p.summary
    md = to_markdown(cmp)
    assert caveat in md and "measured under load: B" in md
    assert md.count("measured under load: B batch_size=32") == 1  # on the verdict, once


def test_no_loaded_repeat_no_caveat(tmp_path):
    """Every repeat measured quiet: the same verdict, no load caveat anywhere."""
    a = write_results(tmp_path / "a", _loaded_repeats("s", [100.0, 102.0, 98.0], set()))
    b = write_results(tmp_path / "b", _loaded_repeats("s", [114.0, 110.0, 108.0], set()))
    cmp = compare_paths(a, b)
    (p,) = cmp.pairs
    assert p.verdict == "faster" and len(p.sources) == 6
    assert not p.under_load and p.load_caveat == ""
    assert all(s.under_load is False for s in p.sources)  # measured, quiet
    assert "under load" not in p.summary and "under load" not in to_markdown(cmp)


def test_a_side_whose_median_step_is_not_its_throughput_is_a_caveat(tmp_path):
    """B's samples/s (from its median step) is 1.89x its whole window's, all of the gap the
    wait at epoch starts (the H200 run): the verdict on samples/s stands, with the caveat
    beside it (bug caught: "faster" printed with nothing to say B's epochs were slower)."""
    a = run("a", step_s=0.5, batch=256)
    b = run("b", step_s=0.3725, batch=256)
    for r, window in ((a, 5.0), (b, 7.05)):
        r["metrics"].update(steps_timed=10, window_s=window)
    b["metrics"].update(epoch_starts_timed=3, epoch_start_data_s=1.31,
                        epoch_start_data_share=1.0, epoch_start_window_share=0.51,
                        epoch_start_other_data_s=0.0, steps_per_epoch=3)
    pair = compare_runs(a, b)
    assert len(pair.caveats) == 1 and pair.caveats[0].startswith(
        "B: 363 samples/s over its timed window, 687 from its median step (1.89x): 100% "
        "of the data wait fell on the 3 timed steps that took an epoch's first batch")
    write_results(tmp_path / "a", [a])
    write_results(tmp_path / "b", [b])
    md = to_markdown(compare_paths(tmp_path / "a", tmp_path / "b"))
    assert "Caveat: B: 363 samples/s over its timed window, 687 from its median step" in md
    assert "Caveat: A" not in md  # A's steps agree with its window


@pytest.mark.parametrize("lo,hi,want", [
    (0.981, 1.019, "no change"),      # inside +/-2% both ways
    (0.975, 1.025, "inconclusive"),   # a 5% band would call this no change
    (0.985, 1.030, "inconclusive"),   # an upper bound past +2%: not symmetric
    (0.970, 1.015, "inconclusive"),   # a lower bound past -2%
])
def test_the_no_change_band_is_two_percent_each_way(lo, hi, want):
    """Catches the no-change band widened (2% -> 5%) or made asymmetric."""
    from scaleprobe.core import metrics as M
    from scaleprobe.report import compare as C

    iv = M.Interval(1.0, lo, hi, 3, "test", 0.01, None)
    assert C.verdict(iv) == want


def test_an_older_record_without_status_or_environment_is_not_failed_nor_the_same_machine(
        tmp_path):
    """Bug: a record without `status` read as "failed" (compare: not comparable), and a side
    with no environment at all was "the same kind of machine"."""
    from scaleprobe.report.render.build_report import build_report

    old = run("old", step_s=0.1)
    del old["status"]
    old["env"] = {}
    a = write_results(tmp_path / "a", [old])
    b = write_results(tmp_path / "b", [run("b", step_s=0.1)])
    (p,) = compare_paths(a, b).pairs
    assert p.a.status == "unknown" and p.a.status_text.startswith("unknown (older record")
    assert not p.verdict.startswith("not comparable") and "failed" not in p.summary
    md = to_markdown(compare_paths(a, b))
    assert "same kind of machine" not in md.replace("whether A and B ran on the same kind "
                                                    "of machine is not known", "")
    assert "machine: not recorded for A" in md and "unknown (older record" in md
    report = build_report(a)[0].read_text()
    assert "unknown (older record without a status)" in report and "failed" not in report


def test_a_missing_environment_key_on_one_side_is_a_difference():
    a, b = run("a"), run("b")
    del b["env"]["cpu_model"]
    (pair,) = [compare_runs(a, b)]
    assert "CPU: Test CPU -> (absent)" in pair.differs


def test_an_undecided_comparison_over_repeats_says_not_resolved():
    """Two repeats a side whose interval holds 1 (samples/s 100, 104 against 98, 110: Welch
    on the logs) is "not resolved (the interval includes 1x)", said in words."""
    from scaleprobe.core import metrics as M
    from scaleprobe.report.compare import Pair, verdict

    iv = M.unpaired_ratio_interval([100.0, 104.0], [98.0, 110.0])
    assert iv is not None and iv.lo < 1.0 < iv.hi
    pair = Pair("A vs B", None, None, verdict(iv), iv)  # type: ignore[arg-type]
    assert pair.verdict == "inconclusive"
    assert pair.summary.startswith("not resolved (the interval includes 1x): samples/s B / A ")


def test_two_times_that_would_print_alike_get_the_digits_their_change_needs():
    """Bug caught: "batch prep / step  0.0 ms  0.0 ms  -9.8%": a change no reader can see in
    the figures beside it."""
    from scaleprobe.report.compare import _rel

    d = _rel("batch prep / step", 0.0000400, 0.0000361, fmt.duration)
    assert (d.a, d.b, d.change) == ("0.04 ms", "0.0361 ms", "-9.8%")
    same = _rel("forward / step", 0.0601, 0.0585, fmt.duration)
    assert (same.a, same.b) == ("60.1 ms", "58.5 ms")
