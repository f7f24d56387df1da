"""`scaleprobe scale`: the same run on 1 and 2 processes, speedup measured from both."""

import psutil
import pytest

from scaleprobe.core.metrics import plausible_speedup, ratio_interval
from scaleprobe.core.results import read_jsonl

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
    order = [(r["env"]["world_size"], r["experiment"]["repeat"]) for r in runs]
    assert order[:4] == [(1, 0), (2, 0), (1, 1), (2, 1)]  # interleaved, one process each
    if len(runs) > 4:  # the speedup came out implausible: both counts measured once more
        assert order[4:] == [(1, 2), (2, 2)] and "implausible speedup" in p.stderr
    assert all(r["status"] == "ok" and r["experiment"]["kind"] == "scale" for r in runs)
    assert {r["config"]["dist"]["strategy"] for r in runs} == {"ddp"}
    # like for like: the 1-process baseline runs the threads of each of the 2 ranks (cores /
    # 2), not an OpenMP team of every core beside ranks of one thread each
    threads = {r["env"]["threads"] for r in runs}
    assert threads == {max(1, len(psutil.Process().cpu_affinity()) // 2)}, threads
    assert {r["config"]["dist"]["threads_per_rank"] for r in runs} == threads
    sps = {key: r["metrics"]["samples_per_s"] for key, r in zip(order, runs, strict=True)}
    reps = sorted({k for _, k in order})
    iv = ratio_interval([sps[1, k] for k in reps], [sps[2, k] for k in reps],
                        *[[r["metrics"]["step_time_s"]["rel_ci"] for r in runs
                           if r["env"]["world_size"] == n] for n in (1, 2)])
    table = (out_dir / "scale.md").read_text()
    assert ("| Processes | Threads/rank | Samples/s | Speedup | Paired speedup | Paired "
            "efficiency |") in table
    t = threads.pop()
    if plausible_speedup(iv.estimate, 2):
        # the claim's words, written out here (docs/VERDICTS.md): the figure, then the rule
        est = f"{iv.estimate:.2f}x"
        fig = (f"{est} (spread too large, {iv.repeats_text})" if iv.too_wide() else
               f"{est} [{iv.lo:.2f}, {iv.hi:.2f}], {iv.repeats_text}")
        verdict = ("faster than 1 process" if iv.lo > 1 else "slower than 1 process"
                   if iv.hi < 1 else "not resolved (the interval includes 1x)")
        line = f"2 processes x {t} thread{'s' if t != 1 else ''}: {fig}: {verdict}"
        assert line in table, table
        # an interval too wide to read shows no efficiency beside it (report/tables/scale.py)
        assert iv.too_wide() or f"; efficiency {iv.estimate / 2:.0%}" in table
    else:  # still implausible after the second look: marked, not a verdict
        assert "is implausible" in table and "left out of every verdict" in table
    assert runs[1]["batch"]["global"] == 64  # --batch-size is per device: weak scaling
    assert f"{iv.estimate:.2f}x" in p.stdout

    again = cli(*argv)
    assert again.returncode == 0, again.stderr[-2000:]
    assert len([r for r in read_jsonl(out_dir / "results.jsonl")
                if r.get("kind") == "run"]) == len(runs)  # resumed: nothing ran again


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
