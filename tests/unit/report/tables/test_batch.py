"""Batch-size table, growth rates, the batch and loader-worker recommendations."""

from __future__ import annotations

import re

import pytest

from scaleprobe.report.reading import records as R
from scaleprobe.report.tables import batch as _batch
from scaleprobe.report.tables import batch_rule as _rule
from tests.unit.report import factory
from tests.unit.report.factory import GIB, loaded, run, typed_module

B = typed_module(_batch)
BR = typed_module(_rule)


def _batch_sweep(device: bool = False, repeats: int = 3) -> list[dict]:
    """16 -> 32 halves the epoch (pays), 32 -> 64 saves 4% for +46% memory (does not pay),
    three repeats each with a few percent of run-to-run noise."""
    points = [(16, 1.0, 100.0, 160.0), (32, 1.37, 52.0, 308.0), (64, 2.0, 50.0, 320.0)]
    noise = [1.0, 1.02, 0.99]
    recs = []
    for r in range(repeats):
        for bs, mem_gib, epoch, sps in points:
            mem = int(mem_gib * GIB)
            recs.append(run(f"b{bs}r{r}", batch=bs,
                            experiment=sweep_point("bs", batch_size=bs, repeat=r),
                            epoch_s=epoch * noise[r], sps=sps / noise[r], host_mem=mem * 3,
                            device_mem=mem if device else None, gpu=80.0 if device else None))
    recs.append(run("b128", status="oom", batch=128, error="CUDA out of memory",
                    experiment=sweep_point("bs", batch_size=128)))
    return recs


def sweep_point(eid: str, repeat: int = 0, **point) -> dict:
    return factory.sweep_point(eid, repeat, **point)


def test_batch_table_growth_rates_and_cells():
    rows = B.batch_table(_batch_sweep(device=True))
    assert [r["batch_size"] for r in rows] == [16, 32, 64, 128]
    assert [r["repeats"] for r in rows] == [3, 3, 3, 0]
    assert rows[0]["mem_growth"] is None and rows[0]["epoch_growth"] is None
    assert rows[1]["mem_growth"] == pytest.approx(0.37, abs=1e-3)
    assert rows[1]["epoch_growth"] == pytest.approx(-0.48)  # the same ratio in every repeat
    assert rows[2]["mem_growth"] == pytest.approx(2.0 / 1.37 - 1, abs=1e-3)
    assert rows[2]["epoch_growth"] == pytest.approx(50 / 52 - 1)
    cells = [B.batch_cells(r) for r in rows]
    assert cells[0][3] == "-" and cells[0][5] == "-"  # no growth for the first point
    assert cells[1][3] == "+37%" and cells[1][5].startswith("-48% [")
    assert cells[1][2] == "1.4 GiB"
    assert cells[3][2] == "out of memory"
    assert rows[0]["memory_kind"] == "device"


def test_table_shows_the_median_repeat():
    """Catches a table that shows the last (or first) repeat instead of the median one."""
    recs = [run(f"r{i}", experiment=sweep_point("m", batch_size=32, repeat=i), sps=v)
            for i, v in enumerate([300.0, 100.0, 200.0])]
    rows = B.batch_table(recs)
    assert rows[0]["samples_per_s"] == 200.0 and rows[0]["repeats"] == 3


def test_epoch_time_cell_is_the_median_over_repeats():
    """Bug caught: the epoch-time cell taken from the median-throughput repeat while the
    growth beside it is estimated over all repeats: under load the table read 1.0 s -> 0.8 s
    next to "+97%"."""
    recs = [run(f"e{i}", experiment=sweep_point("e", batch_size=32, repeat=i), sps=v,
                epoch_s=e) for i, (v, e) in enumerate([(300.0, 9.0), (100.0, 2.0), (200.0, 1.0)])]
    rows = B.batch_table(recs)
    assert rows[0]["samples_per_s"] == 200.0 and rows[0]["epoch_time_s"] == 2.0


def test_every_column_of_a_row_is_the_median_over_an_even_number_of_repeats():
    """Bug caught (audit item 1): samples/s from the lower middle of 4 repeats (7.02 shown,
    median 8.09) beside an epoch time averaged over them: the row did not add up."""
    sps = [6.0, 7.02, 9.16, 12.0]
    recs = [run(f"q{i}", experiment=sweep_point("q", batch_size=32, repeat=i), sps=v,
                epoch_s=1437 / v) for i, v in enumerate(sps)]
    row = B.batch_table(recs)[0]
    assert row["samples_per_s"] == pytest.approx(8.09)
    # the epoch column is the median of the same repeats' epochs, not one repeat's
    assert row["epoch_time_s"] == pytest.approx((1437 / 7.02 + 1437 / 9.16) / 2)


def test_most_efficient_is_picked_on_the_figure_its_intervals_compare():
    """Bug caught (audit item 4): "Most efficient: batch 32" picked from the row's figures
    while its own paired ratio (each repeat's samples/s per GiB) favoured another batch."""
    recs = []
    # batch 32, per repeat: 50, 202 and 100 samples/s per GiB (median 100); the row's medians
    # (101 samples/s at 2 GiB) read 50
    for i, (v, mem) in enumerate([(100.0, 2.0), (101.0, 0.5), (300.0, 3.0)]):
        recs.append(run(f"s{i}", experiment=sweep_point("eff", batch_size=32, repeat=i), sps=v,
                        host_mem=int(mem * GIB)))
    for i in range(3):  # batch 128: 75 per GiB every repeat
        recs.append(run(f"l{i}", experiment=sweep_point("eff", batch_size=128, repeat=i),
                        sps=75.0, host_mem=GIB))
    rec = BR.recommend_batch(recs)
    assert rec["most_efficient"]["batch_size"] == 32
    assert rec["most_efficient"]["samples_per_s_per_gib"] == pytest.approx(100.0)


def _cpu_sweep(probe_every_repeat: bool = True) -> list[dict]:
    """Batch 16 and 32 on the CPU, three repeats each: the probe's tensor bytes the same in
    every repeat, the process's resident memory not (glibc keeps or gives back)."""
    MB = 1_000_000
    recs = []
    for r, rss in enumerate((1.0, 1.6, 0.8)):
        for bs in (16, 32):
            rec = run(f"c{bs}r{r}", batch=bs, experiment=sweep_point("cpu", batch_size=bs,
                                                                     repeat=r),
                      host_mem=int(bs * 3 * MB * rss))
            if probe_every_repeat or r < 2:
                rec["metrics"]["memory_facts"] = {
                    "batch_sizes": [bs, bs // 2], "input_bytes": bs * 1000,
                    "fwd_bwd_peak_bytes": [bs * 625_000, bs * 312_500],
                    "optimizer_peak_bytes": [0, 0]}
                rec["metrics"]["state_bytes"] = {"params_bytes": 4 * MB, "grads_bytes": 4 * MB,
                                                 "optimizer_bytes": 4 * MB}
            recs.append(rec)
    return recs


def test_cpu_runs_with_the_probe_compare_their_tensor_bytes():
    """On the CPU the batch table compares the tensor bytes at the step's peak (parameters 4
    MB + optimizer state 4 MB + the batch + the forward/backward peak: 18.016 MB at 16,
    28.032 MB at 32): exact, the same in every repeat, so its growth has no interval; the
    resident peak, which moves from repeat to repeat, is shown beside it."""
    rows = B.batch_table(_cpu_sweep())
    assert [r["memory_kind"] for r in rows] == ["tensor", "tensor"]
    assert rows[0]["peak_mem_bytes"] == 18_016_000 and rows[1]["peak_mem_bytes"] == 28_032_000
    assert rows[1]["mem_growth"] == pytest.approx(28.032 / 18.016 - 1)
    assert rows[1]["mem_interval"] is None
    cell = B.batch_cells(rows[1])
    assert re.fullmatch(r"26\.7 MiB tensors \(\d+(\.\d)? MiB host\)", cell[2]), cell[2]
    assert cell[3] == "+56%"
    # a growth measured exactly has no "true growth" other than itself
    assert "true growth" in BR.bar_text(1.5) and "true growth" not in BR.bar_text(1.5, None,
                                                                                  exact=True)
    # one repeat without the probe: the host's resident memory for the whole table
    assert B.batch_table(_cpu_sweep(probe_every_repeat=False))[0]["memory_kind"] == "host"


def test_host_memory_used_when_no_device_memory():
    rows = B.batch_table(_batch_sweep(device=False))
    assert rows[0]["memory_kind"] == "host"
    assert rows[0]["peak_mem_bytes"] == 3 * GIB


def test_host_memory_growth_is_net_of_the_baseline():
    """Catches growth computed on total RSS, where torch's ~750 MiB hides every batch's cost
    (+2-5% per doubling, so the batch rule always passed)."""
    recs = []
    for bs, net in ((16, 100), (32, 200)):
        r = run(f"b{bs}", batch=bs, experiment=sweep_point("h", batch_size=bs),
                host_mem=(750 + net) << 20)
        r["metrics"]["peak_mem_bytes"]["host_net"] = net << 20
        recs.append(r)
    rows = B.batch_table(recs)
    assert rows[1]["mem_growth"] == pytest.approx(1.0)
    assert B.batch_cells(rows[1])[2] == "200 MiB net (950 MiB total)"


def test_recommend_batch_fastest_and_most_efficient():
    rec = BR.recommend_batch(_batch_sweep(device=True))
    assert rec["fastest"]["batch_size"] == 64
    # 64 is 4% faster than 32 with a 1-3% spread over three repeats: a decided, small lead
    assert rec["fastest_decided"]
    eff = rec["most_efficient"]
    assert eff["batch_size"] == 32 and rec["most_efficient_decided"]
    assert eff["samples_per_s_per_gib"] == pytest.approx(308 / 1.37, rel=1e-3)
    assert [s["pays"] for s in rec["steps"]] == [True, False]
    assert "16 -> 32: epoch time -48%, memory +37%: pays" in rec["text"]
    assert "32 -> 64: epoch time -4%, memory +46%: does not pay" in rec["text"]
    # a decided claim shows the intervals that decided it, as an inconclusive one does
    assert ("Fastest: batch 64, epoch time 50.0 s, 320 samples/s, ahead of batch 16 (2.00x "
            "[1.98, 2.02], 3 repeats); batch 32 (1.04x [1.03, 1.05], 3 repeats) (each: that "
            "batch size's figure / this one's).") in rec["text"]
    assert ("Most efficient: batch 32, 225 samples/s per GiB of peak device memory (the "
            "median over its repeats of each one's own; the row: 308 samples/s at 1.4 GiB), "
            "ahead of batch 16 (0.71x [0.70, 0.72], 3 repeats); batch "
            "64 (0.71x [0.70, 0.72], 3 repeats)") in rec["text"]
    assert "intervals over 3 repeats" in rec["text"]


def _noisy(sps_by_batch: dict[int, list[float]], mem_gib: dict[int, float]) -> list[dict]:
    out = []
    for bs, vals in sps_by_batch.items():
        for i, v in enumerate(vals):
            out.append(run(f"b{bs}r{i}", batch=bs, sps=v, epoch_s=1797 / v,
                           experiment=sweep_point("n", batch_size=bs, repeat=i),
                           host_mem=int(mem_gib[bs] * GIB)))
    return out


def test_noise_makes_the_batch_verdicts_inconclusive():
    """The demo's reversed advice: one run per point said "16 -> 32 does not pay" and
    "fastest: 256"; a rerun said the opposite. With the repeats' spread the same figures
    give no verdict, and say how many repeats would decide."""
    recs = _noisy({16: [400.0, 520.0, 450.0], 32: [470.0, 430.0, 540.0]}, {16: 1.0, 32: 1.02})
    rec = BR.recommend_batch(recs)
    assert rec["steps"][0]["pays"] is None
    # epoch ratio 0.95x against a bar of 0.98x, log-spread 0.21 over 3 pairs: no number of
    # repeats within reach decides a 3% difference under that noise, and the text says so
    assert rec["steps"][0]["text"] == (
        "inconclusive: epoch-time ratio (pays below 1 - memory growth = 0.98x) 0.95x [0.57, 1.60], 3 repeats; more "
        "than 30 repeats would be needed, or the difference is smaller than the noise")
    assert not rec["fastest_decided"]
    assert "Fastest: inconclusive" in rec["text"] and "not told apart from batch" in rec["text"]


def test_pays_needs_the_whole_interval_below_the_memory_bar():
    from scaleprobe.core import metrics as M

    iv = M.Interval(0.70, 0.60, 0.80, 3, "test")
    assert BR.pays(iv, 0.15) is True  # bar 0.85: the interval lies below it
    assert BR.pays(iv, 0.25) is None  # bar 0.75: inside the interval, cannot tell
    assert BR.pays(iv, 0.45) is False  # bar 0.55: the interval lies above it
    assert BR.pays(None, 0.1) is None and BR.pays(iv, None) is None


def test_an_interval_touching_the_memory_bar_decides_nothing():
    """Catches a rule that takes an interval edge on the bar (<= for <) as a decision: at the
    bar the larger batch's epoch time falls exactly as fast as its memory grows."""
    from scaleprobe.core import metrics as M

    at_hi = M.Interval(0.70, 0.60, 0.75, 3, "test")  # bar 0.75 = the upper edge
    at_lo = M.Interval(0.80, 0.75, 0.90, 3, "test")  # bar 0.75 = the lower edge
    assert BR.pays(at_hi, 0.25) is None and BR.pays(at_lo, 0.25) is None
    assert BR.pays(at_hi, 0.2499) is True and BR.pays(at_lo, 0.2501) is False


def test_step_text_says_why_it_cannot_tell():
    """Catches a step printed as "pays" / "does not pay" without the figures to decide it."""
    from scaleprobe.core import metrics as M

    iv = M.Interval(0.70, 0.60, 0.80, 3, "test")
    assert BR._step_text(None, 0.2) == "cannot tell: no epoch-time spread"
    assert BR._step_text(iv, None) == "cannot tell: no memory figure"
    # each verdict with the interval it was decided on (a "does not pay" had none)
    assert BR._step_text(iv, 0.15).startswith("pays (epoch-time ratio ")
    assert BR._step_text(iv, 0.45).startswith("does not pay (epoch-time ratio ")
    assert re.search(r"\d\.\d\dx \[\d\.\d\d, \d\.\d\d\], pays below 1 - memory growth = "
                     r"0\.55x\)$", BR._step_text(iv, 0.45)), BR._step_text(iv, 0.45)
    undecided = BR._step_text(iv, 0.25)
    assert undecided.startswith(
        "inconclusive: epoch-time ratio (pays below 1 - memory growth = 0.75x) 0.70x "), undecided


def test_recommend_batch_nothing_finished():
    recs = [run("x", status="oom", experiment=sweep_point("bs", batch_size=512))]
    rec = BR.recommend_batch(recs)
    assert rec["fastest"] is None and "nothing to recommend" in rec["text"]


def test_skipped_points_of_a_sweep_record_are_oom_rows():
    recs = _batch_sweep()[:3]
    recs.append({"kind": "sweep", "experiment": {"id": "bs", "kind": "sweep"},
                 "skipped": [{"point": {"batch_size": 256}, "status": "oom",
                              "reason": "batch 128 ran out of memory"}]})
    rows = B.batch_table(recs)
    assert rows[-1]["batch_size"] == 256 and rows[-1]["status"] == "oom"


def test_groups_by_other_axes_keep_growth_within_group():
    recs = [run(f"w{w}b{bs}", batch=bs, workers=w, sps=10.0 * bs * (w + 1),
                experiment=sweep_point("g", batch_size=bs, workers=w))
            for w in (1, 2) for bs in (16, 32)]
    rows = B.batch_table(recs)
    assert len({r["group"] for r in rows}) == 2
    assert [r["epoch_growth"] is None for r in rows] == [True, False, True, False]


def test_point_reused_from_another_sweep_is_listed_under_both():
    from tests.unit.report.factory import loaded, run, sweep_point

    measured = run("b64", batch=64, experiment=sweep_point("batch", batch_size=64))
    other = run("naive", loader="naive", experiment=sweep_point("loader", loader="naive"))
    summary = {"kind": "sweep", "experiment": {"id": "loader", "kind": "sweep"},
               "points": [{"point": {"loader": "naive"}, "run_id": other["run_id"]},
                          {"point": {"loader": "pipelined"}, "run_id": measured["run_id"]}]}
    records = loaded([measured, other, summary])
    groups = R.by_experiment(records, "sweep")
    assert [r.run_id for r in groups["batch"]] == [measured["run_id"]]
    loader = groups["loader"]
    assert [r.run_id for r in loader] == [other["run_id"], measured["run_id"]]
    assert loader[1].point == {"loader": "pipelined"}
    assert loader[1].experiment.reused == measured["run_id"]
    assert records[0].point == {"batch_size": 64}  # the original record is not changed


def test_a_step_up_from_a_compute_bound_batch_says_why_it_cannot_pay():
    """Bug caught (roofline context missing): a larger batch that does not pay next to a
    smaller one already at 60% of the device's peak gets the same bare "does not pay" as one
    that waits on its loader; the text names the compute-bound batch and its MFU. A batch
    below the compute-bound bar (MFU 10%) gets no such note."""
    recs = []
    for r in range(3):
        for b, e, mfu in ((32, 10.0, 0.60), (64, 10.0 + 0.05 * r, 0.61)):
            rec = run(f"b{b}r{r}", batch=b, epoch_s=e, host_mem=(1 + b // 32) * GIB,
                      experiment=sweep_point("pk", batch_size=b, repeat=r))
            rec["metrics"]["mfu"] = mfu
            recs.append(rec)
    (step,) = BR.recommend_batch(recs)["steps"]
    assert step["pays"] is False
    assert ("batch 32 already ran at 60% of the device's peak FLOP/s and batch 64 at 61%: "
            "compute-bound, at or above 30%, so a larger batch cannot cut the compute per "
            "sample") in step["text"], step["text"]
    for rec in recs:
        rec["metrics"]["mfu"] = 0.10
    (step,) = BR.recommend_batch(recs)["steps"]
    assert "peak" not in step["text"]


def test_memory_that_moves_between_repeats_widens_the_bar():
    """Host memory of one point moves between repeats (52-70 MiB net for the demo's batch 16
    on a 2-core CPU). The epoch ratio 0.70x is tight, and memory's median growth +25% puts
    the bar at 0.75x: the point estimate said "pays". Memory's own interval over the paired
    repeats (ratios 1.05, 1.25, 1.45) moves the bar anywhere from below 0.2x to above 1x, so
    the step cannot be called. Bug caught: a memory growth taken from the median repeat
    alone, as if it were exact."""
    recs = []
    for r, (m16, m32) in enumerate(((1.0, 1.05), (1.0, 1.25), (1.0, 1.45))):
        for bs, mem, epoch in ((16, m16, 10.0), (32, m32, 7.0 * (1 + 0.005 * r))):
            recs.append(run(f"b{bs}r{r}", batch=bs, epoch_s=epoch, sps=1000.0 / epoch,
                            host_mem=int(mem * GIB),
                            experiment=sweep_point("mv", batch_size=bs, repeat=r)))
    rows = B.batch_table(recs)
    assert rows[1]["mem_growth"] == pytest.approx(0.25, abs=1e-3)
    miv = rows[1]["mem_interval"]
    assert miv.lo < 1.0 < 1.25 < miv.hi  # the t-interval over three pairs
    # the median's growth as a reader divides the cells, then the paired estimate (the
    # geometric mean of 1.05, 1.25, 1.45: +24%) that its interval is centred on
    assert B.batch_cells(rows[1])[3].startswith("+25%; paired +24% [")
    rec = BR.recommend_batch(recs)
    (step,) = rec["steps"]
    assert BR.pays(rows[1]["epoch_interval"], 0.25) is True  # the point estimate alone
    assert step["pays"] is None
    # samples/s per GiB is each repeat's own ratio: batch 16 / batch 32 runs 0.74-1.02x, so
    # neither is the most efficient (scaling the tight samples/s interval by the median
    # memory ratio made batch 32 "ahead" at 0.88x)
    assert not rec["most_efficient_decided"]
    assert "Most efficient: inconclusive: batch 32" in rec["text"]
    assert step["text"].startswith(
        "inconclusive: epoch-time ratio (pays below 1 - memory growth = 0.75x; ")
    assert "over memory's interval" in step["text"]
    # the epoch interval alone clears the bar at memory's estimate; memory's interval (log
    # spread 0.16 over 3 pairs) would need about 115 repeats to narrow inside the 7% gap.
    # Bug caught: "about 3 repeats would decide it" (the repeats already run), counted
    # against the estimate's bar alone
    assert step["text"].endswith("more than 30 repeats would be needed, or the difference "
                                 "is smaller than the noise"), step["text"]
    # the same memory in every repeat: the bar is exact again, and the step pays
    for rec in recs:
        if rec["experiment"]["point"]["batch_size"] == 32:
            rec["metrics"]["peak_mem_bytes"]["host"] = int(1.25 * GIB)
    (step,) = BR.recommend_batch(recs)["steps"]
    assert step["pays"] is True and step["text"].startswith("pays (epoch-time ratio ")


def test_repeats_to_decide_counts_memory_s_interval_too():
    """The demo's 32 -> 64 step (2-core CPU, 2026-11-25): epoch ratio 0.92x [0.80, 1.07],
    memory ratio 2.36x [0.88, 4.35] over 3 pairs. At memory's estimate the bar (-0.36x) is
    already cleared, so a count against the estimate alone said "about 3 repeats would decide
    it" - the repeats already run. With both intervals narrowing (t quantile 4.30 -> 3.18),
    a 4th repeat puts memory's interval above 1.12 and the step reads "does not pay"."""
    import math

    from scaleprobe.core import metrics as M

    def iv(est, lo, hi):
        return M.Interval(est, lo, hi, 3, "test",
                          log_sd=math.log(hi / lo) / 2 / M.t_quantile(2) * math.sqrt(3))

    e, m = iv(0.92, 0.80, 1.07), iv(2.36, 0.884, 4.349)
    assert BR.pays(e, 1.36, m) is None
    text = BR._step_text(e, 1.36, m)
    # never a ratio of 0 or below (this read "-2.35x to 1.12x over memory's interval"), nor
    # the numbers of memory's interval, which spans a factor of 4.9
    assert "memory grew +136%, more than epoch time can fall" in text
    assert "memory's own interval: spread too large" in text
    assert "-2.35x" not in text and "-0.36x" not in text
    assert text.endswith("; about 4 repeats would decide it"), text
    assert BR.pays(M.projected(e, 4), 1.36, M.projected(m, 4)) is False
    assert BR.pays(M.projected(e, 3), 1.36, M.projected(m, 3)) is None


def _h100_search(repeats: int = 2) -> list[dict]:
    """The H100 batch search's shape (resnet34, 512 px, 880 training samples): batch 64 ran
    no whole epoch in its window (epoch projected from its 106 ms median step x 13), while 128
    and 256 did, and their measured epochs hold a 1.1-1.5 s wait for each epoch's first batch."""
    pts = [(64, 10.6, 0.1056, 13, None), (128, 20.9, 0.2066, 6, 3.9), (256, 41.5, 0.411, 3, 2.4)]
    noise = [1.0, 1.03]
    recs = []
    for r in range(repeats):
        for bs, mem, step, spe, epoch in pts:
            s = step * noise[r]
            rec = run(f"b{bs}r{r}", batch=bs, step_s=s,
                      experiment=sweep_point("h100", batch_size=bs, repeat=r),
                      epoch_s=(epoch * noise[r] if epoch else s * spe), host_mem=int(mem * GIB),
                      device_mem=int(mem * GIB), gpu=80.0)
            rec["metrics"]["epoch_time_projected"] = epoch is None
            rec["metrics"]["steps_per_epoch"] = spe
            recs.append(rec)
    return recs


def test_a_measured_epoch_is_never_compared_with_a_projected_one():
    """Bug caught (H100, 2026-11-25): batch 64's projected epoch (1.4 s, no warm-up, no
    epoch-start wait) against batch 128's measured one (3.9 s, both in it) read as "+183%",
    and 64 named the fastest; on one basis (median step x steps per epoch) 128 and 256 are
    shorter and tied. On the timed window's basis (samples / samples/s; here the runs'
    samples/s is batch / step), over the same 832 samples: batch 64's epoch holds 13 x 64,
    128's and 256's only 768, their last partial batch dropped."""
    recs = _h100_search()
    rows = B.batch_table(recs)
    assert {r["epoch_basis"] for r in rows} == {B.SAME_SAMPLES}
    assert {r["epoch_samples"] for r in rows} == {832}
    assert all(r["epoch_basis_mixed"] for r in rows)
    assert rows[1]["epoch_growth"] == pytest.approx(0.2066 / 128 / (0.1056 / 64) - 1, abs=1e-3)
    assert rows[2]["epoch_growth"] == pytest.approx(0.411 / 256 / (0.2066 / 128) - 1, abs=1e-3)
    rec = BR.recommend_batch(recs)
    assert rec["fastest"]["batch_size"] == 256
    assert ("compared as epochs of the same samples projected from the timed window (those "
            "samples / samples/s) for every batch size") in rec["text"]
    assert "Fastest: inconclusive: batch 256, epoch time ~1.36 s" in rec["text"]
    assert "not told apart from batch 128" in rec["text"]  # both at the GPU's 620 samples/s
    assert "+183%" not in rec["text"]


def test_all_measured_epochs_keep_the_measured_basis_without_samples_per_epoch():
    """Every point ran whole epochs and the records hold no steps per epoch (no samples per
    epoch to put on the window's basis): the measured epochs (waits included) are compared."""
    recs = _h100_search()
    for r in recs:
        r["metrics"]["steps_per_epoch"] = None
        if r["metrics"]["epoch_time_projected"]:
            r["metrics"]["epoch_time_projected"] = False
            r["metrics"]["epoch_time_s"] = 5.0
    rows = B.batch_table(recs)
    assert {r["epoch_basis"] for r in rows} == {"measured"}
    assert not any(r["epoch_basis_mixed"] for r in rows)
    assert 3.9 / 5.0 - 1 < rows[1]["epoch_growth"] < 3.9 * 1.03 / 5.0 - 1  # over the repeats
    assert "compared as projected" not in BR.recommend_batch(recs)["text"]


def test_measured_epochs_with_samples_per_epoch_are_shown_on_the_windows_basis():
    """Bug caught: a row's epoch time and samples/s come from one basis, the timed
    window: batch 128 measured a 3.9 s epoch (its epochs' first-batch waits in it) but its
    window ran 128 / 0.2066 = 619.6 samples/s, and 6 x 128 = 768 samples per epoch take
    768 / 619.6 = 1.24 s at that rate; the row shows the group's 832 samples at that rate,
    ~1.34 s, not 3.9 s."""
    recs = _h100_search(repeats=1)
    for r in recs:
        r["metrics"]["epoch_time_projected"] = False
        r["metrics"]["epoch_time_s"] = 3.9
    rows = B.batch_table(recs)
    assert {r["epoch_basis"] for r in rows} == {B.SAME_SAMPLES}
    assert rows[1]["samples_per_s"] == pytest.approx(128 / 0.2066)
    assert B.shown_epoch(rows[1]) == pytest.approx(832 / (128 / 0.2066))
    assert B.batch_cells(rows[1])[4] == "~1.34 s"


def test_a_runs_only_epoch_is_not_a_like_for_like_measured_epoch():
    """A point whose only complete epoch is its first (warm-up and loader start-up in it)
    is compared as projected, with every other point (bug caught: the H100 search's batch
    128, 3.9 s over its first epoch, against batch 256's median of later epochs)."""
    recs = _h100_search()
    for r in recs:
        r["metrics"]["epoch_time_projected"] = False
        r["metrics"]["epoch_times_s"] = ([3.9] if loaded(r).batch_size == 128
                                         else [5.0, 2.4, 2.4])
    rows = B.batch_table(recs)
    assert {r["epoch_basis"] for r in rows} == {B.SAME_SAMPLES} and rows[1]["epoch_basis_mixed"]
    assert rows[1]["epoch_compared_s"] == pytest.approx(0.2066 * 6.5 * 1.015, rel=0.02)  # 832 = 6.5 x 128
    cells = B.batch_cells(rows[1])
    assert cells[4] == "~1.36 s", cells  # the compared figure (832 samples), marked projected


def test_fastest_across_groups_of_different_bases_is_by_samples_per_s():
    """One group with epoch times in seconds, another only with samples/s: 1 / samples/s
    (about 0.02) is not an epoch time, so it cannot win on it (bug caught: model=b's slower
    batch named fastest with 'epoch time n/a')."""
    recs = []
    for model, bs, epoch, sps in (("a", 32, 10.0, 100.0), ("a", 64, 6.0, 120.0),
                                  ("b", 32, None, 50.0), ("b", 64, None, 60.0)):
        r = run(f"{model}{bs}", batch=bs, model=model, sps=sps, epoch_s=epoch,
                experiment=sweep_point("g", batch_size=bs, model=model))
        if epoch is None:
            r["metrics"]["epoch_time_s"] = None
        recs.append(r)
    rows = B.batch_table(recs)
    assert {r["epoch_basis"] for r in rows} == {"measured", "per sample"}
    fast = BR.recommend_batch(recs)["fastest"]
    assert (fast["batch_size"], fast["samples_per_s"]) == (64, 120.0)


def test_a_per_sample_basis_says_so_and_shows_no_mixed_epoch_times():
    """Batch 32 measured (10 s) with no steps per epoch, batch 64 projected (3 s): the growth
    is from samples/s, so the cells show no epoch times that would contradict it."""
    a = run("a", batch=32, sps=100.0, epoch_s=10.0, experiment=sweep_point("p", batch_size=32))
    b = run("b", batch=64, sps=200.0, experiment=sweep_point("p", batch_size=64))
    b["metrics"]["epoch_time_s"] = 3.0
    rows = B.batch_table([a, b])
    assert rows[1]["epoch_basis"] == "per sample" and rows[1]["epoch_basis_mixed"]
    assert B.batch_cells(rows[0])[4] == B.batch_cells(rows[1])[4] == "n/a"
    assert rows[1]["epoch_growth"] == pytest.approx(-0.5)
    assert "as seconds per sample" in BR.recommend_batch([a, b])["text"]


def test_the_csv_and_the_plot_carry_the_compared_epoch():
    """sweep.csv and the batch plot show the figures the growth is computed from (bug
    caught: 1.39 s -> 3.96 s labelled -10%, the rows' own epochs beside the basis' growth)."""
    import csv
    import io

    from scaleprobe.report.render.sweep_tables import batch_csv

    rows = B.batch_table(_h100_search())
    got = list(csv.DictReader(io.StringIO(batch_csv(rows))))
    assert [g["epoch_basis"] for g in got] == [B.SAME_SAMPLES] * 3
    assert float(got[1]["epoch_compared_s"]) == pytest.approx(0.2066 * 6.5 * 1.015, rel=0.02)  # 832 = 6.5 x 128
    assert {g["epoch_samples"] for g in got} == {"832"}  # the samples every epoch is of
    assert float(got[1]["epoch_time_s"]) == pytest.approx(3.9 * 1.015, rel=0.02)  # its own
    assert [B.shown_epoch(r) for r in rows] == [r["epoch_compared_s"] for r in rows]


def test_the_plot_draws_the_compared_epochs():
    """The batch plot's line is the table's Epoch time column on the group's basis (bug
    caught: batch 128's own 3.9 s drawn beside a growth of -10% from its ~1.26 s)."""
    from unittest import mock

    from scaleprobe.report.render import plots

    rows = [r for r in B.batch_table(_h100_search()) if r["status"] == "ok"]
    ax = mock.MagicMock()
    plots._epoch_panel(ax, rows, [r["batch_size"] for r in rows])
    line = next(c for c in ax.plot.call_args_list
                if c.kwargs.get("label") == "the table's row (median repeat)")
    assert list(line.args[1]) == pytest.approx([B.shown_epoch(r) for r in rows])
    # not 3.9: batch 128's 1.26 s epoch of its own 768 samples, on the group's 832
    assert line.args[1][1] == pytest.approx(1.26 * 832 / 768, abs=0.03)
    dots = [c for c in ax.plot.call_args_list if c.kwargs.get("label") != line.kwargs["label"]]
    assert max(max(c.args[1]) for c in dots) < 2.0  # each repeat on the same basis


def test_every_epoch_a_first_one_is_worded_as_such():
    """Every point measured only its first epoch: the text names that, not "some were
    measured over epochs after the first" (none were)."""
    recs = _h100_search()
    for r in recs:
        r["metrics"]["epoch_time_projected"] = False
        r["metrics"]["epoch_time_s"] = r["metrics"]["epoch_time_s"] or 2.0
        r["metrics"]["epoch_times_s"] = [r["metrics"]["epoch_time_s"]]
    text = BR.recommend_batch(recs)["text"]
    assert "(only a first epoch measured, which holds the warm-up)" in text
    assert "after the first" not in text


def test_a_one_repeat_claim_never_says_not_told_apart_beside_a_clear_interval():
    """One repeat decides nothing, even where its interval lies clear of 1 (0.14x [0.12,
    0.15]): the claim says it is not decided and why, never "not told apart" (which the
    interval beside it contradicts); with two repeats "not told apart" is the right words."""
    from scaleprobe.report.tables.batch_target import claim

    tied = ["batch 64 (0.14x [0.12, 0.15], 1 repeat)"]
    one = claim("Most efficient", "batch 16, 148,408 samples/s per GiB", tied, repeats=1)
    assert one.startswith("Most efficient: inconclusive (1 repeat): batch 16")
    assert "not told apart" not in one
    assert "not decided against batch 64 (0.14x [0.12, 0.15], 1 repeat)" in one
    assert one.endswith("one repeat cannot see the drift between runs: 2 or more decide).")
    two = claim("Fastest", "batch 16", ["batch 64 (1.02x [0.9, 1.1], 2 repeats)"], repeats=2)
    assert two.startswith("Fastest: inconclusive: batch 16, not told apart from batch 64")


def _dropping_sweep() -> list[dict]:
    """The demo's digits sweep (1,437 training samples, 2026-11-30): batch 128's epoch holds
    11 x 128 = 1,408 samples at 1,716 samples/s, batch 256's 5 x 256 = 1,280 at 1,675; each
    epoch on its own samples made 256 the shorter (764 ms against 821 ms) at fewer samples/s."""
    recs = []
    for r, noise in enumerate([1.0, 1.01, 0.99]):
        for bs, spe, sps in [(128, 11, 1716.0), (256, 5, 1675.0)]:
            rec = run(f"b{bs}r{r}", batch=bs, sps=sps * noise, host_mem=bs * 2**20,
                      experiment=sweep_point("drop", batch_size=bs, repeat=r))
            rec["metrics"]["steps_per_epoch"] = spe
            recs.append(rec)
    return recs


def test_epochs_that_drop_different_samples_are_compared_over_the_same_samples():
    """Bug caught (the demo, 2026-11-30): "Fastest: batch 256, epoch ~764 ms, 1,675
    samples/s" beside batch 128's 1,716 samples/s: 256's epoch was shorter by the 128 samples
    its last partial batch dropped. Over the same 1,408 samples 128 is the faster, and the
    table's two columns still multiply out."""
    recs = _dropping_sweep()
    rows = B.batch_table(recs)
    assert {r["epoch_samples"] for r in rows} == {1408}
    for row in rows:
        assert B.shown_epoch(row) * row["samples_per_s"] == pytest.approx(1408)
    assert rows[1]["epoch_growth"] == pytest.approx(1716 / 1675 - 1, abs=2e-3)  # +2.4%
    rec = BR.recommend_batch(recs)
    assert rec["fastest"]["batch_size"] == 128
    note = B.same_samples_note(rows)
    assert note is not None and "1,408 samples" in note and "batch 256's 1,280" in note
    # the same epochs about alike (here 1,408 and 1,400): each on its own samples, as before
    for rec_ in recs:
        if rec_["batch"]["per_device"] == 256:
            rec_["batch"].update(per_device=280, **{"global": 280})
    same = B.batch_table(recs)
    assert {r["epoch_basis"] for r in same} == {"window"} and B.same_samples_note(same) is None


def test_the_only_batch_size_that_finished_is_no_ranking():
    """A sweep whose other batch sizes ran out of memory (or were interrupted) has one
    finished row: "Fastest: batch 16" would rank it against nothing, and the findings then
    advised it as decided while the report's headline said inconclusive."""
    recs = [r for r in _batch_sweep() if r["config"]["train"]["batch_size"] == 16
            or r["status"] == "oom"]
    rec = BR.recommend_batch(recs)
    assert rec["fastest"]["batch_size"] == 16
    assert not rec["fastest_decided"] and not rec["most_efficient_decided"]
    fastest = next(line for line in rec["text"].splitlines() if line.startswith("Fastest"))
    assert fastest.startswith("Fastest: inconclusive: batch 16, ")
    assert "no other batch size of its group finished: nothing to compare" in fastest


def test_a_tie_over_one_repeat_is_not_called_told_apart_when_the_pick_has_more():
    """The fastest row had 3 repeats, another only 1 (its other repeats failed): the
    interval between them stands on 1 pair, so the words are one repeat's, and the header
    says the repeats differ."""
    recs = _noisy({16: [400.0, 520.0, 450.0], 32: [470.0]}, {16: 1.0, 32: 1.02})
    text = BR.recommend_batch(recs)["text"]
    fastest = next(line for line in text.splitlines() if line.startswith("Fastest"))
    assert fastest.startswith("Fastest: inconclusive (1 repeat): "), fastest
    assert "not told apart" not in fastest and "not decided against batch" in fastest
    assert "(intervals over 1-3 repeats, as many as each pair has, 95%)" in text


def test_a_step_decided_on_a_wide_interval_shows_the_bounds_that_decided_it():
    """0.42x [0.10, 1.70] lies wholly above a bar of 0.06x: "does not pay" is decided, and
    the bounds are its evidence; "(spread too large)" beside a decided verdict read as a
    contradiction."""
    from scaleprobe.core import metrics as M

    iv = M.Interval(0.42, 0.10, 1.70, 3, "test")
    text = BR._step_text(iv, 0.94)
    assert text.startswith("does not pay (epoch-time ratio 0.42x [0.10, 1.70], "), text
    assert "spread too large" not in text
