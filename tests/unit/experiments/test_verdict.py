"""Co-location verdicts from hand-made repeat figures: each claim only when the intervals
decide it."""

import pytest

from scaleprobe.core import metrics
from scaleprobe.core.experiment_records import ColocateRecord
from scaleprobe.experiments.colocate_verdict import (
    JobFigures,
    readings_text,
    throughput_line,
    total_interval,
    totals,
    verdict,
)
from scaleprobe.experiments.placement import cpu_list, plan_placement, split_cpus
from scaleprobe.report.render.colocate import render_colocate


def job(name, alone, together):
    """A job over repeats: samples/s alone and together per repeat (epoch = 1000 samples)."""
    return JobFigures(name, tuple(alone), tuple(together),
                      tuple(1000 / a if a else None for a in alone),
                      tuple(1000 / t if t else None for t in together))


SLOW = job("a", (100, 102, 98), (60, 62, 58))  # 1.67x, tight
SLOW2 = job("b", (50, 51, 49), (30, 30, 29))  # 1.68x, tight
CALM = job("a", (100, 102, 98), (97, 100, 96))  # 1.02x, tight


def test_no_interference_only_when_every_interval_lies_below_the_threshold():
    """Catches: "no interference" claimed from a point estimate under 1.10 whose interval
    reaches above it."""
    v, ev = verdict([CALM, job("b", (50, 51, 49), (48, 49, 48))], cpu_util_pct=97.0,
                    gpu_util_pct=None)
    assert v == "no interference" and "below 1.10x" in ev and "a 1.02x [" in ev
    wide = job("b", (50, 60, 45), (52, 48, 45))  # centre 1.06x, interval reaches past 1.10
    assert wide.slowdown < 1.10 and wide.interval.hi > 1.10
    v, ev = verdict([CALM, wide], cpu_util_pct=97.0, gpu_util_pct=None)
    assert v == "inconclusive" and "b's slowdown 1.06x [" in ev and "repeats" in ev


def test_slowdown_exactly_at_the_threshold_decides_nothing():
    """Catches: a threshold compared with >= on one side and < on the other, so a job at
    exactly 1.10x with no spread is called either way; neither claim excludes the other."""
    at = job("a", (110, 110, 110), (100, 100, 100))
    assert at.interval.lo == at.interval.hi == pytest.approx(1.10)
    v, ev = verdict([at, job("b", (100, 102, 98), (97, 100, 96))], cpu_util_pct=99.0,
                    gpu_util_pct=None)
    assert v == "inconclusive" and "a's slowdown 1.10x [1.10, 1.10]" in ev


def test_interference_needs_an_interval_above_the_threshold():
    """Catches: interference stated from a centre above 1.10 whose interval reaches below."""
    straddle = job("a", (112, 111, 113), (100, 100, 100))
    assert straddle.slowdown > 1.10 and not straddle.interval.above(1.10)
    v, _ = verdict([straddle, job("b", (100, 102, 98), (97, 100, 96))], cpu_util_pct=99.0,
                   gpu_util_pct=None)
    assert v == "inconclusive"
    clear = job("a", (120, 121, 119), (100, 100, 100))
    assert clear.interval.above(1.10)
    v, _ = verdict([clear, job("b", (100, 102, 98), (97, 100, 96))], cpu_util_pct=99.0,
                   gpu_util_pct=None)
    assert v == "CPU saturated"


def test_faster_together_is_never_listed_as_slower():
    """Catches observation 7: a job that ran 0.78x (faster) together was listed under "jobs
    slower"."""
    fast = job("b", (78, 79, 77), (100, 100, 100))
    assert fast.reading == "faster together" and SLOW.reading == "slower together"
    v, ev = verdict([SLOW, fast], cpu_util_pct=98.0, gpu_util_pct=None)
    assert v == "CPU saturated"
    above = ev.split("slowdown above 1.10x:")[1].split(";")[0]
    assert "a 1.67x" in above and "b " not in above
    assert "faster together: b 0.78x [" in ev
    assert "slower together: a 1.67x" in ev and "slower together: b" not in ev


def test_cpu_saturated_at_the_threshold_and_threads_are_only_context():
    """Catches: CPU saturation decided by counting threads against cores, and an off-by-one
    at the 90% threshold (at or above = saturated)."""
    v, ev = verdict([SLOW, SLOW2], cpu_util_pct=90.0, gpu_util_pct=40.0, cores=2,
                    threads_total=6)
    assert v == "CPU saturated" and "CPU 90% busy" in ev
    assert "context: 6 compute threads on 2 cores" in ev and 'placement = "pinned"' in ev
    v, ev = verdict([SLOW, SLOW2], cpu_util_pct=89.9, gpu_util_pct=None, cores=2,
                    threads_total=6)
    assert v == "interference without saturation" and "compute threads" not in ev


def test_device_contention_when_gpu_busy_or_shared_and_cpu_not():
    """Catches: GPU contention called while the CPU was the saturated resource."""
    v, ev = verdict([SLOW, SLOW2], cpu_util_pct=55.0, gpu_util_pct=90.0)
    assert v == "device contention" and "GPU 90% busy" in ev and "CPU was not (55% busy)" in ev
    v, ev = verdict([SLOW, SLOW2], cpu_util_pct=40.0, gpu_util_pct=70.0, share_gpu=True)
    assert v == "device contention" and "shared one GPU" in ev
    v, _ = verdict([SLOW, SLOW2], cpu_util_pct=55.0, gpu_util_pct=89.9)
    assert v == "interference without saturation"


def test_missing_figures_are_not_guessed():
    """Catches: a failed run treated as a zero or as no slowdown."""
    v, ev = verdict([job("a", (100, 100), (None, None)), SLOW2], cpu_util_pct=60.0,
                    gpu_util_pct=None)
    assert v == "not measured" and "a" in ev


def test_figures_pair_repeats_and_match_the_interval():
    """Catches: means over all repeats while the interval drops a failed pair, so the table's
    slowdown and its interval disagree."""
    j = job("a", (100, 90, 120), (50, None, 60))
    iv = j.interval
    assert iv.n == 2 and j.paired == [0, 2]
    assert j.slowdown == pytest.approx(iv.estimate)
    assert j.alone_samples_per_s == pytest.approx((100 * 120) ** 0.5)
    assert j.slowdowns == [2.0, None, 2.0]
    d = j.to_dict()
    assert d["slowdown_interval"]["lo"] == iv.lo and d["reading"] == "slower together"
    assert d["alone_samples_per_s_repeats"] == [100, 90, 120]
    assert d["slowdown"] == pytest.approx(metrics.slowdown(d["alone_samples_per_s"],
                                                           d["together_samples_per_s"]))


def test_totals_and_throughput_line():
    js = [job("a", (100, 100), (50, 50)), job("b", (60, 60), (30, 30))]
    t = totals(js)
    assert t == {"total_samples_per_s_alone_sum": pytest.approx(160),
                 "total_samples_per_s_together": pytest.approx(80)}
    iv = total_interval(js)
    assert iv.estimate == pytest.approx(0.5)
    assert "50% [50%, 50%] of the" in throughput_line(t, 2, iv.to_dict())


def test_render_has_every_job_its_interval_and_the_verdict():
    js = [SLOW, job("b", (78, 79, 77), (100, 100, 100))]
    rec = {"experiment": {"id": "x"}, "placement": "shared", "placement_note": "shared: all",
           "repeats": 3, "jobs": [j.to_dict() for j in js], **totals(js),
           "cpu_util_pct_together": 99.0, "gpu_util_pct_together": None, "overlap_s": 3.0,
           "cpu_util_pct_together_repeats": [99.0, 98.0, 100.0],
           "verdict": "CPU saturated", "evidence": "because", "throughput": "t"}
    text = render_colocate(ColocateRecord.from_dict(rec))
    lo, hi = SLOW.interval.lo, SLOW.interval.hi
    assert f"| 1.67x | [{lo:.2f}, {hi:.2f}] | slower together |" in text
    assert "| 0.78x |" in text and "faster together |" in text
    assert "repeats: 3, interleaved" in text and "99%, 98%, 100%" in text
    assert "**verdict: CPU saturated** - because" in text


def test_old_records_without_intervals_still_render():
    """Catches: the report failing on colocate records written before repeats existed."""
    rec = {"experiment": {"id": "old"}, "placement": "shared",
           "jobs": [{"name": "a", "alone_samples_per_s": 100.0, "together_samples_per_s": 50.0,
                     "alone_epoch_time_s": 1.0, "together_epoch_time_s": 2.0, "slowdown": 2.0}],
           "verdict": "CPU saturated", "evidence": "e"}
    assert "| a | 100 | 50.0 | 1.00 s | 2.00 s | 2.00x | n/a | n/a |" in render_colocate(ColocateRecord.from_dict(rec))


def test_pinned_jobs_on_fewer_gpus_still_share_one():
    v, _ = verdict([SLOW, SLOW2], cpu_util_pct=55.0, gpu_util_pct=53.0,
                   share_gpu=True, placement="pinned")
    assert v == "device contention"


def test_cpu_sets_are_split_evenly_and_said_so():
    assert cpu_list([0, 1, 2, 3, 6]) == "0-3,6" and cpu_list([5]) == "5"
    assert split_cpus([0, 1], 2) == [[0], [1]]
    assert split_cpus([0, 1, 2, 3, 4], 2) == [[0, 1, 2], [3, 4]]
    assert split_cpus([0, 1], 3) == [[0], [1], [0]]
    plan, note = plan_placement(3, "pinned", [0, 1], n_gpus=0)
    assert [p.cpus for p in plan] == [[0], [1], [0]]
    assert "more jobs than CPUs" in note
    plan, note = plan_placement(2, "pinned", [0, 1, 2, 3], n_gpus=0)
    assert "split evenly" in note
    plan, note = plan_placement(2, "pinned", list(range(16)), n_gpus=2)
    assert [p.cpus for p in plan] == [list(range(8)), list(range(8, 16))]
    assert "job 2: GPU 1" in note and "job 2: CPU 8-15" in note
    plan, note = plan_placement(3, "shared", [0, 1], n_gpus=0)
    assert all(p.cpus is None for p in plan) and "all 3 jobs" in note


def test_gpu_pinning_uses_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    plan, note = plan_placement(3, "pinned", [0, 1], n_gpus=2)
    assert [p.env["CUDA_VISIBLE_DEVICES"] for p in plan] == ["2", "3", "2"]
    assert "some share" in note


def test_one_repeat_slowdown_is_inconclusive_never_within_noise():
    """Bug caught: a one-repeat 1.45x (and 0.59x) slowdown was read "within noise". Its
    interval (1% within-run spread each side, widened to the 10% floor) is
    [1.45 / 1.1, 1.45 x 1.1] = [1.318, 1.595] (printed 1.59: 1.595 is 1.59499.. in binary):
    clear of 1, yet one repeat decides nothing."""
    slow = JobFigures("a", alone=(145.0,), together=(100.0,), alone_rel_ci=(0.01,),
                      together_rel_ci=(0.01,))
    fast = JobFigures("b", alone=(59.0,), together=(100.0,), alone_rel_ci=(0.01,),
                      together_rel_ci=(0.01,))
    assert slow.interval.lo == pytest.approx(1.45 / 1.1) and slow.interval.hi == pytest.approx(1.595)
    assert slow.reading == fast.reading == "inconclusive (1 repeat)"
    text = readings_text([slow, fast])
    assert text.startswith("inconclusive (1 repeat): a 1.45x [1.32, 1.59], b 0.59x [0.54, 0.65]")
    assert "within noise" not in text


def test_interval_holding_1_is_not_resolved():
    """Paired ratios 1.2, 0.9, 1.05 with three repeats: the t interval holds 1."""
    j = JobFigures("a", alone=(120.0, 90.0, 105.0), together=(100.0, 100.0, 100.0))
    assert j.interval.lo < 1.0 < j.interval.hi
    assert j.reading == "not resolved"


def test_colocate_md_names_a_job_measured_alone_under_load():
    """Bug caught: colocate.md did not say which runs were measured under load. Job a's
    run alone in repeat 2 had 1.60 cores of other processes beside it."""
    from scaleprobe.core.claim import Source

    a = JobFigures("a", (100.0, 102.0, 98.0), (60.0, 62.0, 58.0),
                   sources=(Source("ra0", False), Source("ra1", True, "1.60 cores outside",
                                                         "a alone (repeat 2)"),
                            Source("ra2", False)))
    b = JobFigures("b", (50.0, 51.0, 49.0), (30.0, 30.0, 29.0),
                   sources=tuple(Source(f"rb{i}", False) for i in range(3)))
    rec = ColocateRecord.from_dict({
        "kind": "colocate", "experiment": {"id": "co", "kind": "colocate"}, "repeats": 3,
        "jobs": [a.to_dict(), b.to_dict()], "verdict": "CPU saturated", "evidence": "-"})
    md = render_colocate(rec)
    assert "| slower together, under load |" in md and md.count("under load |") == 1
    assert ("- a: measured under load: a alone (repeat 2): 1.60 cores outside (1 of 3 source "
            "runs)") in md
