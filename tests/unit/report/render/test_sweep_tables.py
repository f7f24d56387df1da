"""A sweep's every-point table: task metric, shard audit, and speedup over process counts."""

import csv
import io

from scaleprobe.core.experiment_records import SkippedPoint
from scaleprobe.core.result_model import RunResult
from scaleprobe.report.render import sweep_tables as _tables
from tests.unit.report.factory import run, sweep_point, typed_module, with_

T = typed_module(_tables)


def _face_points():
    out = []
    for loss, sps in (("triplet", {1: 100.0, 2: 150.0, 3: 180.0}),
                      ("softmax", {1: 120.0, 2: 228.0})):
        for n, s in sps.items():
            rec = run(f"{loss}{n}", strategy="ddp", nproc=n, sps=s,
                      experiment=sweep_point("face", loss=loss, nproc=n))
            rec["metrics"]["verification_accuracy"] = 0.9 + n / 100
            if n > 1:
                rec["audit"] = {"ok": loss == "triplet"}
            out.append(rec)
    return out


def test_points_table_has_metric_audit_and_speedup_per_group():
    tab = T.points_table(_face_points(), [], ["loss", "nproc"])
    h = tab["headers"]
    assert h[-3:] == ["metric", "shard audit", "speedup"]
    rows = {(r[0], r[1]): dict(zip(h, r, strict=True)) for r in tab["rows"]}
    assert rows[("triplet", 1)]["speedup"] == "1.00x"
    assert rows[("triplet", 3)]["speedup"] == "1.80x [1.64, 1.98]"  # one repeat: +/-10% floor
    assert rows[("softmax", 2)]["speedup"].startswith("1.90x [")  # against softmax's own 1 process
    assert rows[("triplet", 2)]["metric"] == "verif. 0.920"
    assert rows[("triplet", 2)]["shard audit"] == "ok"
    assert rows[("softmax", 2)]["shard audit"] == "FAILED"
    assert rows[("softmax", 1)]["shard audit"] == "-"


def test_no_speedup_column_without_a_process_axis_and_a_failed_base():
    recs = [run("a", experiment=sweep_point("s", model="a")),
            run("b", experiment=sweep_point("s", model="b"))]
    assert "speedup" not in T.points_table(recs, [], ["model"])["headers"]
    broken = [with_(run("one", nproc=1, experiment=sweep_point("p", nproc=1)), "status",
                    "failed"),
              run("two", nproc=2, experiment=sweep_point("p", nproc=2))]
    assert T.speedups(broken, ["nproc"]) == {}  # nothing to compare against: no number


def test_points_csv_carries_raw_figures_and_skipped_rows():
    text = T.points_csv(_face_points(), [SkippedPoint(point={"loss": "x", "nproc": 4},
                                                      reason="not run")], ["loss", "nproc"])
    rows = list(csv.DictReader(io.StringIO(text)))
    tri3 = next(r for r in rows if r["loss"] == "triplet" and r["nproc"] == "3")
    assert float(tri3["speedup"]) == 1.8
    assert tri3["metric_name"] == "verification_accuracy" and tri3["audit_ok"] == "True"
    assert rows[-1]["status"] == "skipped" and rows[-1]["error"] == "not run"


def test_sweep_tables_name_the_points_measured_under_load():
    """Catches a sweep whose tables hide that some of its points ran on a busy machine."""
    from scaleprobe.experiments.spec import load_spec

    sp = load_spec({"sweep": {"id": "s"}, "base": {"model": "linear"},
                    "grid": {"model": ["a", "b"]}})
    quiet = run("a", experiment=sweep_point("s", model="a"), cores=2)
    busy = run("b", experiment=sweep_point("s", model="b"), cores=2)
    quiet["metrics"]["outside_cpu_cores"] = 0.05
    busy["metrics"]["outside_cpu_cores"] = 1.5
    notes = T.sweep_report([RunResult.from_dict(r) for r in (quiet, busy)], [], [], sp)["notes"]
    line = next(n for n in notes if "under load" in n.lower())
    assert "model=b" in line and "model=a" not in line


def test_a_strategy_sweep_with_fsdp_shows_the_state_each_rank_holds():
    """ddp vs fsdp: the parameters + gradients + optimizer state per rank beside the peaks
    (the largest rank's), in the table and in sweep.csv; a sweep without a sharding
    strategy keeps its columns."""
    recs = []
    for strategy, total in (("ddp", 12 << 20), ("fsdp", 6 << 20)):
        rec = run(strategy, strategy=strategy, nproc=2,
                  experiment=sweep_point("s", strategy=strategy))
        rec["metrics"]["state_bytes"] = {"total_bytes": total, "rank": 0, "by_rank": []}
        recs.append(rec)
    tab = T.points_table(recs, [], ["strategy"])
    assert tab["headers"][-1] == "state/rank"
    assert [r[-1] for r in tab["rows"]] == ["12.0 MiB", "6.0 MiB"]
    assert "state/rank" not in T.points_table(recs[:1], [], ["strategy"])["headers"]
    rows = list(csv.DictReader(io.StringIO(T.points_csv(recs, [], ["strategy"]))))
    assert [r["state_bytes_per_rank"] for r in rows] == [str(12 << 20), str(6 << 20)]
