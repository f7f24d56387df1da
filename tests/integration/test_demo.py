"""`scaleprobe demo --quick`: both sweeps' tables printed, the report written, resumable."""

import pytest

from scaleprobe.report.tables.batch import BATCH_HEADERS
from scaleprobe.report.tables.workers import LOADER_HEADERS

# 8 runs of two epochs each, twice (the second call reuses them): about 90 s on the quiet
# 2-core machine, 4-5 minutes when other test suites share it
pytestmark = [pytest.mark.timeout(1200), pytest.mark.slow]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """One `scaleprobe demo --quick` for the module's tests: (its output folder, its process)."""
    from tests.conftest import run_cli

    out_dir = tmp_path_factory.mktemp("demo") / "out"
    return out_dir, run_cli("demo", "--quick", "--out", out_dir, timeout=900)


def test_quick_demo_prints_tables_and_writes_the_report(cli, demo):
    out_dir, p = demo
    assert p.returncode == 0, p.stderr[-2000:]
    assert "| Batch size | Devices | Peak memory | Growth | Epoch time | Growth |" in p.stdout
    assert "A larger batch pays only while epoch time falls faster than memory grows" in p.stdout
    assert "| B_noise | Batch vs B_noise |" in p.stdout  # the gradient noise scale per batch
    assert "Critical batch, predicted by the gradient noise scale" in p.stdout
    assert "| Setting | Workers | Data wait |" in p.stdout
    for sid in ("demo-batch-size", "demo-loader-transform"):
        assert (out_dir / sid / "sweep.md").exists()
    md = (out_dir / "report.md").read_text()
    # the report covers both sweeps, each with its own table
    assert "## Sweeps" in md
    for sid in ("demo-batch-size", "demo-loader-transform"):
        assert f"### Sweep {sid}" in md
    # the FLOP/s column in the unit that reads: GFLOP/s or MFLOP/s on a CPU, TFLOP/s on a GPU
    assert any("| " + " | ".join(BATCH_HEADERS).replace("TFLOP/s", unit) + " |" in md
               for unit in ("TFLOP/s", "GFLOP/s", "MFLOP/s"))
    assert "| " + " | ".join(LOADER_HEADERS) + " |" in md
    assert (out_dir / "report.html").stat().st_size > 10_000
    assert str(out_dir / "report.html") in p.stdout

    again = cli("demo", "--quick", "--out", out_dir, timeout=300)  # every point reused: no new run records
    assert again.returncode == 0, again.stderr[-2000:]
    n_runs = sum(1 for f in out_dir.rglob("result.json"))
    assert n_runs == 8  # 4 points x 2 repeats, none run twice
    import json

    # the timed window's page faults, counted in each run's process (measure/env.py)
    faults = [json.loads(f.read_text())["metrics"]["page_faults_per_step"]
              for f in out_dir.rglob("result.json")]
    assert all(isinstance(v, int | float) and v >= 0 for v in faults), faults
    assert "intervals over 2 repeats" in p.stdout


def test_the_demos_report_in_a_real_browser(demo):
    """The report a new user opens first: its "What this says" headline comes first with at
    most five verdicts, each with number, interval and command; no memory or time axis starts
    above zero; no label is cut or two alike; no "None" and no literal backtick."""
    from tests.integration.test_report_html import check_page, find_browser, inspect

    out_dir, p = demo
    assert p.returncode == 0, p.stderr[-2000:]
    binary = find_browser()
    if binary is None:
        pytest.skip("no headless Chromium: run `make browser` (scripts/ensure-chromium.sh)")
    page, errors, _ = inspect(binary, out_dir / "report.html")
    check_page(page, errors)
    assert page["figures"], "the demo's report has its figures"


GOLDEN = __import__("pathlib").Path(__file__).with_name("demo_shape.txt")


def _key_paths(obj, prefix: str = "") -> set[str]:
    """Every key path of a record (``metrics.peak_mem_bytes.host``; a list's items as
    ``[]``); the keys of ``null_reasons`` and of per-point / per-rank maps are data, not
    shape: their values' shapes count, their names do not."""
    out = {prefix} if prefix else set()
    if isinstance(obj, dict):
        data_keyed = prefix.endswith(("null_reasons", "point", "by_rank", "ranks_seen"))
        for k, v in obj.items():
            out |= _key_paths(v, f"{prefix}.{'*' if data_keyed else k}".lstrip("."))
    elif isinstance(obj, list):
        for v in obj:
            out |= _key_paths(v, prefix + "[]")
    return out


def demo_shape(out_dir) -> list[str]:
    """The demo's shape: the key paths of its run and sweep records and the header row of
    every table in its report (the values are measurements; these must not move)."""
    import json
    import re

    from scaleprobe.core import results as res

    keys: set[str] = set()
    for f in out_dir.rglob("result.json"):
        keys |= {"run: " + k for k in _key_paths(json.loads(f.read_text()))}
    for f in out_dir.rglob("results.jsonl"):
        for rec in res.read_jsonl(f):
            keys |= {f"{rec['kind']}: " + k for k in _key_paths(rec)}
    # the loader recommendation's keys follow its outcome (decided, undecided with its
    # interval, unexplained, one setting alone: the load on the machine picks which): each
    # must be a key the record declares (report/tables/rows.WorkersPick), not one outcome's set
    from scaleprobe.report.tables.rows import WorkersPick

    lead = "sweep: recommendation.loader."
    outcome = {k for k in keys if k.startswith(lead)}
    undeclared = {k for k in outcome
                  if k[len(lead):].split(".")[0] not in WorkersPick.__annotations__}
    assert not undeclared, f"keys the loader recommendation does not declare: {undeclared}"
    keys -= outcome
    lines = (out_dir / "report.md").read_text().splitlines()
    tables = {a for a, b in zip(lines, lines[1:], strict=False) if a.startswith("|") and b.startswith("|--")}
    # the FLOP/s unit follows the machine's speed (MFLOP/s to TFLOP/s): not shape; the runs
    # table lifts a column that reads the same in every run above it ("All runs: ..."), so
    # which columns it keeps depends on the measurements (the outside load): its record keys
    # are compared, its header is not
    tables = {re.sub(r"\b[MGT]FLOP/s", "FLOP/s", t) for t in tables
              if not t.startswith("| Run | Experiment |")}
    return sorted(keys) + ["table: " + t for t in sorted(tables)]


def test_the_demos_records_and_tables_keep_their_shape(demo):
    """The demo's output moves only on purpose: every key of its records and every table's
    header row against tests/integration/demo_shape.txt. A restructuring that drops, renames
    or moves a figure fails here; a change meant to do so rewrites the file
    (SCALEPROBE_UPDATE_GOLDEN=1) and shows the difference in its commit."""
    import os

    out_dir, p = demo
    assert p.returncode == 0, p.stderr[-2000:]
    now = demo_shape(out_dir)
    if os.environ.get("SCALEPROBE_UPDATE_GOLDEN"):
        GOLDEN.write_text("\n".join(now) + "\n")
    want = GOLDEN.read_text().splitlines()
    gone, new = sorted(set(want) - set(now)), sorted(set(now) - set(want))
    assert not gone and not new, f"gone: {gone[:20]}\nnew: {new[:20]}"
