"""`scaleprobe scale`: the same run on 1 and 2 processes, speedup measured from both."""

import pytest

from scaleprobe.metrics import plausible_speedup, ratio_interval
from scaleprobe.results import read_jsonl

pytestmark = pytest.mark.timeout(300)


@pytest.mark.slow
def test_scale_measures_each_count_and_explains_the_gap(cli, out_dir):
    """Each count measured in its own runs, repeats interleaved (1 2 1 2), the speedup and
    its interval computed from the paired repeats; a second call resumes."""
    argv = ("scale", "--nproc", "1,2", "--steps", 8, "--warmup-steps", 2, "--loader", "naive",
            "--batch-size", 32, "--out", out_dir, "--no-progress", "--repeats", 2)
    p = cli(*argv)
    assert p.returncode == 0, p.stderr[-2000:]
    runs = [r for r in read_jsonl(out_dir / "results.jsonl") if r.get("kind") == "run"]
    assert [(r["env"]["world_size"], r["experiment"]["repeat"]) for r in runs] == [
        (1, 0), (2, 0), (1, 1), (2, 1)]
    assert all(r["status"] == "ok" and r["experiment"]["kind"] == "scale" for r in runs)
    assert {r["config"]["dist"]["strategy"] for r in runs} == {"ddp"}
    sps = {(r["env"]["world_size"], r["experiment"]["repeat"]): r["metrics"]["samples_per_s"]
           for r in runs}
    iv = ratio_interval([sps[1, 0], sps[1, 1]], [sps[2, 0], sps[2, 1]],
                        *[[r["metrics"]["step_time_s"]["rel_ci"] for r in runs
                           if r["env"]["world_size"] == n] for n in (1, 2)])
    table = (out_dir / "scale.md").read_text()
    assert "| Processes | Samples/s | Speedup | Efficiency |" in table
    if plausible_speedup(iv.estimate, 2):
        assert f"2 processes: {iv.text()} (efficiency {iv.estimate / 2:.0%}" in table
    else:  # re-measured once: a third repeat of both counts
        assert len(runs) == 4 and "implausible" in p.stderr
    assert runs[1]["batch"]["global"] == 64  # --batch-size is per device: weak scaling
    assert f"{iv.estimate:.2f}x" in p.stdout

    again = cli(*argv)
    assert again.returncode == 0, again.stderr[-2000:]
    assert len([r for r in read_jsonl(out_dir / "results.jsonl") if r.get("kind") == "run"]) == 4


@pytest.mark.parametrize("argv, message", [
    (["--nproc", "1,two"], "--nproc takes process counts"),
    (["--nproc", "2,2"], "repeats a count"),
    (["--strategy", "single"], "use ddp, ps or localsgd"),
    (["--strategy", "ps", "--nproc", "1,2"], "needs a server and a worker"),
])
def test_scale_input_errors_are_one_line(cli, out_dir, argv, message):
    p = cli("scale", *argv, "--out", out_dir)
    assert p.returncode == 2
    assert message in p.stderr and "Traceback" not in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
