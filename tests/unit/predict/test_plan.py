"""The plan (predict/plan.py, `scaleprobe plan`) on synthetic inputs: every figure checked against
a hand computation, the picks' claims and their words, and each bad flag one line, exit 2."""

import json
import re
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from scaleprobe.cli import main
from scaleprobe.core import claim as CL
from scaleprobe.core import claim_kinds as CK
from scaleprobe.core.errors import ConfigError
from scaleprobe.core.result_model import RunResult
from scaleprobe.predict import memmodel as MM
from scaleprobe.predict import plan as P
from scaleprobe.predict import plan_inputs as PI
from scaleprobe.predict import sample as S
from scaleprobe.predict import stepmodel as M
from scaleprobe.predict.timeline import Bucket, Compute
from tests.unit.predict.test_memmodel import facts

MB = 1_000_000
# 4 MB of fp32 parameters, AdamW (8 MB), 1 kB of activations per sample + 50 kB fixed,
# 100 B of batch per sample, the largest FSDP unit 400 kB (tests/unit/predict/test_memmodel.py)
INPUTS = MM.inputs_from(facts())


def sample(fwd=0.03, bwd=0.06, opt=0.01, data=0.0, steps=4, grad=4 * MB):
    """A one-rank DDP run whose every step is the same: (data, forward, backward,
    optimizer), one bucket of every gradient ready at the end of backward."""
    rows = [Compute(data=data, forward=fwd, backward=bwd, optimizer=opt)] * steps
    return S.RunSample("r", "ddp", 1, 1, float(grad), rows, "synthetic", [Bucket(grad, 1.0, 0.0)],
                       1e-10, None, fwd + bwd + opt + data, None)


def basis(batch=32, runs=2, **kw):
    return {batch: P.Basis(batch, sample(**kw), runs, ("r",), ("r",))}


def test_a_batch_not_measured_scales_data_forward_backward_not_the_optimizer():
    s = P.at_batch(basis(32, data=0.002)[32], 64)
    c = s.rows[0]
    assert (c.data, c.forward, c.backward, c.optimizer) == pytest.approx((0.004, 0.06, 0.12,
                                                                          0.01))
    assert s.step_median_s == pytest.approx(0.102 * 2)
    near = {16: P.Basis(16, s, 1), 64: P.Basis(64, s, 1)}
    assert P.nearest(near, 48).batch == 64  # on a log scale 48 is nearer 64 than 16
    assert P.nearest(near, 32).batch == 16  # a tie: the smaller


def test_steps_to_a_target_follow_the_critical_batch_relation():
    # S_run = 100 steps at batch 32 with B_crit 32: S_min = 50; at 128, 50 x (1 + 1/4)
    tg = P.Target("loss <= 3", 100, 32, 32.0, 16.0, 64.0, "r")
    assert tg.steps_at(32) == pytest.approx(100)
    assert tg.steps_at(128) == pytest.approx(62.5)
    assert tg.steps_at(8) == pytest.approx(250)  # 50 x (1 + 4)
    assert tg.steps_at(128, 64.0) == pytest.approx(100 / 3 * 1.5)  # S_min 100/3


def q(**kw):
    base = dict(strategies=["ddp"], nprocs=[1, 2], batches=[32], device_bytes={1: 80 * MB,
                                                                              2: 80 * MB})
    base.update(kw)
    return P.Question(**base)


def test_memory_fits_tight_and_headroom_by_hand():
    rows = P.memory_rows(INPUTS, q(strategies=["ddp", "fsdp"], nprocs=[2, 4], batches=[64],
                                   device_bytes={2: 17 * MB, 4: 5 * MB}))
    by = {(r.strategy, r.devices): r for r in rows}
    # ddp on 2: 4 MB params + 8 MB AdamW + 4 MB grads + 4 MB buckets + the step
    ddp = by[("ddp", 2)]
    assert ddp.peak_bytes == 20 * MB + 6_400 + 64_000 + 50_000 and not ddp.fits
    assert ddp.does_not_fit and ddp.fit.verdict == CL.DOES_NOT_FIT
    # fsdp on 4: a quarter of 16 MB + the 400 kB unit twice + the step: 4,920,400 of 5 MB,
    # its interval's top 3 units more (FSDP's collectives beside the step): inconclusive,
    # never "fits" on its point estimate
    fsdp = by[("fsdp", 4)]
    assert fsdp.peak_bytes == 4 * MB + 800_000 + 64_000 + 50_000 + 6_400
    assert fsdp.headroom_bytes == 5 * MB - 4_920_400
    assert not fsdp.fits and not fsdp.does_not_fit and fsdp.fit_undecided
    assert fsdp.headroom_at_top_bytes == 5 * MB - 6_120_400 and not fsdp.tight
    assert fsdp.fit.short_verdict == CL.INCONCLUSIVE
    assert by[("fsdp", 2)].fits and not by[("fsdp", 2)].tight  # 8.9 MB of 17 MB
    # ddp's interval has no width here (the activations on a line): 20.1 MB of 22 MB fits,
    # tight (over 90% of the device)
    (ddp,) = P.memory_rows(INPUTS, q(nprocs=[2], batches=[64], device_bytes={2: 22 * MB}))
    assert ddp.fits and ddp.tight
    # fsdp on 4 with 6.5 MB: fits (top 6.12 MB), its point 76% of the device and its top 94%:
    # tight on the interval, as the goal of 10% per point asks
    (fsdp,) = P.memory_rows(INPUTS, q(strategies=["fsdp"], nprocs=[4], batches=[64],
                                      device_bytes={4: 6_500_000}))
    assert fsdp.fits and fsdp.peak_bytes < 0.9 * 6_500_000 and fsdp.tight


def test_one_device_is_planned_once_under_the_first_strategy():
    rows = P.memory_rows(INPUTS, q(strategies=["fsdp", "ddp"]))
    assert sorted((r.strategy, r.devices) for r in rows) == [("ddp", 2), ("fsdp", 1),
                                                             ("fsdp", 2)]


def test_one_device_row_is_the_runs_own_step_and_rate():
    (row,) = P.plan(INPUTS, basis(), q(nprocs=[1]))
    p = row.prediction
    assert p.step_s.value == pytest.approx(0.1) and row.samples_s.value == pytest.approx(320)
    assert row.scaled_from is None and row.runs == 2
    # device-hours per million samples: 1 device x 1e6 / 320 per s
    assert row.cost_h.value == pytest.approx(1e6 / 320 / 3600)


def test_a_scaled_batch_says_so_and_its_rate_follows_the_scaled_step():
    (row,) = P.plan(INPUTS, basis(), q(nprocs=[1], batches=[64]))
    assert row.scaled_from == 32
    assert row.samples_s.value == pytest.approx(64 / 0.19)  # 0.06 + 0.12 + 0.01
    assert any("scaled from the runs at batch 32 in proportion" in n
               for n in row.prediction.notes)


def test_a_batch_between_two_measured_ones_is_on_the_line_through_them():
    """Batch 32 at 50 ms of data + forward + backward, batch 128 at 110 ms (a fixed 30 ms and
    0.625 ms per sample): batch 64 takes 70 ms of them, not 100 (32's in proportion) nor 55
    (128's); the optimizer's 10 ms kept."""
    two = {32: P.Basis(32, sample(fwd=0.02, bwd=0.03, opt=0.01), 1),
           128: P.Basis(128, sample(fwd=0.04, bwd=0.07, opt=0.01), 1)}
    (row,) = P.plan(INPUTS, two, q(nprocs=[1], batches=[64]))
    assert row.scaled_from == 32
    assert row.prediction.step_s.value == pytest.approx(0.08)
    assert any("interpolated between the runs at batch 32 and 128" in n
               for n in row.prediction.notes)
    k, how = P.batch_factor(two, two[128], 256)  # beyond them: in proportion
    assert k == 2 and "in proportion" in how


def test_rows_that_do_not_fit_get_no_step():
    rows = P.plan(INPUTS, basis(), q(device_bytes={1: 10 * MB, 2: 80 * MB}))
    by = {r.devices: r for r in rows}
    assert by[1].prediction is None and by[1].reason and by[1].samples_s.value is None
    assert by[2].prediction is not None


def test_time_to_target_is_steps_times_the_predicted_mean_step():
    tg = P.Target("loss <= 3", 100, 32, 32.0, 32.0, 32.0, "r")
    rows = P.plan(INPUTS, basis(), q(target=tg))
    two = next(r for r in rows if r.devices == 2)
    assert two.global_batch == 64
    assert two.steps_to_target.value == pytest.approx(75)  # 50 x (1 + 32/64)
    assert two.time_to_target_s.value == pytest.approx(75 * two.prediction.step_mean_s)
    assert two.cost_h.value == pytest.approx(2 * two.time_to_target_s.value / 3600)


def _varied(hook_s=0.0, runs=2):
    """A one-rank DDP run whose steps vary (backward 50-90 ms), its one bucket's hook
    ``hook_s`` per step, as two runs pooled."""
    rows = [Compute(forward=0.03, backward=0.05 + 0.01 * (i % 5), optimizer=0.01)
            for i in range(20)]
    s = S.RunSample("r", "ddp", 1, 1, float(4 * MB), rows, "synthetic",
                    [Bucket(4 * MB, 1.0, hook_s)], 1e-10, None, 0.11, None,
                    groups=tuple(i % runs for i in range(20)) if runs > 1 else None)
    return {32: P.Basis(32, s, runs, ("a", "b")[:runs], ("a", "b")[:runs])}


def _efficiency(rows):
    ones = {r.batch: r for r in rows if r.devices == 1}
    P.set_efficiency(rows, ones)
    return ones


def test_efficiency_is_the_ratio_of_the_plans_own_rows():
    """The one-device row is its own basis (100%, not its prediction over the measured run:
    FSDP first on a DDP run whose hook took 8 ms per step once printed 106% there); every
    other row is its samples/s over N x the one-device row's, exactly."""
    b = _varied(hook_s=0.008)
    rows = [r for s in ("fsdp", "ddp") for r in P.plan(
        INPUTS, b, q(strategies=[s], nprocs=[1, 2, 4] if s == "fsdp" else [2, 4],
                     device_bytes=dict.fromkeys((1, 2, 4), 80 * MB)))]
    ones = _efficiency(rows)
    one = ones[32]
    assert one.strategy == "fsdp" and one.efficiency.value == 1.0
    assert one.prediction.efficiency.value > 1.0  # the step model's own: not like-for-like
    for r in rows:
        if r is not one:
            assert r.efficiency.value == pytest.approx(
                r.samples_s.value / (r.devices * one.samples_s.value), rel=1e-12)
            assert r.efficiency.value < 1.0 and r.efficiency_of == one.label()
            # samples/s is the global batch over the predicted mean step, exactly
            assert r.samples_s.value == pytest.approx(r.global_batch / r.prediction.step_mean_s)


def test_efficiency_interval_carries_the_predictions_and_adds_another_basis():
    b = _varied()
    one, two = P.plan(INPUTS, b, q())
    _efficiency([one, two])
    sp, e = two.prediction.speedup, two.efficiency
    assert sp.lo < sp.value < sp.hi  # two runs pooled: a spread to carry
    assert (e.lo / e.value, e.hi / e.value) == pytest.approx((sp.lo / sp.value,
                                                              sp.hi / sp.value))
    # the one-device row drawn from other runs: its own interval added, end against end
    other = P.plan(INPUTS, {32: replace(b[32], run_ids=("c", "d"))}, q(nprocs=[1]))[0]
    P.set_efficiency([two], {32: other})
    o, v = other.samples_s, two.samples_s.value / (2 * other.samples_s.value)
    assert two.efficiency.value == pytest.approx(v)
    assert two.efficiency.lo == pytest.approx(v * sp.lo / sp.value * o.value / o.hi)
    assert two.efficiency.hi == pytest.approx(v * sp.hi / sp.value * o.value / o.lo)


def test_one_device_predicted_for_the_ratio_when_no_row_has_one():
    b = _varied()
    slow = "1gbit,rank1=100mbit"  # a rank one device does not have: its link is not used
    rows = P.plan(INPUTS, b, q(nprocs=[2], device_bytes={1: 1, 2: 80 * MB}, link=slow))
    one = P.one_device(INPUTS, b, q(device_bytes={1: 1, 2: 80 * MB}, link=slow), 32)
    assert not one.fits and one.samples_s.value  # predicted though one device cannot hold it
    P.set_efficiency(rows, {32: one})
    assert "not a row" in rows[0].efficiency_of
    assert rows[0].efficiency.value == pytest.approx(
        rows[0].samples_s.value / (2 * one.samples_s.value))


@pytest.mark.parametrize("lo, hi, runs, verdict", [
    (0.80, 1.04, 2, "not resolved (the interval includes 100%)"),
    (0.80, 0.95, 2, "the interval lies below 100%"),
    (0.80, 0.95, 1, "inconclusive (1 repeat)"),
])
def test_efficiency_claim_says_when_its_interval_holds_100_percent(lo, hi, runs, verdict):
    c = CK.plan_efficiency(0.9, lo, hi, runs, "ddp, batch 32 per device, 1 device")
    assert c.verdict == verdict and c.value == 0.9
    assert c.cell(markdown=False).startswith("90% [80%, ")


def _row(strategy, devices, sps, lo, hi, runs=2, batch=32, crowded=False, peak=(1, 1, 1)):
    """A row that fits (its peak, low and high ``peak`` bytes of 10 MB) and was predicted."""
    point = MM.Point(strategy, devices, batch, {"params": peak[0]}, low_bytes=peak[1],
                     high_bytes=peak[2])
    r = P.Row(strategy, devices, 1, batch, point, 10 * MB, runs=runs)
    r.prediction = SimpleNamespace(oversubscribed=crowded)  # it fits and was predicted
    r.samples_s = M.Figure(sps, lo, hi)
    return r


def _src(r):
    return (CL.Source(f"run-{r.strategy}"),)


def test_fastest_against_its_runner_up_with_the_two_intervals():
    rows = [_row("ddp", 2, 180, 170, 190), _row("ddp", 4, 300, 280, 320),
            _row("fsdp", 4, 250, 240, 260)]
    pk = P.pick(rows, CL.FASTEST, _src)
    assert (pk.row.devices, pk.row.strategy, pk.runner_up.strategy) == (4, "ddp", "fsdp")
    iv = pk.claim.interval
    assert pk.claim.value == pytest.approx(1.2)
    assert (iv.lo, iv.hi) == pytest.approx((280 / 260, 320 / 240))
    assert pk.claim.verdict == "fastest that fits"
    assert [s.run for s in pk.claim.sources] == ["run-ddp", "run-fsdp"]


def test_a_row_whose_ranks_would_share_the_runs_cores_is_no_pick():
    """8 ranks of the run's threads on its host need more cores than it has: predicted from
    compute they cannot have, the row is shown but neither picked nor the runner-up."""
    rows = [_row("ddp", 2, 180, 170, 190), _row("ddp", 8, 900, 850, 950, crowded=True),
            _row("ddp", 1, 100, 95, 105)]
    pk = P.pick(rows, CL.FASTEST, _src)
    assert (pk.row.devices, pk.runner_up.devices) == (2, 1)
    assert [r.devices for r in P.candidates(rows)] == [2, 1]


def test_overlapping_intervals_are_not_resolved_and_one_run_decides_nothing():
    rows = [_row("ddp", 4, 300, 250, 350), _row("fsdp", 4, 290, 260, 320)]
    assert P.pick(rows, CL.FASTEST, _src).claim.verdict.startswith(CL.NOT_RESOLVED)
    rows = [_row("ddp", 4, 300, 280, 320, runs=1), _row("fsdp", 4, 200, 190, 210)]
    v = P.pick(rows, CL.FASTEST, _src).claim.verdict
    assert v.startswith(CL.ONE_REPEAT) and "leaning fastest that fits" in v


def test_cheapest_in_device_hours_per_sample():
    # 1 device at 100/s: 2.78 h per million samples; 2 at 180/s: 3.09 h
    rows = [_row("ddp", 1, 100, 95, 105), _row("ddp", 2, 180, 170, 190)]
    pk = P.pick(rows, CL.CHEAPEST, _src)
    assert pk.row.devices == 1 and pk.claim.value == pytest.approx(2 / 1.8)
    assert pk.claim.interval.lo == pytest.approx((95 / 1) / (190 / 2))
    assert P.pick(rows[:1], CL.CHEAPEST, _src).claim is None  # nothing to hold it against


def _gns_run(steps_to=158, reached=True, curve=None):
    return RunResult.from_dict({
        "kind": "run", "run_id": "g", "status": "ok", "started_at": "2026-11-28T09:00:00Z",
        "batch": {"per_device": 16, "global": 16, "world_size": 1},
        "gns": {"b_simple": 10.0, "b_simple_lo": 5.0, "b_simple_hi": 40.0, "method":
                "micro_batches", "series": [{"step": 0, "steps": 10, "b_simple": 50.0}]},
        "target": {"metric": "loss", "target": 2.6, "reached": reached,
                   "steps_to_target": steps_to if reached else None,
                   "curve": curve or []}})


def test_the_target_from_a_run_that_measured_the_noise_scale():
    tg = PI.target_from([_gns_run()], None)  # the run's own target
    assert (tg.steps, tg.batch_global, tg.text) == (158, 16, "loss <= 2.6")
    # B_noise at the run's end (50), its interval the window's relative one: 25 to 200
    assert (tg.b_crit, tg.b_crit_lo, tg.b_crit_hi) == (50.0, 25.0, 200.0)
    curve = [{"step": 40, "value": 3.4}, {"step": 80, "value": 2.95}]
    tg = PI.target_from([_gns_run(reached=False, curve=curve)], "loss=3.0")
    assert tg.steps == 80 and tg.text == "loss <= 3"
    # crossed between the evaluations at 40 and 80: every row's steps may be half
    assert tg.steps_lo == 40
    assert ("it was crossed between its evaluations at step 40 and 80, so every row's steps "
            "and time to it may be up to 50% lower: evaluate more often to narrow it "
            "(--eval-every 4: 20 evaluations up to step 80)"
            in tg.source)


def test_a_target_reached_at_the_first_evaluation_says_its_steps_are_an_upper_end():
    """Bug caught: gpt_tiny on the stdlib's text, evaluated first at the end of its epoch
    (5,469 steps), gave every row of the plan its time to loss <= 3 from 5,469 steps, though
    the run's training loss was 3.07 at step 60. A target the first evaluation reached was
    crossed anywhere from step 0; a bracket under 10% of the steps is not said."""
    tg = PI.target_from([_gns_run(reached=False, curve=[{"step": 5469, "value": 1.2}])],
                       "loss=3.0")
    assert (tg.steps, tg.steps_lo) == (5469, 0)
    assert "its first evaluation reached it: it was crossed in steps 0-5,469" in tg.source
    assert "up to 100% lower" in tg.source
    near = [{"step": 95, "value": 3.1}, {"step": 100, "value": 2.9}]
    tg = PI.target_from([_gns_run(reached=False, curve=near)], "loss=3.0")
    assert tg.steps_lo == 95 and "crossed" not in tg.source
    # a record without its curve: the bracket from the result's own field, unknown where
    # it has none (nothing said)
    tg = PI.target_from([_gns_run()], None)
    assert (tg.steps, tg.steps_lo) == (158, None) and "crossed" not in tg.source
    run = _gns_run()
    run.target.steps_to_target_lo = 100
    tg = PI.target_from([run], None)
    assert tg.steps_lo == 100 and "between its evaluations at step 100 and 158" in tg.source


def test_a_target_without_a_noise_scale_or_never_reached_is_one_line():
    with pytest.raises(ConfigError, match="--gns"):
        PI.target_from([], "loss=3.0")
    with pytest.raises(ConfigError, match="reached loss <= 2"):
        PI.target_from([_gns_run(reached=False)], "loss=2")
    with pytest.raises(ConfigError, match="METRIC=VALUE"):
        PI.target_from([_gns_run()], "loss")


# ---- the command on a hand-built record (no workers) --------------------------------------

def _record(tmp_path, batch=32, edit=None):
    """A one-rank run's record and steps in ``tmp_path/r``; ``edit(rec)`` changes the record
    before it is written."""
    folder = tmp_path / "r"
    folder.mkdir()
    steps = folder / "steps.csv"
    steps.write_text("step,step_time_s,data_s,h2d_s,forward_s,backward_s,optimizer_s,comm_s\n"
                     + "".join(f"{i},0.1,0,0,0.03,0.06,0.01,0\n" for i in range(6)))
    rec = {"kind": "run", "run_id": "r1", "status": "ok", "started_at": "2026-11-28T09:00:00Z",
           "config": {"model": {"name": "mlp"}, "dist": {"strategy": "single", "nproc": 1}},
           "batch": {"per_device": batch, "global": batch, "world_size": 1},
           "env": {"mem_total_bytes": 64 << 30, "gpus": [], "threads": 1},
           "metrics": {"memory_facts": facts().to_dict(), "param_count": 1_000_000,
                       "step_time_s": {"median": 0.1}},
           "paths": {"steps_csv": str(steps)}}
    if edit is not None:
        edit(rec)
    (folder / "result.json").write_text(json.dumps(rec))
    return str(folder)


def test_plan_json_gives_every_row_and_the_picks(tmp_path, capsys):
    run = _record(tmp_path)
    # ddp: 20 MB of state and buckets + 85,200 B at batch 32, + 120,400 at 64
    assert main(["plan", "--from", run, "--device-memory", "20100000", "--nproc", "1,2",
                 "--strategy", "ddp", "--batch-size", "32,64", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {(r["strategy"], r["devices"], r["batch_per_device"]): r for r in out["rows"]}
    assert len(rows) == 4
    d = rows[("ddp", 2, 64)]
    assert d["predicted_peak_bytes"] == 20_120_400 and d["headroom_bytes"] == -20_400
    assert not d["fits"] and d["step_s"] is None
    one = rows[("ddp", 1, 32)]
    two = rows[("ddp", 2, 32)]
    assert one["efficiency"] == {"value": 1.0, "lo": None, "hi": None, "of": "itself"}
    assert two["efficiency"]["value"] == pytest.approx(
        two["samples_per_s"]["value"] / (2 * one["samples_per_s"]["value"]))
    assert two["efficiency"]["verdict"] == "inconclusive (1 repeat)"
    # a run without DDP: its bucket copies and division added, 3 passes over 4 MB of
    # gradients at the assumed 2 GB/s: 6 ms
    assert one["fits"] and one["step_s"]["value"] == pytest.approx(0.106)
    assert one["samples_per_s"]["value"] == pytest.approx(32 / 0.106)
    assert not rows[("ddp", 1, 64)]["fits"] and rows[("ddp", 2, 32)]["fits"]
    fast = out["picks"]["fastest"]
    assert fast["row"] == {"strategy": "ddp", "devices": 2, "batch_per_device": 32}
    assert fast["claim"]["kind"] == "plan pick"
    assert fast["claim"]["repeats"] == [1, 1] and "inconclusive (1 repeat)" in fast["claim"]["verdict"]
    assert out["picks"]["cheapest"]["row"] == {"strategy": "ddp", "devices": 1,
                                               "batch_per_device": 32}
    assert out["from"]["memory_caveat"] is None  # from a single run: like for like


def test_a_row_whose_peak_interval_holds_the_device_is_inconclusive_never_a_pick(
        tmp_path, capsys):
    """Bug caught: plan decided "fits" on the point estimate, predict --memory on the
    interval: a row whose point was under the device but whose interval held it was listed
    under "what fits" and picked as the fastest, and the largest batch was the point
    estimate's, where predict --memory said it was inconclusive. The activations' slope grew
    250 B per sample across the probes: DDP on 2 at batch 96 peaks at 20,155,600 B [20,147,600,
    20,194,556] in 20,170,000 B; at 128 the whole interval is over it."""
    run = _record(tmp_path, edit=lambda rec: rec["metrics"]["memory_facts"].update(
        fwd_bwd_peak_bytes=[4_082_000, 4_066_000, 4_060_000]))
    args = ["plan", "--from", run, "--device-memory", "20170000", "--nproc", "1,2",
            "--strategy", "ddp", "--batch-size", "32,64,96,128"]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {(r["devices"], r["batch_per_device"]): r for r in out["rows"]}
    torn = rows[(2, 96)]
    assert torn["predicted_peak_bytes"] == 20_155_600 < 20_170_000
    assert (torn["predicted_peak_low_bytes"], torn["predicted_peak_high_bytes"]) == (
        20_147_600, 20_194_556)
    # as predict --memory gives it: null, inconclusive; its step predicted all the same
    assert torn["fits"] is None and torn["fit_verdict"] == CL.INCONCLUSIVE
    assert torn["fit"]["rule"] == CL.RULE_INCLUDES_REF
    assert torn["headroom_at_top_bytes"] == 20_170_000 - 20_194_556
    assert torn["step_s"]["value"] is not None
    assert rows[(2, 64)]["fits"] is True and rows[(2, 128)]["fits"] is False
    assert rows[(2, 128)]["step_s"] is None
    # never picked, nor held against the pick
    for pk in out["picks"].values():
        assert pk["row"]["batch_per_device"] != 96
        assert (pk["runner_up"] or {}).get("batch_per_device") != 96
    assert out["picks"]["fastest"]["row"] == {"strategy": "ddp", "devices": 2,
                                              "batch_per_device": 64}
    # the largest batch as predict --memory says it: fits up to 81, inconclusive to 116
    # (the point estimate's 109 is neither)
    big = {x["devices"]: x for x in out["largest_batch"]}[2]
    assert (big["largest_batch_per_device"], big["largest_batch_per_device_low_end"],
            big["largest_batch_per_device_point"]) == (81, 116, 109)
    assert main(["predict", "--from", run, "--memory", "--nproc", "2", "--strategy", "ddp",
                 "--device-memory", "20170000", "--json"]) == 0
    (mem,) = json.loads(capsys.readouterr().out)["largest_batch"]
    assert (mem["largest_batch_per_rank"], mem["largest_batch_per_rank_low_end"]) == (
        81, 116)
    assert main(args) == 0
    said = " ".join(capsys.readouterr().out.split())
    fits_table = said[said.index("what fits"):said.index("peak memory per device")]
    assert not re.search(r"ddp\s+2\*?\s+96", fits_table)
    assert ("inconclusive whether it fits, the device's memory inside the peak's interval, so "
            "left out of the picks") in said
    assert re.search(r"ddp 2 x 96 \(19\.2 MiB \[19\.2 MiB, 19\.3 MiB\] of 19\.2 MiB, "
                     r"2\d\.\d KiB more at its top, ", said), said
    assert "does not fit, the peak's whole interval over the device" in said
    assert ("largest batch per device that fits, by devices: ddp 1: 81 (82 to 116: "
            "inconclusive), 2: 81 (82 to 116: inconclusive)") in said
    assert main(["predict", "--from", run, "--memory", "--nproc", "2", "--strategy", "ddp",
                 "--device-memory", "20170000"]) == 0
    assert ("largest batch per rank that fits: 81 (82 to 116: inconclusive)"
            in " ".join(capsys.readouterr().out.split()))


def test_a_plan_on_the_cpu_leaves_out_rows_whose_ranks_would_share_the_runs_cores(
        tmp_path, capsys):
    """A one-rank CPU run of 2 threads on a 2-core host: 2 processes there would need 4
    cores. The row is predicted and shown, said to be left out, and not picked."""
    run = _record(tmp_path, edit=lambda rec: rec["env"].update(threads=2, cores=2))
    args = ["plan", "--from", run, "--device-memory", "80GiB", "--nproc", "1,2",
            "--strategy", "ddp"]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {r["devices"]: r for r in out["rows"]}
    assert rows[2]["oversubscribed"] and not rows[1]["oversubscribed"]
    assert rows[2]["step_s"]["value"] is not None
    assert any("threads_per_rank=1" in n for n in rows[2]["notes"])
    assert out["picks"]["fastest"]["row"]["devices"] == 1
    assert main(args) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "! left out of the picks, their ranks on one host needing more cores" in said
    assert re.search(r"ddp\s+2 !\s+32", said)
    assert "ddp 2 x 32" in said
    assert "the only configuration that fits and is predicted from compute its ranks" in said


def test_a_plan_from_a_one_rank_fsdp_run_says_its_memory_is_high(tmp_path, capsys):
    def fsdp(rec):
        rec["config"]["dist"]["strategy"] = rec["metrics"]["memory_facts"]["strategy"] = "fsdp"

    run = _record(tmp_path, edit=fsdp)
    args = ["plan", "--from", run, "--device-memory", "80GiB", "--nproc", "1,2"]
    assert main([*args, "--json"]) == 0
    said = json.loads(capsys.readouterr().out)["from"]["memory_caveat"]
    assert "one-rank fsdp run" in said and "single or ddp" in said
    assert main(args) == 0
    assert "memory caveat: predicted from a one-rank fsdp run" in capsys.readouterr().out


@pytest.mark.parametrize("flags, words", [
    (["--nproc", "0"], "--nproc must be at least 1"),
    (["--device-memory", "80XB"], "cannot read size '80XB'"),
    (["--batch-size", "0"], "--batch-size must be at least 1"),
    (["--strategy", "ps"], "no plan for 'ps'"),
    (["--link", "bogus"], "unknown link 'bogus'"),
    (["--target", "loss=3"], "--gns"),
    (["--nproc", "9", "--link", "1gbit,rank12=100mbit"], "names rank 12"),
])
def test_each_bad_flag_is_one_line_exit_2(tmp_path, capsys, flags, words):
    run = _record(tmp_path)
    assert main(["plan", "--from", run, *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1


def test_no_run_is_one_line_exit_2(tmp_path, capsys):
    assert main(["plan", "--from", str(tmp_path / "none")]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    (tmp_path / "e").mkdir()
    assert main(["plan", "--from", str(tmp_path / "e")]) == 2


def _verify_plan(tmp_path, strategies, source_strategy=None):
    """(the source run's record, the parsed `plan --verify` flags, the plan) for the
    ``--strategy`` list given, from a hand-built one-rank run (of ``source_strategy``)."""
    import argparse

    from scaleprobe.commands import plan as plan_cmd

    run = _record(tmp_path)
    rec = json.loads((tmp_path / "r" / "result.json").read_text())
    if source_strategy:
        rec["config"]["dist"]["strategy"] = source_strategy
        (tmp_path / "r" / "result.json").write_text(json.dumps(rec))
    ap = argparse.ArgumentParser()
    plan_cmd.add_arguments(ap)
    args = ap.parse_args(["--from", run, "--device-memory", "8GiB", "--nproc", "1,2",
                          "--strategy", strategies, "--verify-steps", "5"])
    return rec, args, plan_cmd.make_plan(args)


# the state bytes a rank of the hand-built run holds (test_memmodel.facts: 1M fp32, AdamW)
STATE = {"params_bytes": 4_000_000, "grads_bytes": 4_000_000, "optimizer_bytes": 8_000_000}


def test_verify_makes_one_rank_runs_side_by_side_before_a_row(tmp_path, monkeypatch):
    """A 2-rank row on the CPU is predicted from two one-rank runs made at once (sharing the
    cores as its two ranks will), pooled; a one-device row of the basis's strategy is its
    own one-rank run. The runs are faked: their records are the source run's, renamed."""
    from scaleprobe.commands import plan_show as P_show
    from scaleprobe.commands import plan_verify as V

    rec, args, got = _verify_plan(tmp_path, "ddp", source_strategy="ddp")
    calls = []

    def runner(cfgs):
        calls.append([str(c.name) for c in cfgs])
        return [RunResult.from_dict({**rec, "run_id": f"{c.name}-{len(calls)}",
                                     "metrics": {**rec["metrics"], "step_time_s":
                                                 {"median": 0.12, "rel_ci": 0.05},
                                                 "steps_timed": 20,
                                                 "cpu_util_pct": 9.0 + len(calls),
                                                 "state_bytes": STATE}})
                for c in cfgs]

    monkeypatch.setattr(V.os, "cpu_count", lambda: 8)
    by = {r.devices: r for r in got["rows"]}
    two = V._one(got, by[2], args, runner)
    assert calls == [["plan-ddp-1x32-1of2", "plan-ddp-1x32-2of2"], ["plan-ddp-2x32"]]
    assert two["one_rank_side_by_side"] == 2 and len(two["one_rank_run_ids"]) == 2
    assert two["ratio"] == pytest.approx(two["predicted_here"]["value"] / 0.12)
    # within +-10% or not is a claim on the ratio's interval (the measured median's +-5%)
    goal = two["goal"]
    assert goal["kind"] == "prediction check" and goal["value"] == pytest.approx(two["ratio"])
    lo, hi = two["predicted_here"]["interval"]
    assert (goal["interval"]["lo"], goal["interval"]["hi"]) == pytest.approx(
        (lo / 0.126, hi / 0.114))
    assert two["within_goal"] == (goal["rule"] == CL.RULE_INSIDE_BAND if goal["decided"]
                                  else None)
    # the row's run got 11% of the machine, its two one-rank runs 10% each: 20% together
    assert two["cpu_share_pct"] == {"row": 11.0, "one_rank_runs": 20.0}
    # the row's measured peak per rank beside the plan's prediction of it (the faked row's
    # record is the plan's own run, so the two agree)
    assert set(two["memory"]) == set(V.MEMORY_KEYS)
    assert two["memory"]["memory_ratio"] == pytest.approx(1.0), two["memory"]
    assert two["memory"]["measured_peak_bytes"] == two["memory"]["predicted_peak_bytes"]
    text = P_show._memory_text(two["memory"], lambda b: f"{b} B")
    assert text.startswith("peak memory per rank: measured ") and "predicted / measured 1.00" \
        in text
    assert P_show._memory_text({"memory_reason": "the run recorded no memory facts"},
                               str) == "peak memory per rank: the run recorded no memory facts"
    assert "CPU: the row's processes 11% of the machine, its one-rank runs 20% together" in \
        P_show._share(two["cpu_share_pct"])
    # a timed window of fewer than 3 monitor samples (5 steps of 0.12 s at 0.5 s a sample)
    # is too short to read: no share, rather than "7% of the machine" for two busy ranks
    short = RunResult.from_dict({**rec, "metrics": {**rec["metrics"], "steps_timed": 5,
                                                    "step_time_s": {"median": 0.12}}})
    assert V.cpu_share([short, short], short) is None and P_show._share(None) == ""
    calls.clear()
    one = V._one(got, by[1], args, runner)
    assert calls == [["plan-ddp-1x32"]] and one["one_rank_side_by_side"] == 1


def test_a_row_this_host_cannot_run_says_how_to_plan_one_it_can(tmp_path, monkeypatch):
    """A user planned from a one-rank run with two threads on a 2-core host and was told
    only that 2 x 2 threads need 4 cores: the reason names the setting that verifies here."""
    from scaleprobe.commands import plan_verify as V

    _, _, got = _verify_plan(tmp_path, "ddp", source_strategy="ddp")
    two = next(r for r in got["rows"] if r.devices == 2)
    like = SimpleNamespace(env={"threads": 2, "cuda_available": False})
    monkeypatch.setattr(V.os, "cpu_count", lambda: 2)
    assert V._cannot(two, like) == ("2 processes x 2 thread(s), as the run it is planned from "
                                    "had, need 4 cores; this host has 2 (plan from one-rank "
                                    "runs with --set dist.threads_per_rank=1 to verify it here)")
    monkeypatch.setattr(V.os, "cpu_count", lambda: 1)
    assert V._cannot(two, like).endswith("this host has 1")
    monkeypatch.setattr(V.os, "cpu_count", lambda: 4)
    assert V._cannot(two, like) is None


def test_runs_made_at_once_share_one_session_as_ranks_of_one_job(tmp_path, monkeypatch):
    """With autogroup scheduling the CPU is shared between sessions: the one-rank runs made
    side by side share one (as a job's ranks do), a run alone has its own. Side by side they
    are told each other's pids (companions: not each other's outside load) and start their
    timed windows at one gate, opened once both said they are ready; alone, neither."""
    from types import SimpleNamespace

    from scaleprobe.commands import plan_verify as V
    from scaleprobe.config.runconfig import build
    from scaleprobe.measure.outside import COMPANIONS_ENV

    started, gates = [], []

    class Procs:
        def start(self, payload, work_dir, label, env=None, own_session=True):
            started.append((label, own_session, env))
            gates.append(payload.barrier)
            if payload.barrier:  # the run reaches its first timed step
                Path(payload.barrier["ready"]).touch()
            return SimpleNamespace(pid=1000 + len(started), label=label, poll=lambda: None)

        def wait(self, proc):
            return 0

    from scaleprobe.core.result_model import RunResult

    monkeypatch.setattr(V, "collect_record", lambda proc, rc: RunResult.from_dict({
        "kind": "run", "run_id": proc.label, "status": "ok"}))
    run = V.point_runner(Procs(), "x")
    cfgs = [build({"name": n, "out": str(tmp_path)}) for n in ("a", "b")]
    assert [r.run_id for r in run(cfgs)] == ["a", "b"]
    run(cfgs[:1])
    assert [(n, o) for n, o, _ in started] == [("a", False), ("b", False), ("a", True)]
    (ea, eb, alone) = (e for _, _, e in started)
    assert ea == eb and alone is None
    assert Path(ea[COMPANIONS_ENV]).read_text().split() == ["1001", "1002"]
    (ga, gb, g_alone) = gates
    assert g_alone is None and ga["go"] == gb["go"] and ga["ready"] != gb["ready"]
    assert Path(ga["go"]).exists()


def test_verify_predicts_each_row_from_launched_one_rank_runs_of_its_own_strategy(
        tmp_path, monkeypatch):
    """From a `single` source run, the one-rank runs made before a DDP row are DDP runs of one
    launched process, and before an FSDP row FSDP runs: a launched rank's own costs (its
    collective on a world of one, the hooks, the copies) are in the basis, not left out as
    in a single-process run (gpt_tiny's DDP on one rank took 12% longer than `single`).
    The plan says its own step was drawn from `single`."""
    from scaleprobe.commands import plan_verify as V

    rec, args, got = _verify_plan(tmp_path, "ddp,fsdp")
    calls = []

    def runner(cfgs):
        calls.append([(str(c.name), c.dist.strategy, c.dist.nproc) for c in cfgs])
        return [RunResult.from_dict({**rec, "run_id": f"{c.name}", "config": {
            **rec["config"], "dist": {"strategy": c.dist.strategy, "nproc": c.dist.nproc}},
            "metrics": {**rec["metrics"], "step_time_s": {"median": 0.12}}}) for c in cfgs]

    monkeypatch.setattr(V.os, "cpu_count", lambda: 8)
    by = {(r.strategy, r.devices): r for r in got["rows"]}
    for strategy in ("ddp", "fsdp"):
        calls.clear()
        got_row = V._one(got, by[(strategy, 2)], args, runner)
        assert calls[0] == [(f"plan-{strategy}-1x32-{i}of2", strategy, 1) for i in (1, 2)]
        assert got_row["one_rank_strategy"] == strategy
        assert got_row["plan_basis_strategy"] == "single"
    notes = by[("ddp", 2)].prediction.notes
    assert any("drawn from one-rank runs of single (one process, not launched)" in n
               for n in notes)
    calls.clear()
    one = V._one(got, by[("ddp", 1)], args, runner)  # one device: its own one-rank run
    assert calls == [[("plan-ddp-1x32", "ddp", 1)]] and one["measured_s"] == 0.12


def test_a_short_predicted_step_is_verified_over_a_longer_window():
    """20 steps of 15 ms (0.3 s) measured gpt_tiny's 2-rank step 16-24 ms in three tries:
    without --verify-steps a row gets enough steps for 2 s at its predicted step, at least
    20 and at most 500; --verify-steps is taken as given."""
    from types import SimpleNamespace

    from scaleprobe.commands.plan_verify import steps_for

    def row(step_s):
        fig = SimpleNamespace(value=step_s)
        return SimpleNamespace(prediction=SimpleNamespace(step_s=fig))

    assert steps_for(row(0.015), None, 20) == 134
    assert steps_for(row(0.2), None, 20) == 20
    assert steps_for(row(1e-4), None, 20) == 500
    assert steps_for(row(0.015), 7, 20) == 7
    assert steps_for(SimpleNamespace(prediction=None), None, 20) == 20


def test_the_verified_pair_compares_what_the_pick_was_chosen_by(monkeypatch):
    """A pick chosen by time to the target is held against its runner-up on 1 / time to the
    target: each measured step x its predicted steps to the target (2 x 16 at 20 ms and 96
    steps: 1.92 s; 1 x 16 at 12 ms and 158 steps: 1.90 s, so 0.99x), not on samples/s (32 /
    20 ms over 16 / 12 ms: 1.2x). Without step counts, samples/s."""
    from types import SimpleNamespace

    from scaleprobe.commands import plan_verify as V
    from scaleprobe.predict.stepmodel import Figure

    monkeypatch.setattr(V, "source", lambda rec: None)
    seen = {}

    def plan_pick(kind, pick, runner, ratio, iv, repeats, sources, what, where):
        seen.update(ratio=ratio, iv=iv, what=what)
    monkeypatch.setattr(V.CK, "plan_pick", plan_pick)

    def row(label, steps):
        return SimpleNamespace(label=lambda: label, steps_to_target=steps)
    done = [{"global_batch": 32, "measured_s": 0.020, "measured_interval_s": (0.019, 0.021),
             "record": None},
            {"global_batch": 16, "measured_s": 0.012, "measured_interval_s": (0.0115, 0.0125),
             "record": None}]
    pk = SimpleNamespace(row=row("a", Figure(96, 90, 100)), runner_up=row("b", Figure(158)))
    V._pair(pk, done)
    assert seen["ratio"] == pytest.approx(158 * 0.012 / (96 * 0.020))
    assert seen["iv"].lo == pytest.approx(158 * 0.0115 / (100 * 0.021))
    assert seen["iv"].hi == pytest.approx(158 * 0.0125 / (90 * 0.019))
    assert seen["what"].startswith("1 / time to the target")
    pk = SimpleNamespace(row=row("a", None), runner_up=row("b", None))
    V._pair(pk, done)
    assert seen["ratio"] == pytest.approx((32 / 0.020) / (16 / 0.012))
    assert seen["what"] == "measured samples/s (median step)"


def test_verify_says_within_10_percent_only_when_the_ratios_interval_is_inside(capsys):
    """Bug caught: --verify said "within +-10%" or "outside" from the point ratio alone, on
    one run, with the measured step's interval and the prediction's at hand. Now a claim on
    predicted / measured, its interval the prediction's low end over the measured median's
    high end and back: within where it lies inside 0.9-1.1, outside where wholly outside,
    else inconclusive with the interval shown."""
    from scaleprobe.commands import plan_verify as V
    from scaleprobe.commands.plan_show import print_verified

    def here(v, lo, hi):
        return SimpleNamespace(prediction=SimpleNamespace(step_s=M.Figure(v, lo, hi)))

    # 100 ms [98, 102] against 100 ms [99, 101]: 1.00x [0.970, 1.030]
    c = V.goal_claim(here(0.100, 0.098, 0.102), 0.100, (0.099, 0.101), 20)
    assert c.rule == CL.RULE_INSIDE_BAND and c.verdict == "within +/-10%"
    assert (c.interval.lo, c.interval.hi) == pytest.approx((0.098 / 0.101, 0.102 / 0.099))
    # the point says 1.02, "within" before; the prediction's interval crosses 1.1
    c = V.goal_claim(here(0.102, 0.085, 0.125), 0.100, (0.097, 0.103), 20)
    assert c.value == pytest.approx(1.02)
    assert c.rule == CL.RULE_CROSSES_BAND and c.verdict.startswith(CL.INCONCLUSIVE)
    assert c.short_verdict == CL.INCONCLUSIVE and "[0.83, 1.29]" in c.text()
    # 1.43x [1.38, 1.48]: outside
    c = V.goal_claim(here(0.100, 0.098, 0.102), 0.070, (0.069, 0.071), 20)
    assert c.rule == CL.RULE_OUTSIDE_BAND and c.verdict == "outside +/-10%"
    # no measured interval: not judged; a prediction without one: its value at both ends
    assert V.goal_claim(here(0.1, 0.09, 0.11), 0.1, None, 20).rule == CL.RULE_NO_INTERVAL
    c = V.goal_claim(here(0.1, None, None), 0.1, (0.095, 0.105), 20)
    assert (c.interval.lo, c.interval.hi) == pytest.approx((0.1 / 0.105, 0.1 / 0.095))
    # the verified line says the claim's words, its interval and what stands behind it
    torn = V.goal_claim(here(0.102, 0.085, 0.125), 0.100, (0.097, 0.103), 20)
    print_verified([{"label": "ddp 2x16", "strategy": "ddp", "devices": 2,
                     "batch_per_device": 16, "measured_s": 0.1,
                     "measured_interval_s": (0.097, 0.103), "ratio": 1.02, "ratio_plan": 1.05,
                     "goal": torn.to_dict(), "within_goal": None,
                     "predicted_plan": {"value": 0.105, "interval": (0.09, 0.12)},
                     "predicted_here": {"value": 0.102, "interval": (0.085, 0.125)}}])
    said = " ".join(capsys.readouterr().out.split())
    assert ("ddp 2x16: predicted from the one-rank runs just before / measured: 1.02x "
            "[0.83, 1.29], one run measured, its 20 timed steps, against the prediction's "
            "interval: inconclusive (the interval crosses 0.90x..1.10x); the plan's "
            "prediction / measured 1.05") in said, said
    assert "within +-10%" not in said and "outside +-10%" not in said


def test_a_batch_over_the_runs_data_per_device_is_said_and_never_picked(tmp_path, capsys):
    """Bug: from a digits run (1,438 training samples) plan and predict --memory said batch
    117,156 per device fits in 80 GiB, and picked rows whose ranks hold fewer samples than
    one batch: such a run stops before its first step (train/parts.no_full_batch). 100
    samples: 50 per rank on 2 devices, so batch 64 fits there but has no step; on 1 device
    100 holds it."""
    run = _record(tmp_path, edit=lambda rec: rec["metrics"].update(train_samples=100))
    args = ["plan", "--from", run, "--device-memory", "80GiB", "--nproc", "1,2",
            "--strategy", "ddp", "--batch-size", "32,64"]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {(r["devices"], r["batch_per_device"]): r for r in out["rows"]}
    assert rows[(2, 64)]["over_data"] and rows[(2, 64)]["data_samples_per_device"] == 50
    assert rows[(2, 64)]["fits"] and rows[(2, 64)]["step_s"]["value"] is not None
    assert not rows[(1, 64)]["over_data"] and not rows[(2, 32)]["over_data"]
    for pk in out["picks"].values():
        assert (pk["row"]["devices"], pk["row"]["batch_per_device"]) != (2, 64)
        assert pk["runner_up"] is None or (pk["runner_up"]["devices"],
                                           pk["runner_up"]["batch_per_device"]) != (2, 64)
    big = {x["devices"]: x for x in out["largest_batch"]}
    assert (big[1]["data_samples_per_device"], big[2]["data_samples_per_device"]) == (100, 50)
    assert main(args) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert re.search(r"ddp\s+2\s+64\*?#", said), said
    assert ("# left out of the picks, more samples per device than the runs' data holds for "
            "each") in said and "ddp 2 x 64 (50)" in said
    assert re.search(r"by devices: ddp 1: [\d,]+ \(the data: 100\), 2: [\d,]+ \(the data: "
                     r"50\)", said), said
    # predict --memory: the same share, per point and beside the largest batch
    assert main(["predict", "--from", run, "--memory", "--nproc", "1,2", "--strategy", "ddp",
                 "--batch-size", "64", "--device-memory", "80GiB", "--json"]) == 0
    mem = json.loads(capsys.readouterr().out)
    assert [(p["nproc"], p["data_samples_per_rank"], p["over_data"]) for p in mem["points"]] \
        == [(1, 100, False), (2, 50, True)]
    assert main(["predict", "--from", run, "--memory", "--nproc", "2", "--strategy", "ddp",
                 "--batch-size", "64", "--device-memory", "80GiB"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "no full step in an epoch on that data" in said and "ddp 2 x 64 (50)" in said
    assert "more than the 50 samples per rank the run's data holds" in said


def test_a_run_that_did_not_record_its_data_size_is_not_judged_on_it(tmp_path, capsys):
    run = _record(tmp_path)  # no metrics.train_samples: an older record
    assert main(["plan", "--from", run, "--device-memory", "80GiB", "--nproc", "1,2",
                 "--strategy", "ddp", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert all(r["data_samples_per_device"] is None and not r["over_data"]
               for r in out["rows"])
