"""Batch-size table, growth rates, the batch and loader-worker recommendations."""

from __future__ import annotations

import pytest

from scaleprobe.report import batch as B
from tests.unit.report.factory import GIB, run, sweep_point


def _batch_sweep(device: bool = False) -> list[dict]:
    points = [(16, 1.0, 100.0, 160.0), (32, 1.37, 52.0, 308.0), (64, 2.0, 50.0, 320.0)]
    recs = []
    for bs, mem_gib, epoch, sps in points:
        mem = int(mem_gib * GIB)
        recs.append(run(f"b{bs}", batch=bs, experiment=sweep_point("bs", batch_size=bs),
                        epoch_s=epoch, sps=sps, host_mem=mem * 3,
                        device_mem=mem if device else None, gpu=80.0 if device else None))
    recs.append(run("b128", status="oom", batch=128, error="CUDA out of memory",
                    experiment=sweep_point("bs", batch_size=128)))
    return recs


def test_batch_table_growth_rates_and_cells():
    rows = B.batch_table(_batch_sweep(device=True))
    assert [r["batch_size"] for r in rows] == [16, 32, 64, 128]
    assert rows[0]["mem_growth"] is None and rows[0]["epoch_growth"] is None
    assert rows[1]["mem_growth"] == pytest.approx(0.37, abs=1e-3)
    assert rows[1]["epoch_growth"] == pytest.approx(-0.48)
    assert rows[2]["mem_growth"] == pytest.approx(2.0 / 1.37 - 1, abs=1e-3)
    assert rows[2]["epoch_growth"] == pytest.approx(50 / 52 - 1)
    cells = [B.batch_cells(r) for r in rows]
    assert cells[0][3] == "None" and cells[0][5] == "None"
    assert cells[1][3] == "+37%" and cells[1][5] == "-48%"
    assert cells[1][2] == "1.4 GiB"
    assert cells[3][2] == "out of memory"
    assert rows[0]["memory_kind"] == "device"


def test_host_memory_used_when_no_device_memory():
    rows = B.batch_table(_batch_sweep(device=False))
    assert rows[0]["memory_kind"] == "host"
    assert rows[0]["peak_mem_bytes"] == 3 * GIB


def test_recommend_batch_fastest_and_most_efficient():
    rec = B.recommend_batch(_batch_sweep(device=True))
    assert rec["fastest"]["batch_size"] == 64
    eff = rec["most_efficient"]
    assert eff["batch_size"] == 32
    assert eff["samples_per_s_per_gib"] == pytest.approx(308 / 1.37, rel=1e-3)
    assert [s["pays"] for s in rec["steps"]] == [True, False]
    assert "16 -> 32: epoch time -48%, memory +37%: pays" in rec["text"]
    assert "32 -> 64" in rec["text"] and "does not pay" in rec["text"]
    assert "Most efficient: batch 32" in rec["text"]


def test_recommend_batch_nothing_finished():
    recs = [run("x", status="oom", experiment=sweep_point("bs", batch_size=512))]
    rec = B.recommend_batch(recs)
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


def _loader_sweep() -> list[dict]:
    sps = {0: 100.0, 1: 190.0, 2: 200.0, 3: 198.0}
    out = []
    for w, s in sps.items():
        out.append(run(f"w{w}", workers=w, loader="naive" if w == 0 else "pipelined", sps=s,
                       experiment=sweep_point("ld", workers=w)))
    return out


def test_recommend_workers_fewest_within_five_percent():
    rec = B.recommend_workers(_loader_sweep())
    assert rec["workers"] == 1
    assert rec["best_samples_per_s"] == 200.0
    assert "Use 1 loader worker(s)" in rec["text"]


def test_loader_table_rows():
    rows = B.loader_table(_loader_sweep())
    assert [r["workers"] for r in rows] == [0, 1, 2, 3]
    assert rows[0]["data_wait_fraction"] == pytest.approx(0.02)
    cells = B.loader_cells(rows[0])
    assert cells[0] == "workers=0" and cells[2] == "2%"


def test_recommend_workers_without_data():
    assert B.recommend_workers([run("plain")])["workers"] is None


def test_point_reused_from_another_sweep_is_listed_under_both():
    from scaleprobe.report import records as R
    from tests.unit.report.factory import run, sweep_point

    measured = run("b64", batch=64, experiment=sweep_point("batch", batch_size=64))
    other = run("naive", loader="naive", experiment=sweep_point("loader", loader="naive"))
    summary = {"kind": "sweep", "experiment": {"id": "loader", "kind": "sweep"},
               "points": [{"point": {"loader": "naive"}, "run_id": other["run_id"]},
                          {"point": {"loader": "pipelined"}, "run_id": measured["run_id"]}]}
    groups = R.by_experiment([measured, other, summary], "sweep")
    assert [r["run_id"] for r in groups["batch"]] == [measured["run_id"]]
    loader = groups["loader"]
    assert [r["run_id"] for r in loader] == [other["run_id"], measured["run_id"]]
    assert R.point(loader[1]) == {"loader": "pipelined"}
    assert loader[1]["experiment"]["reused"] == measured["run_id"]
    assert R.point(measured) == {"batch_size": 64}  # the original record is not changed


def test_each_transform_gets_its_own_worker_recommendation():
    # light: 1 worker is enough; heavy: the CPU transform needs 3
    sps = {"light": {1: 400.0, 2: 405.0, 3: 404.0}, "heavy": {1: 100.0, 2: 170.0, 3: 200.0}}
    recs = [run(f"{t}{w}", workers=w, transform=t, sps=s,
                experiment=sweep_point("lt", transform=t, workers=w))
            for t, by_w in sps.items() for w, s in by_w.items()]
    rec = B.recommend_workers(recs)
    assert rec["by_transform"]["light"]["workers"] == 1
    assert rec["by_transform"]["heavy"]["workers"] == 3
    assert rec["workers"] == 1  # the overall best setting is a light one
    assert "transform heavy: Use 3 loader worker(s)" in rec["text"]
    assert "transform light: Use 1 loader worker(s)" in rec["text"]
