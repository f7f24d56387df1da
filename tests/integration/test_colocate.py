"""A tiny real co-location: two jobs alone, then together."""

import pytest

from scaleprobe.results import read_jsonl

from ..conftest import ROOT

pytestmark = pytest.mark.timeout(240)


def test_two_jobs_alone_then_together(cli, out_dir):
    p = cli("colocate", ROOT / "examples" / "colocate_quick.toml", "--out", out_dir)
    assert p.returncode == 0, p.stderr[-2000:]
    recs = read_jsonl(out_dir / "results.jsonl")
    runs = [r for r in recs if r["kind"] == "run"]
    points = [(r["experiment"]["point"]["job"], r["experiment"]["point"]["phase"]) for r in runs]
    assert points[:2] == [("cnn-b32", "alone"), ("linear-b64", "alone")]  # one after the other
    assert sorted(points[2:]) == [("cnn-b32", "together"), ("linear-b64", "together")]
    assert all(r["status"] == "ok" and r["experiment"]["kind"] == "colocate" for r in runs)
    (co,) = [r for r in recs if r["kind"] == "colocate"]
    assert co["schema"] == 1 and co["placement"] == "shared"
    assert co["experiment"] == {"id": "quick", "kind": "colocate"}
    for job in co["jobs"]:
        assert job["alone_samples_per_s"] > 0 and job["together_samples_per_s"] > 0
        assert job["slowdown"] == pytest.approx(
            job["alone_samples_per_s"] / job["together_samples_per_s"])
    assert co["total_samples_per_s_together"] > 0 and 0 < co["cpu_util_pct_together"] <= 100
    assert co["gpu_util_pct_together"] is None
    assert co["verdict"] in ("no interference", "CPU saturated",
                             "interference without saturation")
    assert co["evidence"] and co["overlap_s"] > 0
    assert f"**verdict: {co['verdict']}**" in p.stdout
    assert (out_dir / "colocate.md").read_text() in p.stdout


def test_pinned_jobs_each_get_their_own_cores(cli, out_dir):
    import os

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip(f"pinning two jobs needs 2 CPUs, this process may use {len(cpus)}")
    p = cli("colocate", ROOT / "examples" / "colocate_quick.toml", "--placement", "pinned",
            "--out", out_dir)
    assert p.returncode == 0, p.stderr[-2000:]
    recs = read_jsonl(out_dir / "results.jsonl")
    (co,) = [r for r in recs if r["kind"] == "colocate"]
    assert co["placement"] == "pinned"
    together = [r for r in recs if r["kind"] == "run"
                and r["experiment"]["point"]["phase"] == "together"]
    # each job's process saw only its share of the cores, and sized its threads to it
    share = len(cpus) // 2
    assert [r["env"]["threads"] for r in together] == [share, share]
    assert [r["env"]["cores"] for r in together] == [share, share]
