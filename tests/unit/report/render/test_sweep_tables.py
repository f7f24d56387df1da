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
    assert h[-4:] == ["metric", "shard audit", "speedup", "paired speedup"]
    rows = {(r[0], r[1]): dict(zip(h, r, strict=True)) for r in tab["rows"]}
    assert rows[("triplet", 1)]["speedup"] == "1.00x (baseline)"
    assert rows[("triplet", 3)]["speedup"] == "1.80x"
    # one repeat: the +/-10% floor, and a claim that decides nothing
    assert rows[("triplet", 3)]["paired speedup"] == "1.80x [1.64, 1.98], inconclusive (1 repeat)"
    assert rows[("softmax", 2)]["paired speedup"].startswith("1.90x [")  # softmax's own 1 process
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


def _nproc_repeats(sps: dict[int, list[float]], outside: dict[int, float] | None = None):
    """A sweep over nproc, one run per repeat; ``outside``: cores busy outside each count's
    runs (of 2)."""
    out = []
    for n, vals in sps.items():
        for i, v in enumerate(vals):
            rec = run(f"n{n}r{i}", strategy="ddp", nproc=n, sps=v, cores=2,
                      experiment=sweep_point("np", i, nproc=n))
            rec["metrics"]["outside_cpu_cores"] = (outside or {}).get(n, 0.05)
            out.append(rec)
    return out


def test_the_speedup_columns_are_what_their_headers_say():
    """Bug caught: sweep.md's "speedup" was the paired geometric mean beside a samples/s
    column of median repeats, so 1.08x sat beside 111 / 98.1 = 1.13x. Now "speedup" is the
    ratio of the samples/s shown and "paired speedup" the claim, with its state: the repeats'
    ratios here are 0.9, 1.5 and 1.35 (geometric mean 1.22), the median repeats' 120 / 100."""
    import math

    tab = T.points_table(_nproc_repeats({1: [100.0, 80.0, 120.0], 2: [90.0, 120.0, 162.0]}),
                         [], ["nproc"])
    h = tab["headers"]
    base, two = (dict(zip(h, r, strict=True)) for r in tab["rows"])
    assert (base["samples/s"], two["samples/s"]) == ("100", "120")
    assert two["speedup"] == "1.20x"  # 120 / 100: the column divided
    geo = math.exp((math.log(0.9) + math.log(1.5) + math.log(1.35)) / 3)
    assert two["paired speedup"].startswith(f"{geo:.2f}x [")
    assert two["paired speedup"].endswith(", not resolved")  # its interval holds 1x
    assert base["speedup"] == "1.00x (baseline)"
    assert any("paired speedup = the geometric mean" in n for n in tab["notes"])


def test_the_paired_speedup_carries_load_and_not_like_for_like():
    """The paired speedup cell is the claim's: under load where any run of either point
    was, and not like for like where the two points differ in more than nproc."""
    recs = _nproc_repeats({1: [100.0, 102.0], 2: [180.0, 183.0]}, outside={1: 1.7})
    tab = T.points_table(recs, [], ["nproc"])
    two = dict(zip(tab["headers"], tab["rows"][1], strict=True))
    assert two["paired speedup"].endswith(", under load")
    assert two["speedup"] == "1.80x, under load"
    quiet = T.points_table(_nproc_repeats({1: [100.0, 102.0], 2: [180.0, 183.0]}), [],
                           ["nproc"])
    assert "under load" not in " ".join(map(str, quiet["rows"][1]))
    unlike = _nproc_repeats({1: [100.0, 102.0], 2: [180.0, 183.0]})
    for r in unlike:
        if r["config"]["dist"]["nproc"] == 2:
            r["env"]["threads"] = 1
    two = dict(zip(tab["headers"], T.points_table(unlike, [], ["nproc"])["rows"][1],
                   strict=True))
    assert two["paired speedup"] == "1.80x (not like for like)"
