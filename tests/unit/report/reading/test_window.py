"""The runs table's step median with its interval and how the window ended."""

from scaleprobe.core import fmt
from scaleprobe.core.result_model import RunResult
from scaleprobe.report.render.sections_runs import RUN_HEADERS, run_cells, runs_section
from tests.unit.report.factory import run


def _cell(**metrics):
    rec = run("r", step_s=0.0651, rel_ci=0.059)
    rec["metrics"].update(metrics)
    r = RunResult.from_dict(rec)
    return run_cells(r)[RUN_HEADERS.index("Step median")], r


def test_step_median_carries_its_interval_and_an_unstable_stop():
    """Bug caught: a median that --max-seconds cut before it was stable shown as a bare
    "65.1 ms", like one that was."""
    cell, _ = _cell(stop_reason="max-seconds")
    assert cell == f"{fmt.duration(0.0651)} ±5.9% (max-seconds, not stable)"
    cell, r = _cell(stop_reason="stable")
    assert cell == f"{fmt.duration(0.0651)} ±5.9%"
    text = "\n".join(b.text for b in runs_section([r]).blocks if hasattr(b, "text"))
    assert "95% interval" in text and "not stable" not in text  # no marker in the table
    _, cut = _cell(stop_reason="max-seconds")
    text = "\n".join(b.text for b in runs_section([cut]).blocks if hasattr(b, "text"))
    assert "95% interval" in text and "not stable" in text  # the marker it shows, explained
