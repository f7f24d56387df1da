import json

from scaleprobe.core import results as R
from scaleprobe.core.experiment_records import typed
from scaleprobe.core.record import get
from scaleprobe.core.run_metrics import BREAKDOWN_PHASES


def test_append_and_read_roundtrip(tmp_path):
    f = tmp_path / "results.jsonl"
    for i in range(3):
        R.append_jsonl(f, {"kind": "run", "i": i})
    assert [r["i"] for r in R.read_jsonl(f)] == [0, 1, 2]


def test_torn_last_line_is_skipped_and_next_append_starts_clean(tmp_path, capsys):
    f = tmp_path / "results.jsonl"
    R.append_jsonl(f, {"kind": "run", "i": 0})
    with f.open("a") as fh:
        fh.write('{"kind": "run", "i": 1, "trunc')  # a writer killed mid-line
    assert [r["i"] for r in R.read_jsonl(f)] == [0]
    assert "torn or corrupt" in capsys.readouterr().err
    R.append_jsonl(f, {"kind": "run", "i": 2})
    assert [r["i"] for r in R.read_jsonl(f)] == [0, 2]


def test_write_json_atomic_leaves_no_temp(tmp_path):
    R.write_json_atomic(tmp_path / "a" / "r.json", {"x": 1})
    assert json.loads((tmp_path / "a" / "r.json").read_text()) == {"x": 1}
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["r.json"]


def test_new_record_has_nulls_not_zeros():
    rec = R.new_run_record({}, "id", "n", "k")
    m = rec["metrics"]
    assert m["samples_per_s"] is None and m["accuracy"] is None
    assert all(v is None for v in m["peak_mem_bytes"].values())
    assert set(m["breakdown_s"]) == set(BREAKDOWN_PHASES)


def test_get_dotted():
    rec = {"metrics": {"step_time_s": {"median": 0.5}, "x": None}}
    assert get(rec, "metrics.step_time_s.median") == 0.5
    assert get(rec, "metrics.x.y", "d") == "d"


def test_the_report_reads_schema_1_records():
    """Records written before repeats, invariants and load (schema 1) still make a report:
    their missing fields read as not measured, never as an error."""
    from scaleprobe.report.findings.diagnose import diagnose_all
    from scaleprobe.report.tables.scale import scale_table
    from tests.unit.report.factory import run, scale_point

    old = []
    for n in (1, 2):
        r = run(f"n{n}", strategy="ddp", nproc=n, sps=100.0 * n * 0.9,
                experiment=scale_point("old", n))
        r["schema"] = 1
        for k in ("invariants", "load"):
            r.pop(k, None)
        r["experiment"].pop("repeat", None)
        old.append(r)
    old = [typed(r) for r in old]
    rows = scale_table(old)
    assert rows[1]["speedup"] is not None and rows[1]["repeats"] == 1
    diagnose_all(old)  # no exception
