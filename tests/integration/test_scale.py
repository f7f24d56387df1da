"""`scaleprobe scale`: the same run on 1 and 2 processes, speedup measured from both."""

import pytest

from scaleprobe.results import read_jsonl

pytestmark = pytest.mark.timeout(300)


def test_scale_measures_each_count_and_explains_the_gap(cli, out_dir):
    p = cli("scale", "--nproc", "1,2", "--steps", 8, "--warmup-steps", 2, "--loader", "naive",
            "--batch-size", 32, "--out", out_dir, "--no-progress")
    assert p.returncode == 0, p.stderr[-2000:]
    runs = [r for r in read_jsonl(out_dir / "results.jsonl") if r.get("kind") == "run"]
    assert sorted(r["env"]["world_size"] for r in runs) == [1, 2]
    assert all(r["status"] == "ok" and r["experiment"]["kind"] == "scale" for r in runs)
    assert {r["config"]["dist"]["strategy"] for r in runs} == {"ddp"}
    one, two = sorted(runs, key=lambda r: r["env"]["world_size"])
    speedup = two["metrics"]["samples_per_s"] / one["metrics"]["samples_per_s"]
    table = (out_dir / "scale.md").read_text()
    assert "| Processes | Samples/s | Speedup | Efficiency |" in table
    assert f"2 processes: {speedup:.2f}x ({speedup / 2:.0%})" in table
    assert two["batch"]["global"] == 64  # --batch-size is per device: weak scaling
    assert f"{speedup:.2f}x" in p.stdout

    again = cli("scale", "--nproc", "1,2", "--steps", 8, "--warmup-steps", 2, "--loader",
                "naive", "--batch-size", 32, "--out", out_dir, "--no-progress")
    assert again.returncode == 0, again.stderr[-2000:]
    assert len([r for r in read_jsonl(out_dir / "results.jsonl") if r.get("kind") == "run"]) == 2


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
