"""Co-location verdicts from hand-made figures."""

from scaleprobe.experiments.placement import cpu_list, plan_placement, split_cpus
from scaleprobe.experiments.verdict import (
    JobFigures,
    render_colocate,
    throughput_line,
    totals,
    verdict,
)


def jobs(*pairs):
    return [JobFigures(f"job{i}", a, t, 10.0, 10.0 * a / t if t else None)
            for i, (a, t) in enumerate(pairs)]


def test_no_interference_below_ten_percent():
    v, ev = verdict(jobs((100, 95), (50, 48)), cpu_util_pct=97.0, gpu_util_pct=None)
    assert v == "no interference" and "job0 1.05x" in ev


def test_cpu_saturated_when_busy_and_slower():
    v, ev = verdict(jobs((100, 60), (50, 30)), cpu_util_pct=98.0, gpu_util_pct=40.0, cores=2,
                    threads_total=6)
    assert v == "CPU saturated"
    assert "CPU 98% busy" in ev and "job0 1.67x" in ev and "6 compute threads on 2 cores" in ev
    assert 'placement = "pinned"' in ev


def test_device_contention_when_gpu_busy_and_cpu_not():
    v, ev = verdict(jobs((100, 60), (50, 30)), cpu_util_pct=55.0, gpu_util_pct=99.0)
    assert v == "device contention" and "GPU 99% busy" in ev and "CPU was not (55% busy)" in ev


def test_device_contention_when_jobs_share_one_gpu():
    v, ev = verdict(jobs((100, 70), (50, 35)), cpu_util_pct=40.0, gpu_util_pct=70.0,
                    share_gpu=True)
    assert v == "device contention" and "shared one GPU" in ev


def test_slower_without_saturation_names_the_other_suspects():
    v, ev = verdict(jobs((100, 70), (50, 35)), cpu_util_pct=60.0, gpu_util_pct=None)
    assert v == "interference without saturation" and "memory bandwidth" in ev


def test_missing_figures_are_not_guessed():
    v, ev = verdict(jobs((100, None), (50, 40)), cpu_util_pct=60.0, gpu_util_pct=None)
    assert v == "not measured" and "job0" in ev


def test_totals_and_throughput_line():
    js = jobs((100, 50), (60, 30))
    t = totals(js)
    assert t == {"total_samples_per_s_alone_sum": 160, "total_samples_per_s_together": 80}
    assert "50% of the" in throughput_line(t, 2)


def test_render_has_every_job_and_the_verdict():
    js = jobs((100, 50), (60, 30))
    rec = {"experiment": {"id": "x"}, "placement": "shared", "placement_note": "shared: all",
           "jobs": [j.to_dict() for j in js], **totals(js), "cpu_util_pct_together": 99.0,
           "gpu_util_pct_together": None, "overlap_s": 3.0, "verdict": "CPU saturated",
           "evidence": "because", "throughput": "t"}
    text = render_colocate(rec)
    assert "| job0 | 100 | 50.0 |" in text and "2.00x" in text
    assert "**verdict: CPU saturated** - because" in text


def test_pinned_jobs_on_fewer_gpus_still_share_one():
    v, _ = verdict(jobs((100, 70), (50, 35)), cpu_util_pct=55.0, gpu_util_pct=53.0,
                   share_gpu=True, placement="pinned")
    assert v == "device contention"


def test_cpu_sets_are_split_evenly_and_said_so():
    assert cpu_list([0, 1, 2, 3, 6]) == "0-3,6" and cpu_list([5]) == "5"
    assert split_cpus([0, 1], 2) == [[0], [1]]
    assert split_cpus([0, 1, 2, 3, 4], 2) == [[0, 1, 2], [3, 4]]
    assert split_cpus([0, 1], 3) == [[0], [1], [0]]
    plan, note = plan_placement(3, "pinned", [0, 1], n_gpus=0)
    assert [p["cpus"] for p in plan] == [[0], [1], [0]]
    assert "more jobs than CPUs" in note
    plan, note = plan_placement(2, "pinned", [0, 1, 2, 3], n_gpus=0)
    assert "split evenly" in note
    plan, note = plan_placement(2, "pinned", list(range(16)), n_gpus=2)
    assert [p["cpus"] for p in plan] == [list(range(8)), list(range(8, 16))]
    assert "job 2: GPU 1" in note and "job 2: CPU 8-15" in note
    plan, note = plan_placement(3, "shared", [0, 1], n_gpus=0)
    assert all(p["cpus"] is None for p in plan) and "all 3 jobs" in note


def test_gpu_pinning_uses_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    plan, note = plan_placement(3, "pinned", [0, 1], n_gpus=2)
    assert [p["env"]["CUDA_VISIBLE_DEVICES"] for p in plan] == ["2", "3", "2"]
    assert "some share" in note
