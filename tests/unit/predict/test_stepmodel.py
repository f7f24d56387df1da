"""The step model from one run's record (predict/sample.py, predict/stepmodel.py, predict/whatif.py):
what it reads from a run, and predictions checked against hand computations."""

import json
import math
from dataclasses import replace

import pytest

from scaleprobe.core.errors import ConfigError
from scaleprobe.core.result_model import RunResult
from scaleprobe.features.links import Link
from scaleprobe.predict import sample as S
from scaleprobe.predict import stepmodel as M
from scaleprobe.predict import whatif as W

MS = 1e-3
MB = 1e6


def one_rank_run(tmp_path, rows, buckets=None, strategy="ddp", params=750_000, threads=1,
                 started="2026-11-26T08:00:00+00:00", name="r", model="m", memory=None):
    """A one-rank run's record and its steps.csv: rows of (forward, backward, optimizer)."""
    folder = tmp_path / name
    folder.mkdir()
    csv = folder / "steps.csv"
    lines = ["step,step_time_s,data_s,h2d_s,forward_s,backward_s,optimizer_s,comm_s"]
    lines += [f"{i},{f + b + o},0,0,{f},{b},{o},0" for i, (f, b, o) in enumerate(rows)]
    csv.write_text("\n".join(lines) + "\n")
    f, b, o = rows[0]
    rec = {"kind": "run", "run_id": name, "name": name, "status": "ok", "started_at": started,
           "config": {"model": {"name": model}, "dist": {"strategy": strategy, "nproc": 1,
                                                         "nnodes": 1}},
           "env": {"threads": threads, "cpu_model": "cpu"}, "batch": {"per_device": 32,
                                                                      "world_size": 1},
           "metrics": {"param_count": params, "step_time_s": {"median": f + b + o},
                       "breakdown_s": {"forward": f, "backward": b, "optimizer": o},
                       **({"memory_pass": memory} if memory else {})},
           "comm": {"buckets": buckets} if buckets else None,
           "paths": {"steps_csv": str(csv)}}
    return RunResult.from_dict(rec)


THIRDS = [{"bytes": 1_000_000, "ready_s": 0.01, "allreduce_s": 0.0, "steps": 8,
           "ready_fraction": f} for f in (1 / 3, 2 / 3, 1.0)]
# 1 MB all-reduced over 2 ranks = 1 MB per direction: 20 ms at 50 MB/s (0.4 Gbit/s)
SLOW = Link("slow", 0.4, 0.0, "given")


def test_the_run_is_read_through_its_record_and_steps(tmp_path):
    rec = one_rank_run(tmp_path, [(0.01, 0.03, 0.005)] * 3 + [(0.02, 0.06, 0.01)], THIRDS)
    s = S.from_run(rec)
    assert len(s.rows) == 4 and s.rows[3].backward == pytest.approx(0.06)
    assert [b.ready_fraction for b in s.buckets] == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert s.grad_bytes == 3_000_000 and s.threads == 1 and s.world == 1
    assert s.pass_s_per_byte is None  # buckets under 4 MiB: the hook's fixed cost would pass
    big = [dict(b, bytes=8 << 20, allreduce_s=0.004) for b in THIRDS]
    assert S.from_run(one_rank_run(tmp_path, [(0.01, 0.03, 0.005)], big, name="b")
                      ).pass_s_per_byte == pytest.approx(0.004 / (8 << 20))
    (tmp_path / "r" / "steps.csv").unlink()  # moved away: the breakdown's medians, one row
    s = S.from_run(rec)
    assert len(s.rows) == 1 and "no interval" in s.rows_source


def test_ddp_prediction_is_the_hand_computed_timeline(tmp_path):
    """Every step forward 10, backward 30, optimizer 5, three 1 MB buckets at thirds of
    backward; 20 ms per all-reduce (test_timeline: 85 ms a step). Speedup over the 45 ms
    one-rank step: 2 x 45 / 85 = 1.059, efficiency 53%. No spread in the steps and a given
    link: the interval is the model's own error alone, 5% below and 10% above on the log
    scale (the speedup's the other way round)."""
    s = S.from_run(one_rank_run(tmp_path, [(0.01, 0.03, 0.005)] * 8, THIRDS))
    p = M.predict(s, M.Scenario("ddp", 1, 2, SLOW))
    assert p.step_s.value == pytest.approx(85 * MS)
    assert p.step_s.lo == pytest.approx(85 * MS * math.exp(-0.05))
    assert p.step_s.hi == pytest.approx(85 * MS * math.exp(0.10))
    assert p.speedup.value == pytest.approx(2 * 45 / 85)
    assert p.speedup.lo == pytest.approx(2 * 45 / 85 * math.exp(-0.10))
    assert p.speedup.hi == pytest.approx(2 * 45 / 85 * math.exp(0.05))
    one = M.predict(s, M.Scenario("ddp", 1, 1, SLOW))  # the run itself: no model between
    assert one.step_s.lo == pytest.approx(45 * MS) == one.step_s.hi
    assert p.efficiency.value == pytest.approx(45 / 85)
    assert p.phases["comm"] == pytest.approx(40 * MS) and p.one_rank_step_s == pytest.approx(
        45 * MS)
    assert p.comm_busy_s == pytest.approx(60 * MS)  # three all-reduces, compute taken away


def test_a_measured_links_spread_widens_the_interval(tmp_path):
    """The fit's spread 10%: costs 18 ms (low end) and 22 ms (high end) per all-reduce.
    18: 20-38, 38-56, 56-74, wait 34, step 79. 22: 20-42, 42-64, 64-86, wait 46, step 91.
    The model's own error is added to each end in quadrature on the log scale."""
    s = S.from_run(one_rank_run(tmp_path, [(0.01, 0.03, 0.005)] * 8, THIRDS))
    p = M.predict(s, M.Scenario("ddp", 1, 2, Link("m", 0.4, 0.0, "measured", spread=0.1)))
    down, up = math.log(85 / 79), math.log(91 / 85)
    assert p.step_s.lo == pytest.approx(85 * MS * math.exp(-math.hypot(down, 0.05)))
    assert p.step_s.hi == pytest.approx(85 * MS * math.exp(math.hypot(up, 0.10)))
    sp = 2 * 45 / 85
    assert p.speedup.lo == pytest.approx(sp * math.exp(-math.hypot(math.log(91 / 85), 0.10)))
    assert p.speedup.hi == pytest.approx(sp * math.exp(math.hypot(math.log(85 / 79), 0.05)))


def test_ranks_that_need_more_cores_than_the_runs_host_are_flagged(tmp_path):
    """A CPU run of 2 threads on a 2-core host: 2 processes on that host would need 4 cores,
    so the prediction says its compute is not theirs and names the like-for-like basis (1
    thread each); 1 process on each of 2 hosts has its cores; 8 processes on 2 cores have
    no like-for-like run; a GPU run's ranks each have their device."""
    s = S.from_run(one_rank_run(tmp_path, [(0.01, 0.03, 0.005)] * 8, THIRDS))
    s = replace(s, threads=2, cores=2, on_cpu=True)
    two = M.predict(s, M.Scenario("ddp", 2, 1, SLOW))
    assert two.oversubscribed
    note = next(n for n in two.notes if "processes x" in n)
    assert note.startswith("2 processes x 2 thread(s) on a host of 2 cores")
    assert "--set dist.threads_per_rank=1" in note
    s = replace(s, notes=[])
    assert not M.predict(s, M.Scenario("ddp", 1, 2, SLOW)).oversubscribed
    eight = M.oversubscribed(replace(s, threads=1), M.Scenario("ddp", 8, 1, SLOW))
    assert eight is not None and "more processes than cores" in eight
    assert M.oversubscribed(replace(s, on_cpu=False), M.Scenario("ddp", 8, 1, SLOW)) is None
    assert M.oversubscribed(replace(s, cores=None), M.Scenario("ddp", 8, 1, SLOW)) is None


def test_one_training_rank_lays_out_every_step_once(tmp_path):
    """One process is the run itself: its mean step is the run's, not that of 200 draws from
    it (19 steps of 45 ms and one of 445: the mean 65 ms; the draws' mean wanders with how
    often they hit the long step), so its speedup is 1."""
    rows = [(0.01, 0.03, 0.005)] * 19 + [(0.01, 0.43, 0.005)]
    s = S.from_run(one_rank_run(tmp_path, rows, THIRDS))
    for seed in (0, 1, 2):
        p = M.predict(s, M.Scenario("ddp", 1, 1, SLOW), seed=seed)
        assert p.step_mean_s == pytest.approx(0.065) and p.speedup.value == pytest.approx(1.0)


def test_the_models_own_error_widens_each_end_and_one_process_is_the_run():
    """Each end's log distance and the model's error add in quadrature; an end on the wrong
    side of the value counts as none. One process predicts the run itself: no model error."""
    lo, hi = M.with_model_error(100.0, 90.0, 120.0, 0.05, 0.10)
    assert lo == pytest.approx(100 * math.exp(-math.hypot(math.log(100 / 90), 0.05)))
    assert hi == pytest.approx(100 * math.exp(math.hypot(math.log(1.2), 0.10)))
    assert 80 < lo < 90 and 120 < hi < 135
    lo, hi = M.with_model_error(100.0, 101.0, 99.0, 0.05, 0.10)  # both ends misplaced
    assert lo == pytest.approx(100 * math.exp(-0.05)) and hi == pytest.approx(
        100 * math.exp(0.10))
    assert M.with_model_error(0.0, 1.0, 2.0, 0.05, 0.1) == (1.0, 2.0)


def test_the_runs_own_spread_gives_an_interval_and_ranks_wait_for_the_slowest(tmp_path):
    """Half the steps take twice as long: with 2 ranks drawn independently, a step is slow
    whenever either rank's is (3 in 4), so the median step is the slow one: the prediction
    is not the median rank's compute plus communication."""
    rows = [(0.01, 0.03, 0.005)] * 10 + [(0.02, 0.06, 0.01)] * 10
    s = S.from_run(one_rank_run(tmp_path, rows, THIRDS))
    fast = Link("fast", 1000.0, 0.0, "given")
    p = M.predict(s, M.Scenario("ddp", 1, 2, fast))
    assert p.step_s.value == pytest.approx(90 * MS, rel=0.02)
    assert p.step_s.lo < p.step_s.value <= p.step_s.hi


def test_needed_link_by_hand(tmp_path):
    """90% efficiency on 2 ranks: the step may take 45 / 0.9 = 50 ms, so the last bucket's
    all-reduce may take 5 ms (nothing queues below 10 ms): 1 MB in 5 ms = 200 MB/s =
    1.6 Gbit/s."""
    s = S.from_run(one_rank_run(tmp_path, [(0.01, 0.03, 0.005)] * 8, THIRDS))
    got = M.needed_link_gbit_s(s, M.Scenario("ddp", 1, 2, SLOW), 0.9)
    assert got == pytest.approx(1.6, rel=0.03)


def test_the_link_needed_agrees_with_the_efficiency_printed_beside_it(tmp_path):
    """Bug: predict --link 1gbit printed ddp on 2 ranks at 85% efficiency and, beside it,
    "link for 90%: >= 1.00 Gbit/s": the search simulated 60 drawn steps without the buffers'
    broadcasts, the row 200 its own way, and a heavy-tailed run's waiting for the slower rank
    moved the mean between them. Now, at any bandwidth, the search's efficiency is the row's:
    a link at or over the one needed predicts 90% or more, and a row under 90% needs more
    than its own link."""
    rows = [(0.01, 0.03, 0.005)] * 6 + [(0.02, 0.08, 0.005), (0.01, 0.05, 0.005)]
    s = S.from_run(one_rank_run(tmp_path, rows, THIRDS))
    sc = M.Scenario("ddp", 1, 2, SLOW, buffers=(4096,))
    need = M.needed_link_gbit_s(s, sc, 0.8)
    assert need is not None and need > SLOW.bandwidth_gbit_s
    at = M.predict(s, replace(sc, link=Link("at", need, 0.0, "given")))
    under = M.predict(s, replace(sc, link=Link("under", need * 0.9, 0.0, "given")))
    assert at.efficiency.value >= 0.8 > under.efficiency.value
    assert M.predict(s, sc).efficiency.value < 0.8


def test_parameter_server_from_a_ddp_run_takes_ddps_cost_out(tmp_path):
    """A DDP run's backward holds its hooks and bucket copies; a worker without DDP does
    not: the model takes them out and says so. A run without buckets to time a memory pass
    with assumes 2 GB/s and says so."""
    s = S.from_run(one_rank_run(tmp_path, [(0.01, 0.03, 0.005)] * 8, THIRDS))
    p = M.predict(s, M.Scenario("ps", 1, 2, SLOW))
    assert any("taken out for a strategy without DDP" in n for n in p.notes)
    assert any("assumed 2 GB/s" in n for n in p.notes)
    assert p.trainers == 1 and p.efficiency.value < 0.5  # the server takes no batch
    single = S.from_run(one_rank_run(tmp_path, [(0.01, 0.03, 0.005)] * 8, strategy="single",
                                     name="s"))
    p = M.predict(single, M.Scenario("ddp", 1, 2, SLOW))
    assert any("one bucket of all" in n for n in p.notes)


def test_parameter_server_copies_priced_from_the_runs_memory_probe(tmp_path):
    """A single run (no DDP to take out), 10 M parameters = 40 MB (over the 32 MiB beyond
    which a buffer comes fresh each time), its probe: 1 ns/byte in place, 3 ns/byte into a
    fresh buffer (120 ms per 40 MB). 1 Gbit/s, no latency: 320 ms a message. Worker: compute
    40, flatten and append 240, push 320; server: clone 120, stack + mean + flatten + append
    480, update 5; pull 320; first touch and copy 120: 1645 ms."""
    s = S.from_run(one_rank_run(tmp_path, [(0.01, 0.03, 0.005)] * 8, strategy="single",
                                params=10_000_000, memory={"warm_s_per_byte": 1e-9,
                                                           "fresh_s_per_byte": 3e-9}))
    assert (s.pass_s_per_byte, s.fresh_s_per_byte) == (1e-9, 3e-9)
    p = M.predict(s, M.Scenario("ps", 1, 2, Link("g", 1.0, 0.0, "given")))
    assert p.step_s.value == pytest.approx(1645 * MS)
    assert not any("assumed" in n or "first-touch" in n for n in p.notes)


def test_what_if_plan_and_its_errors(tmp_path):
    s = S.from_run(one_rank_run(tmp_path, [(0.01, 0.03, 0.005)] * 8, THIRDS))
    rows = W.plan(s, W.Grid(["ddp", "ps"], [1], [2, 4], ["1gbit", "100gbit"]), with_needed=False)
    assert [(r.link_spec, r.nnodes, r.prediction.strategy) for r in rows][:2] == [
        ("1gbit", 2, "ddp"), ("1gbit", 2, "ps")]
    by = {(r.link_spec, r.nnodes, r.prediction.strategy): r.prediction for r in rows}
    # more devices, lower efficiency; a faster link, higher
    assert by[("1gbit", 4, "ddp")].efficiency.value < by[("1gbit", 2, "ddp")].efficiency.value
    assert by[("100gbit", 4, "ddp")].step_s.value < by[("1gbit", 4, "ddp")].step_s.value
    assert W.parse_counts("2,4,8", "--nproc") == [2, 4, 8]
    with pytest.raises(ConfigError, match="at least 1"):
        W.parse_counts("0,2", "--nproc")
    with pytest.raises(ConfigError, match="numbers separated by commas"):
        W.parse_counts("two", "--nproc")
    with pytest.raises(ConfigError, match="no step model for strategy 'dp'"):
        W.parse_strategies("ddp,dp")


def test_predict_from_a_run_on_the_command_line(tmp_path, capsys):
    from scaleprobe.cli import main

    rec = one_rank_run(tmp_path, [(0.01, 0.03, 0.005)] * 8, THIRDS)
    path = tmp_path / "r" / "result.json"
    path.write_text(json.dumps(rec.to_dict()))
    assert main(["predict", "--from", str(path), "--nproc", "2", "--link", "slow=0.4,0",
                 "--strategy", "ddp", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["step_s"]["value"] == pytest.approx(85 * MS)
    assert main(["predict", "--from", str(path), "--nproc", "2,4", "--link", "1gbit"]) == 0
    out = capsys.readouterr().out
    assert "ddp" in out and "localsgd" in out and "nominal 1 GbE" in out


@pytest.mark.parametrize("argv,msg", [
    (["predict", "--params", "1e6", "--nproc", "2,4"], "need --from RUN"),
    (["predict", "--params", "1e6", "--nproc", "2", "--strategy", "ddp"], "needs --from"),
    (["run", "--strategy", "ps", "--nproc", "3", "--link", "rank5=100mbit"], "ranks 0..2"),
    (["run", "--link", "rank0=100mbit"], "needs launched ranks"),
])
def test_step_model_options_without_a_run_are_one_line(argv, msg, capsys):
    from scaleprobe.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and len(err.splitlines()) == 1


def test_from_needs_a_one_rank_run(tmp_path, capsys):
    from scaleprobe.cli import main

    rec = one_rank_run(tmp_path, [(0.01, 0.03, 0.005)] * 2).to_dict()
    rec["batch"]["world_size"] = 2
    (tmp_path / "result.json").write_text(json.dumps(rec))
    assert main(["predict", "--from", str(tmp_path / "result.json"), "--nproc", "2"]) == 2
    assert "--from takes a run of one process" in capsys.readouterr().err


@pytest.mark.parametrize("scale,nnodes,loaded", [(1, "1", False), (400, "1,2", False),
                                                (1, "1", True)])  # steps of 45 ms, 18 s
def test_predict_table_keeps_one_unit_and_fits_80_columns(tmp_path, capsys, monkeypatch, scale,
                                                          nnodes, loaded):
    """Bug caught: "step 12.74 s ms", seconds under a heading of ms, and the table cut at 80
    columns ("speed…", "unreac…"). Each table's times share one unit, named in its headings.
    A run measured under load cut it again ("strate…", "unreachable, under lo…"): the cell
    is now "unreachable*", the star the load caveat's."""
    from scaleprobe.cli import main

    monkeypatch.setenv("COLUMNS", "80")
    rows = [(0.01 * scale, 0.03 * scale, 0.005 * scale), (0.012 * scale, 0.035 * scale,
                                                          0.005 * scale)] * 4
    rec = one_rank_run(tmp_path, rows, THIRDS).to_dict()
    if loaded:
        rec["load"] = {"flag": True, "reason": "other processes used 1.75 cores"}
    (tmp_path / "r" / "result.json").write_text(json.dumps(rec))
    assert main(["predict", "--from", str(tmp_path / "r"), "--nproc", "2", "--nnodes", nnodes,
                 "--link", "100mbit" if scale > 1 else "10gbit", "--strategy", "ddp,ps,localsgd"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80, out
    assert "…" not in out and " s ms" not in out, out
    assert ("unreachable*" in out and "  * measured under load" in out) is loaded, out
    unit = "s" if scale > 1 else "ms"
    assert f"step {unit}" in out and f"link busy {unit}" in out, out
    if unit == "s":
        assert " ms " not in out.split("where the step goes")[1].split("note:")[0], out


def test_a_link_with_cpu_per_byte_lengthens_an_overlapped_backward_and_says_so():
    """Two buckets, the first ready half-way through backward: its all-reduce runs inside
    backward, so a link whose fit measured the collective's CPU time makes the step longer,
    and the prediction names it; on a run with CUDA nothing is charged."""
    from dataclasses import replace as _r

    from scaleprobe.predict.timeline import Bucket, Compute

    rows = [Compute(forward=0.01, backward=0.04, optimizer=0.005)] * 6
    s = S.RunSample("r", "ddp", 1, 1, 8e6, rows, "synthetic",
                    [Bucket(4e6, 0.5, 0.0), Bucket(4e6, 1.0, 0.0)], 1e-10, None, 0.055, None)
    link = Link("l", 8.0, 0.0, "test")  # 1 GB/s: 4 ms a bucket
    sc = M.Scenario("ddp", 2, 1, link)
    plain = M.predict(_r(s, notes=[]), sc, replicates=2)
    charged = M.predict(_r(s, notes=[]), M.Scenario("ddp", 2, 1, _r(link, cpu_s_per_byte=1e-9)),
                        replicates=2)
    # the first bucket's 4 ms all-reduce lies inside backward: 4e6 B x 1 ns = 4 ms more
    assert charged.step_s.value == pytest.approx(plain.step_s.value + 0.004)
    assert any("CPU time (1.00 ns per byte" in n for n in charged.notes)
    gpu = M.predict(_r(s, notes=[], on_cpu=False),
                    M.Scenario("ddp", 2, 1, _r(link, cpu_s_per_byte=1e-9)), replicates=2)
    assert gpu.step_s.value == pytest.approx(plain.step_s.value)


def test_fsdp_prices_each_collective_from_its_own_fit_on_the_link():
    """One unit of 4 MB on 2 ranks, compute 100 ms a step: the all-gather (twice) and the
    reduce-scatter each cost (n-1) alpha + (n-1)/n bytes / bandwidth at their own fit, the
    compute waiting for each (gloo on the CPU): 100 + 2 x 3 + 6 = 112 ms. Priced at the
    all-reduce's bandwidth instead (16 Gbit/s), as before: 100 + 3 x 1 = 103 ms."""
    from scaleprobe.predict.timeline import Compute, Unit

    rows = [Compute(forward=0.03, backward=0.06, optimizer=0.01)] * 4
    # on_cpu=False: no gathered buffers' copies (the next test), the collectives alone
    s = S.RunSample("r", "fsdp", 1, 1, 4 * MB, rows, "synthetic", None, 1e-10, None, 0.1,
                    None, on_cpu=False)
    ops = (("all_gather", 1 * MS, 8.0, 0.0), ("reduce_scatter", 2 * MS, 4.0, 0.0),
           ("reduce_scatter", 0.0, 0.1, 5 * MB))  # a range above the unit's size: not used
    link = Link("lo", 16.0, 0.0, "test", ops=ops, ops_source="fits")
    sc = M.Scenario("fsdp", 2, 1, link, units=(Unit(4 * MB, 1.0),))
    p = M.predict(s, sc, replicates=2)
    # all-gather: 1 ms + 0.5 x 4 MB / 1 GB/s = 3 ms; reduce-scatter: 2 ms + 0.5 x 4 MB / 0.5 GB/s
    assert p.step_s.value == pytest.approx(0.112)
    assert p.phases["comm"] == pytest.approx(0.012)
    # the note gives each collective's time for the largest unit, as priced above
    assert any("its own fit on lo (the largest unit, 4.0 MB, on 2 ranks: all-gather 3 ms, "
               "reduce-scatter 6 ms" in n for n in p.notes), p.notes
    plain = M.predict(S.RunSample("r", "fsdp", 1, 1, 4 * MB, rows, "synthetic", None, 1e-10,
                                  None, 0.1, None, on_cpu=False), M.Scenario("fsdp", 2, 1, Link(
                                      "lo", 16.0, 0.0, "test"), units=(Unit(4 * MB, 1.0),)),
                      replicates=2)
    assert plain.step_s.value == pytest.approx(0.103)


def test_fsdp_on_many_cpu_ranks_adds_the_gathered_buffers_a_one_rank_run_never_fills():
    """FSDP2 on one rank gathers nothing (it copies its parameters into place); a rank of two
    copies its shard into each unit's gathered buffer, and a buffer of 32 MiB or more comes
    fresh from the system at each gather (its pages touched again): resnet18's two ranks
    (its 33.6 MB unit) took 68 ms of forward and backward a step more than one-rank runs.
    Units of 40 MB and 4 MB on 2 ranks, a pass 0.1 ns/B, a fresh one 1.25 ns/B: per gather
    (20 + 2) MB x 0.1 ns + 40 MB x 1.15 ns = 48.2 ms, before the forward and the backward."""
    from scaleprobe.predict.timeline import Compute, Unit

    rows = [Compute(forward=0.03, backward=0.06, optimizer=0.01)] * 4
    s = S.RunSample("r", "fsdp", 1, 1, 44 * MB, rows, "synthetic", None, 0.1e-9, 1.25e-9,
                    0.1, None)
    got = S.for_fsdp(s, [40 * MB, 4 * MB], 2, 0.1e-9, 32 << 20)
    assert got[0].forward == pytest.approx(0.03 + 0.0482)
    assert got[0].backward == pytest.approx(0.06 + 0.0482)
    assert got[0].optimizer == 0.01
    assert S.for_fsdp(s, [40 * MB], 1, 0.1e-9, 32 << 20) == rows  # one rank: as measured
    free = Link("free", 1e9, 0.0, "test")  # the collectives cost nothing: the copies remain
    sc = M.Scenario("fsdp", 2, 1, free, units=(Unit(40 * MB, 0.9), Unit(4 * MB, 0.1)))
    p = M.predict(s, sc, replicates=2)
    assert p.step_s.value == pytest.approx(0.1 + 2 * 0.0482, rel=1e-3)
    assert any("touched afresh" in n for n in p.notes)
    on_gpu = M.predict(S.RunSample("r", "fsdp", 1, 1, 44 * MB, rows, "synthetic", None, 0.1e-9,
                                   1.25e-9, 0.1, None, on_cpu=False), sc, replicates=2)
    assert on_gpu.step_s.value == pytest.approx(0.1, rel=1e-3)  # a caching allocator


def test_ddp_prices_the_buffers_it_broadcasts_before_every_forward(tmp_path):
    """Two dtype groups of buffers (100 kB and 50 kB) on the 0.4 Gbit link: 2 + 1 ms of
    broadcast before each forward, on top of the hand-computed 85 ms, inside forward. Not
    recorded: not priced, and said; none: nothing to price, nothing said."""
    s = S.from_run(one_rank_run(tmp_path, [(0.01, 0.03, 0.005)] * 8, THIRDS))
    p = M.predict(s, M.Scenario("ddp", 1, 2, SLOW, buffers=(100_000, 50_000)))
    assert p.step_s.value == pytest.approx(88 * MS)
    assert p.phases["forward"] == pytest.approx(13 * MS)
    assert any("2 collective(s) (one per dtype: 100,000 B, 50,000 B), 3.00 ms" in n
               for n in p.notes)
    s = S.from_run(one_rank_run(tmp_path, [(0.01, 0.03, 0.005)] * 8, THIRDS, name="r2"))
    p = M.predict(s, M.Scenario("ddp", 1, 2, SLOW))
    assert p.step_s.value == pytest.approx(85 * MS)
    assert any("buffers were not recorded" in n for n in p.notes)
    s = S.from_run(one_rank_run(tmp_path, [(0.01, 0.03, 0.005)] * 8, THIRDS, name="r3"))
    p = M.predict(s, M.Scenario("ddp", 1, 2, SLOW, buffers=()))
    assert p.step_s.value == pytest.approx(85 * MS)
    assert not any("buffers" in n for n in p.notes)


def test_a_speedup_of_the_mean_step_says_so_beside_the_median(tmp_path, capsys):
    """Local SGD's median step leaves out its averaging steps, which the speedup (samples/s:
    every step counts) holds: dividing the step shown into the run's gave another speedup
    than the one beside it. The table's heading and a note name the mean step."""
    from scaleprobe.cli import main

    rec = one_rank_run(tmp_path, [(0.01, 0.03, 0.005)] * 8, THIRDS)
    path = tmp_path / "r" / "result.json"
    path.write_text(json.dumps(rec.to_dict()))
    argv = ["predict", "--from", str(path), "--nproc", "4", "--link", "slow=0.4,0",
            "--strategy", "localsgd,ddp", "--average-every", "8"]
    assert main([*argv, "--json"]) == 0
    rows = {r["strategy"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    local, ddp = rows["localsgd"], rows["ddp"]
    assert local["step_mean_s"] > 1.05 * local["step_s"]["value"]  # the averaging steps
    assert main(argv) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "speedup in samples/s (of the mean step)" in out
    mean_ms, median_ms = local["step_mean_s"] * 1e3, local["step_s"]["value"] * 1e3
    assert (f"localsgd on 4 processes: the speedup and efficiency are of the mean step, "
            f"{mean_ms:.1f} ms (every step counts in samples/s), not of the median step "
            f"shown, {median_ms:.1f} ms") in out
    # DDP's every step is alike: no note
    assert abs(ddp["step_mean_s"] / ddp["step_s"]["value"] - 1) <= 0.02
    assert "ddp on 4 processes: the speedup" not in out
