"""`scaleprobe demo --quick --repeats 1`: stopped with Ctrl+C, then resumed to the end; both
sweeps' tables printed, the report written, every point reused by a third call. One repeat of
each point (the quick demo's own default is 2): the commands, the resume and the report are
what is tested here, and the sweeps' repeats and their intervals have tests of their own
(test_sweep.py); the runs are half of the suite's longest test."""

import pytest

from scaleprobe.report.tables.batch import BATCH_HEADERS
from scaleprobe.report.tables.workers import LOADER_HEADERS

# 4 runs of two epochs each and the one stopped by Ctrl+C (the third call reuses them): about
# 30 s on the quiet 2-core machine, 2-3 minutes when other test suites share it
pytestmark = [pytest.mark.timeout(1200), pytest.mark.slow]

QUICK = ("--quick", "--repeats", "1")


def _training(points):
    """Whether a point in the folder ``points`` is past its warm-up, timing steps (its
    progress file: "epoch 1 of 2, step 5 of 22")."""
    return any(f.read_text(errors="replace").startswith("epoch ")
               for f in points.glob("*.progress"))


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """A user's `scaleprobe demo --quick --repeats 1`, stopped with Ctrl+C in its second point,
    then run again to the end (it resumes): (the output folder, the finished run's process, and of
    the stopped one: its exit code, its stderr, its sweep's run statuses, its report)."""
    import signal

    from scaleprobe.core.results import read_jsonl
    from tests.conftest import run_cli, start_cli, wait_for

    d = tmp_path_factory.mktemp("demo")
    out_dir = d / "out"
    results = out_dir / "demo-batch-size" / "results.jsonl"
    first, _, err_f = start_cli(d, "demo", *QUICK, "--out", out_dir)
    try:
        assert wait_for(lambda: results.exists() and read_jsonl(results, warn=False), 300)
        assert wait_for(lambda: _training(out_dir / "demo-batch-size" / "points"), 120)
        first.send_signal(signal.SIGINT)
        code = first.wait(timeout=60)
        statuses = [r["status"] for r in read_jsonl(results, warn=False) if r["kind"] == "run"]
        report = (out_dir / "report.md").read_text() if (out_dir / "report.md").exists() else ""
        stopped = code, err_f.read_text(errors="replace"), statuses, report
    finally:
        if first.poll() is None:
            first.kill()
    return out_dir, run_cli("demo", *QUICK, "--out", out_dir, timeout=900), stopped


def test_ctrl_c_in_the_demo_says_what_was_kept_and_writes_the_report(demo):
    """Bug: on a busy machine the demo showed nothing inside a point for minutes, and Ctrl+C
    printed only "scaleprobe: interrupted". Now the running point's steps are in its steps
    file (shown on the bar), and Ctrl+C names the runs kept, the command that resumes and the
    report of what was measured."""
    import re

    out, _, (code, err, statuses, report) = demo
    assert code == 130, err[-2000:]
    kept = re.search(rf"Kept (\d+) finished runs? in {re.escape(str(out))} "
                     r"\(demo-batch-size: (\d+)\)", err)
    assert kept and kept.group(1) == kept.group(2), err[-2000:]
    # the runs kept are those recorded ok; the point that was training when Ctrl+C came is
    # recorded interrupted, with the steps it had timed
    assert statuses.count("ok") == int(kept.group(1)) >= 1, (statuses, err[-2000:])
    assert statuses[-1] == "interrupted", statuses
    assert f"Running `scaleprobe demo --quick --repeats 1 --out {out}` again resumes" in err
    assert f"report of what was measured: {out / 'report.md'}" in err
    assert "### Sweep demo-batch-size" in report  # the runs kept, reported
    assert "Traceback" not in err


def test_quick_demo_prints_tables_and_writes_the_report(cli, demo):
    out_dir, p, _ = demo
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

    again = cli("demo", *QUICK, "--out", out_dir, timeout=300)  # every point reused: no new run records
    assert again.returncode == 0, again.stderr[-2000:]
    import json

    recs = [json.loads(f.read_text()) for f in out_dir.rglob("result.json")]
    ok = [r for r in recs if r["status"] == "ok"]
    # 4 points, none run twice; and the run Ctrl+C stopped
    assert len(ok) == 4 and [r["status"] for r in recs].count("interrupted") == 1
    assert len({(r["experiment"]["id"], str(r["experiment"]["point"]), r["experiment"]["repeat"])
                for r in ok}) == 4
    # the timed window's page faults, counted in each run's process (measure/env.py)
    faults = [r["metrics"]["page_faults_per_step"] for r in ok]
    assert all(isinstance(v, int | float) and v >= 0 for v in faults), faults
    assert "intervals over 1 repeat," in p.stdout


def test_the_demos_report_in_a_real_browser(demo):
    """The report a new user opens first: its "What this says" headline comes first with at
    most five verdicts, each with number, interval and command; no memory or time axis starts
    above zero; no label is cut or two alike; no "None" and no literal backtick."""
    from tests.integration.test_report_html import check_page, find_browser, inspect

    out_dir, p, _ = demo
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

    out_dir, p, _ = demo
    assert p.returncode == 0, p.stderr[-2000:]
    now = demo_shape(out_dir)
    if os.environ.get("SCALEPROBE_UPDATE_GOLDEN"):
        GOLDEN.write_text("\n".join(now) + "\n")
    want = GOLDEN.read_text().splitlines()
    gone, new = sorted(set(want) - set(now)), sorted(set(now) - set(want))
    assert not gone and not new, f"gone: {gone[:20]}\nnew: {new[:20]}"
