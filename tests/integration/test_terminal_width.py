"""A run's terminal output in an 80-column terminal."""

import pytest
from rich.cells import cell_len

pytestmark = pytest.mark.timeout(240)


def test_run_output_fits_80_columns_with_whole_headers(cli, tmp_path):
    """Bugs: in an 80-column terminal the summary table cut its headers to "sampl..." and
    "accu..." and wrapped values ("1102.0 / ms"); the profiler's own "USDT: ...
    profiler_start" lines were written into the progress bar. COLUMNS=80 sets the width, as a
    terminal of that size does."""
    p = cli("run", "--model", "linear", "--steps", 6, "--warmup-steps", 1, "--loader", "naive",
            "--eval", "--profile-every", 0.001, "--out", "out",
            env={"COLUMNS": "80"}, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = (p.stdout + p.stderr).splitlines()
    assert max(cell_len(line) for line in lines) <= 80, "\n".join(lines)
    text = "\n".join(lines)
    assert "USDT" not in text and "profiler_start" not in text
    assert any((tmp_path / "out").glob("*/traces/profiler-rank0.log"))
    # every figure's name whole on one line, and each value beside it on that line
    rows = {line.strip("│┃ ").split("│")[0].strip(): line for line in lines if "│" in line}
    for name in ("samples/s", "step median", "p95", "epoch time", "peak host mem",
                 "peak device mem", "CPU util", "GPU util", "accuracy"):
        assert name in rows, text
    assert rows["step median"].rstrip(" │").endswith(" ms")
    assert rows["peak host mem"].rstrip(" │").endswith(("B", "B)"))  # "1.0 GiB (net 4 MiB)"
    assert "…" not in text
