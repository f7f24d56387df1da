"""The sweep's control flow with the point processes replaced by a fake: out-of-memory skips,
the automatic batch search, tables, the summary record and resuming."""

from types import SimpleNamespace

import pytest

from scaleprobe.core import results as res
from scaleprobe.experiments import sweep as S
from scaleprobe.report.render.sweep_tables import write_tables

GIB = 1 << 30


def run_sweep(*args, **kw):
    """The sweep as the commands run it: with the report's tables."""
    return S.run_sweep(*args, tables=write_tables, **kw)


def fake_record(cfg, experiment, status):
    b = cfg.train.batch_size
    ok = status == "ok"
    rec = res.new_run_record(cfg.to_dict(), f"run-{b}-{experiment['attempt']}", "fake",
                             cfg.key())
    rec["status"] = status
    rec["experiment"] = experiment
    rec["batch"] = {"per_device": b, "world_size": 1}
    m = rec["metrics"]
    if ok:  # memory grows with the batch, epoch time falls ever more slowly
        m["samples_per_s"] = 100.0 * b / (b + 32)
        m["epoch_time_s"] = 1000 / m["samples_per_s"]
        m["step_time_s"] = {"median": b / m["samples_per_s"], "rel_ci": 0.01}
        m["peak_mem_bytes"]["host"] = int(GIB * (0.5 + b / 64))
    else:
        rec["error"] = "DefaultCPUAllocator: can't allocate memory"
    return rec


class FakeProcs:
    """Stands in for the point processes: "runs" a point by appending its record to
    results.jsonl, as the point process does; everything above it (resume, repeats,
    out-of-memory skips, collect_record) is the sweep's own code."""

    def __init__(self, calls, limit):
        self.calls, self.limit = calls, limit

    def start(self, payload, work_dir, label, env=None):
        cfg, exp = payload.config, payload.experiment.to_dict()
        self.calls.append({**exp["point"], "repeat": exp["repeat"]})
        b = cfg.train.batch_size
        status = ("failed" if b in self.limit["fail"] else "ok" if b <= self.limit["fits"]
                  else "oom")
        res.append_jsonl(work_dir.parent / res.RESULTS_FILE, fake_record(cfg, exp, status))
        return SimpleNamespace(payload=payload)

    def wait(self, proc):
        return 0

    def stop_all(self):
        pass

    def close(self):
        pass


@pytest.fixture
def fake_points(monkeypatch):
    """Batch sizes up to `limit["fits"]` fit; those in `limit["fail"]` fail. ``calls``: the
    points started, with repeat."""
    calls, limit = [], {"fits": 64, "fail": set()}
    from scaleprobe.experiments import executor as X

    monkeypatch.setattr(X, "process_set", lambda executor, out: FakeProcs(calls, limit))
    monkeypatch.setattr(S, "preflight", lambda cfgs: None)
    return calls, limit


def spec(grid, **sweep):
    sweep.setdefault("repeats", 1)
    return {"sweep": {"id": "fake", **sweep}, "base": {"model": "linear", "loader": "naive"},
            "grid": grid}


def points_of(calls):
    return [{k: v for k, v in c.items() if k != "repeat"} for c in calls]


def test_oom_skips_larger_batches_of_the_same_group_only(tmp_path, fake_points):
    calls, limit = fake_points
    limit["fits"] = 32
    recs = run_sweep(spec({"model": ["linear", "mlp"], "batch_size": [16, 32, 64, 128]}),
                       tmp_path, progress=False)
    assert points_of(calls) == [{"model": m, "batch_size": b} for m in ("linear", "mlp")
                                for b in (16, 32, 64)]  # 128 skipped in each group
    assert [r.status for r in recs] == ["ok", "ok", "oom"] * 2
    summary = [r for r in res.read_jsonl(tmp_path / "results.jsonl") if r["kind"] == "sweep"]
    assert len(summary) == 1
    assert [s["point"] for s in summary[0]["skipped"]] == [{"model": "linear", "batch_size": 128},
                                                          {"model": "mlp", "batch_size": 128}]
    md = (tmp_path / "sweep.md").read_text()
    assert "## Batch size: model=linear" in md and "## Batch size: model=mlp" in md
    assert md.count("out of memory") >= 4
    assert "Fastest: inconclusive (1 repeat): batch 32" in md  # one repeat decides nothing
    csv_lines = (tmp_path / "sweep.csv").read_text().splitlines()
    assert csv_lines[0].startswith("group,batch_size") and len(csv_lines) == 9


def test_auto_search_finds_the_largest_batch_per_group(tmp_path, fake_points):
    calls, limit = fake_points
    limit["fits"] = 100
    run_sweep(spec({"batch_size": "auto"}, batch_start=16, batch_max=1024, batch_round=8),
                tmp_path, progress=False)
    sizes = [c["batch_size"] for c in calls]
    assert all(c["repeat"] == 0 for c in calls)  # one repeat: no re-runs after the search
    assert sizes[:4] == [16, 32, 64, 128] and max(s for s in sizes if s <= 100) == 96
    summary = [r for r in res.read_jsonl(tmp_path / "results.jsonl") if r["kind"] == "sweep"][0]
    assert summary["searches"][0]["largest_fit"] == 96
    assert summary["recommendation"]["batch"]["fastest"]["batch_size"] == 96
    assert "largest batch that fits: 96" in (tmp_path / "sweep.md").read_text()


def test_second_run_resumes_from_results(tmp_path, fake_points):
    """Catches a resume that reruns finished points, or one that reuses a failed point."""
    calls, limit = fake_points
    grid = {"batch_size": [16, 32]}
    run_sweep(spec(grid), tmp_path, progress=False)
    assert len(calls) == 2
    recs = run_sweep(spec(grid), tmp_path, progress=False)
    assert len(calls) == 2 and [r.status for r in recs] == ["ok", "ok"]
    assert all(r.experiment.reused for r in recs)
    # a new point is run, the finished ones are not
    run_sweep(spec({"batch_size": [16, 32, 48]}), tmp_path, progress=False)
    assert points_of(calls)[2:] == [{"batch_size": 48}]


def test_a_failed_point_is_run_again_and_only_it(tmp_path, fake_points):
    """Catches a resume that takes a failed point's record as finished (the point would never
    be measured) or one that reruns the points that did finish."""
    calls, limit = fake_points
    limit["fail"] = {32}
    grid = {"batch_size": [16, 32, 64]}
    first = run_sweep(spec(grid), tmp_path, progress=False)
    assert [r.status for r in first] == ["ok", "failed", "ok"]
    limit["fail"] = set()
    again = run_sweep(spec(grid), tmp_path, progress=False)
    assert points_of(calls) == [{"batch_size": b} for b in (16, 32, 64)] + [{"batch_size": 32}]
    assert [r.status for r in again] == ["ok", "ok", "ok"]
    assert [bool(r.experiment.reused) for r in again] == [True, False, True]


def test_repeats_run_interleaved_and_resume_counts_them(tmp_path, fake_points):
    """Catches repeats run back to back (A A A B B B: drift lands on one point) and a resume
    that runs every repeat again or forgets the ones it has."""
    calls, _ = fake_points
    grid = {"batch_size": [16, 32]}
    run_sweep(spec(grid, repeats=2), tmp_path, progress=False)
    assert calls == [{"batch_size": 16, "repeat": 0}, {"batch_size": 32, "repeat": 0},
                     {"batch_size": 16, "repeat": 1}, {"batch_size": 32, "repeat": 1}]
    recs = run_sweep(spec(grid), tmp_path, progress=False, repeats=3)
    assert calls[4:] == [{"batch_size": 16, "repeat": 2}, {"batch_size": 32, "repeat": 2}]
    assert [r.repeat for r in recs] == [0, 0, 1, 1, 2, 2]
    summary = [r for r in res.read_jsonl(tmp_path / "results.jsonl") if r["kind"] == "sweep"]
    assert summary[-1]["repeats"] == 3
    assert "intervals over 3 repeats" in (tmp_path / "sweep.md").read_text()


def test_an_oom_point_is_not_repeated(tmp_path, fake_points):
    calls, limit = fake_points
    limit["fits"] = 16
    run_sweep(spec({"batch_size": [16, 32, 64]}, repeats=2), tmp_path, progress=False)
    assert calls == [{"batch_size": 16, "repeat": 0}, {"batch_size": 32, "repeat": 0},
                     {"batch_size": 16, "repeat": 1}]


def test_repeats_must_be_positive(tmp_path, fake_points):
    from scaleprobe.core.errors import ConfigError

    with pytest.raises(ConfigError, match="--repeats must be a whole number of at least 1"):
        run_sweep(spec({"batch_size": [16]}), tmp_path, progress=False, repeats=0)
    with pytest.raises(ConfigError, match=r"\[sweep\] repeats must be at least 1"):
        run_sweep(spec({"batch_size": [16]}, repeats=0), tmp_path, progress=False)


def test_completed_runs_keeps_ok_and_oom_only(tmp_path):
    p = tmp_path / "results.jsonl"
    for i, st in enumerate(("ok", "oom", "failed", "interrupted")):
        res.append_jsonl(p, {"kind": "run", "key": f"k{i}", "status": st})
    res.append_jsonl(p, {"kind": "sweep", "key": "k9", "status": "ok"})
    assert sorted(S.completed_runs(p)) == ["k0", "k1"]


def test_a_sweep_renders_nothing_itself(tmp_path, fake_points):
    """The tables are the report's: run without them, a sweep writes its records and its
    summary record (with no recommendation) and no sweep.md or sweep.csv."""
    recs = S.run_sweep(spec({"batch_size": [16, 32]}), tmp_path, progress=False)
    assert [r.status for r in recs] == ["ok", "ok"]
    assert not (tmp_path / "sweep.md").exists() and not (tmp_path / "sweep.csv").exists()
    (summary,) = [r for r in res.read_jsonl(tmp_path / "results.jsonl") if r["kind"] == "sweep"]
    assert summary["recommendation"] is None and summary["points_run"] == 2


def test_generic_table_for_other_axes(tmp_path, fake_points):
    run_sweep(spec({"model": ["linear", "mlp"]}), tmp_path, progress=False)
    md = (tmp_path / "sweep.md").read_text()
    assert "## All points" in md and "| linear | ok |" in md
    assert (tmp_path / "sweep.csv").read_text().startswith("model,status,samples_per_s")


def test_a_resumed_sweep_stopped_early_keeps_the_finished_tables(tmp_path, fake_points,
                                                                 monkeypatch):
    """Ctrl+C (or a closed pipe: `scaleprobe sweep ... | head`) while a finished sweep is run
    again and lists its points as "done before". Bug caught: the partial tables were written
    from the points listed so far, replacing the complete sweep.md / sweep.csv with one
    batch size of two (and medians over the repeats reached)."""
    grid = {"batch_size": [16, 32]}
    run_sweep(spec(grid, repeats=2), tmp_path, progress=False)
    full_csv = (tmp_path / "sweep.csv").read_text()
    real, n = S.run_point, []

    def stop_at_second(*a, **kw):
        n.append(1)
        if len(n) == 2:
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(S, "run_point", stop_at_second)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec(grid, repeats=2), tmp_path, progress=False)
    md = (tmp_path / "sweep.md").read_text()
    assert "_Interrupted: the tables hold the points finished so far._" in md
    assert "| 16 |" in md and "| 32 |" in md
    assert (tmp_path / "sweep.csv").read_text() == full_csv
    # the same sweep id with a smaller grid: only its own points' runs fill the tables
    n.clear()
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec({"batch_size": [16]}, repeats=2), tmp_path, progress=False)
    md = (tmp_path / "sweep.md").read_text()
    assert "| 16 |" in md and "| 32 |" not in md


def test_only_runs_of_the_same_experiment_stand_as_its_repeats(tmp_path, fake_points):
    """A separate `run` of the same configuration, or another experiment's run of it, made at
    another time under another load, is not taken as a repeat of this one's interleaved
    pairing (bug caught: `scale` listed an unrelated run from 22 minutes before as "nproc=2
    repeat 0 (done before, not rerun)")."""
    calls, _ = fake_points
    doc = spec({"batch_size": [16, 32]})
    key = load_key(doc, tmp_path, 16)
    for i, exp in enumerate((None, {"id": "another", "kind": "sweep", "point": {}})):
        rec = res.new_run_record({}, f"earlier-{i}", "earlier", key)
        rec["status"], rec["experiment"] = "ok", exp
        res.append_jsonl(tmp_path / "results.jsonl", rec)
    recs = run_sweep(doc, tmp_path, progress=False)
    assert points_of(calls) == [{"batch_size": 16}, {"batch_size": 32}]  # both measured here
    assert not any(r.experiment.reused for r in recs)
    assert {r.exp_id for r in recs} == {"fake"}
    again = run_sweep(doc, tmp_path, progress=False)  # its own runs: resumed, not rerun
    assert len(calls) == 2 and all(r.experiment.reused for r in again)


def load_key(doc, out, batch):
    from scaleprobe.experiments.spec import load_spec, points

    sp = load_spec(doc)
    (pt,) = [p for p in points(sp) if p.axes["batch_size"] == batch]
    return sp.config(pt, str(out)).key()
