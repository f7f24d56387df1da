"""The sweep's control flow with the point processes replaced by a fake: out-of-memory skips,
the automatic batch search, tables, the summary record and resuming."""

import pytest

from scaleprobe import results as res
from scaleprobe.experiments import sweep as S

GIB = 1 << 30


def fake_record(cfg, point, status):
    b = cfg.train.batch_size
    ok = status == "ok"
    rec = res.new_run_record(cfg.to_dict(), f"run-{b}", "fake", cfg.key())
    rec["status"] = status
    rec["experiment"] = {"id": "fake", "kind": "sweep", "point": dict(point.axes)}
    rec["batch"] = {"per_device": b, "world_size": 1}
    m = rec["metrics"]
    if ok:  # memory grows with the batch, epoch time falls ever more slowly
        m["samples_per_s"] = 100.0 * b / (b + 32)
        m["epoch_time_s"] = 1000 / m["samples_per_s"]
        m["peak_mem_bytes"]["host"] = int(GIB * (0.5 + b / 64))
    else:
        rec["error"] = "DefaultCPUAllocator: can't allocate memory"
    return rec


@pytest.fixture
def fake_points(monkeypatch):
    """Batch sizes up to `limit["fits"]` fit; records go to results.jsonl as a point would."""
    calls, limit = [], {"fits": 64}

    def run_point(st, point):
        cfg = st.spec.config(point, str(st.out))
        if cfg.key() in st.done:
            rec = st.done[cfg.key()]
        else:
            calls.append(dict(point.axes))
            status = "ok" if cfg.train.batch_size <= limit["fits"] else "oom"
            rec = fake_record(cfg, point, status)
            res.append_jsonl(st.results_path, rec)
        st.records.append(rec)
        st.bar.point_done(point, rec)
        return rec

    monkeypatch.setattr(S, "run_point", run_point)
    monkeypatch.setattr(S, "preflight", lambda cfgs: None)
    return calls, limit


def spec(grid, **sweep):
    return {"sweep": {"id": "fake", **sweep}, "base": {"model": "linear", "loader": "naive"},
            "grid": grid}


def test_oom_skips_larger_batches_of_the_same_group_only(tmp_path, fake_points):
    calls, limit = fake_points
    limit["fits"] = 32
    recs = S.run_sweep(spec({"model": ["linear", "mlp"], "batch_size": [16, 32, 64, 128]}),
                       tmp_path, progress=False)
    assert calls == [{"model": m, "batch_size": b} for m in ("linear", "mlp")
                     for b in (16, 32, 64)]  # 128 skipped in each group
    assert [r["status"] for r in recs] == ["ok", "ok", "oom"] * 2
    summary = [r for r in res.read_jsonl(tmp_path / "results.jsonl") if r["kind"] == "sweep"]
    assert len(summary) == 1
    assert [s["point"] for s in summary[0]["skipped"]] == [{"model": "linear", "batch_size": 128},
                                                          {"model": "mlp", "batch_size": 128}]
    md = (tmp_path / "sweep.md").read_text()
    assert "## Batch size: model=linear" in md and "## Batch size: model=mlp" in md
    assert md.count("out of memory") >= 4 and "Fastest: batch 32" in md
    csv_lines = (tmp_path / "sweep.csv").read_text().splitlines()
    assert csv_lines[0].startswith("group,batch_size") and len(csv_lines) == 9


def test_auto_search_finds_the_largest_batch_per_group(tmp_path, fake_points):
    calls, limit = fake_points
    limit["fits"] = 100
    S.run_sweep(spec({"batch_size": "auto"}, batch_start=16, batch_max=1024, batch_round=8),
                tmp_path, progress=False)
    sizes = [c["batch_size"] for c in calls]
    assert sizes[:4] == [16, 32, 64, 128] and max(s for s in sizes if s <= 100) == 96
    summary = [r for r in res.read_jsonl(tmp_path / "results.jsonl") if r["kind"] == "sweep"][0]
    assert summary["searches"][0]["largest_fit"] == 96
    assert summary["recommendation"]["batch"]["fastest"]["batch_size"] == 96
    assert "largest batch that fits: 96" in (tmp_path / "sweep.md").read_text()


def test_second_run_resumes_from_results(tmp_path, fake_points):
    calls, _ = fake_points
    grid = {"batch_size": [16, 32]}
    S.run_sweep(spec(grid), tmp_path, progress=False)
    assert len(calls) == 2
    recs = S.run_sweep(spec(grid), tmp_path, progress=False)
    assert len(calls) == 2 and [r["status"] for r in recs] == ["ok", "ok"]


def test_completed_runs_keeps_ok_and_oom_only(tmp_path):
    p = tmp_path / "results.jsonl"
    for i, st in enumerate(("ok", "oom", "failed", "interrupted")):
        res.append_jsonl(p, {"kind": "run", "key": f"k{i}", "status": st})
    res.append_jsonl(p, {"kind": "sweep", "key": "k9", "status": "ok"})
    assert sorted(S.completed_runs(p)) == ["k0", "k1"]


def test_generic_table_for_other_axes(tmp_path, fake_points):
    S.run_sweep(spec({"model": ["linear", "mlp"]}), tmp_path, progress=False)
    md = (tmp_path / "sweep.md").read_text()
    assert "## All points" in md and "| linear | ok |" in md
    assert (tmp_path / "sweep.csv").read_text().startswith("model,status,samples_per_s")
