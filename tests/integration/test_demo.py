"""`scaleprobe demo --quick`: both sweeps' tables printed, the report written, resumable."""

import pytest

from scaleprobe.report.batch import BATCH_HEADERS
from scaleprobe.report.workers import LOADER_HEADERS

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
