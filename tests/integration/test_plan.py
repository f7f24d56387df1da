"""`scaleprobe plan` on a real one-rank run of the smallest model: the tables in 80 columns,
and --verify running the pick and its runner-up here, each beside its prediction."""

import json

import pytest

from scaleprobe.core.results import read_jsonl
from tests.conftest import run_cli

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]
COMMON = ["--model", "linear", "--image-size", 8, "--loader", "naive", "--no-progress",
          "--set", "dist.threads_per_rank=1", "--set", "dist.calibrate_comm=false"]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """One DDP run on one process (its buckets and memory facts): the plan's --from."""
    out = tmp_path_factory.mktemp("plan") / "src"
    p = run_cli("run", "--strategy", "ddp", "--nproc", 1, "--batch-size", 16, "--steps", 6,
                "--warmup-steps", 1, *COMMON, "--out", out, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return out


def test_plan_prints_what_fits_and_the_picks_in_80_columns(source):
    p = run_cli("plan", "--from", source, "--nproc", "1,2,4", "--strategy", "ddp,fsdp",
                "--batch-size", "16,64", "--device-memory", "8GiB", env={"COLUMNS": "80"},
                timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = p.stdout.splitlines()
    assert max(len(x) for x in lines) <= 80, max(lines, key=len)
    assert "what fits: predicted step" in p.stdout and "device-" in p.stdout
    assert "fastest that fits:" in p.stdout and "cheapest that fits:" in p.stdout
    assert "64*" in p.stdout  # a batch not measured is marked as scaled
    # planned on the CPU for a device named by its memory: the steps are the CPU's
    assert "this CPU's, not the GPU's" in " ".join(p.stdout.split())


def test_verify_runs_the_pick_and_the_runner_up_beside_their_predictions(source, tmp_path):
    out = tmp_path / "verify"
    p = run_cli("plan", "--from", source, "--nproc", "1,2", "--strategy", "ddp",
                "--batch-size", 16, "--device-memory", "8GiB", "--verify", "--verify-steps", 3,
                "--link", "10gbit", "--out", out, "--json", timeout=500)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout)
    v = got["verified"]
    # the pick and the runner-up, in either order: which is faster here depends on how a
    # 1 ms step compares with the link's costs on this host
    by = {x["devices"]: x for x in v}
    assert sorted(by) == [1, 2] and {x["batch_per_device"] for x in v} == {16}
    for x in v:
        assert x["status"] == "ok" and x["measured_s"] > 0
        assert x["ratio"] == pytest.approx(x["predicted_here"]["value"] / x["measured_s"])
        assert x["ratio_plan"] == pytest.approx(x["predicted_plan"]["value"] / x["measured_s"])
        assert x["timed_steps"] == 3  # as given
    # planned for 10gbit, run here on one host: both predictions beside the measured step are
    # re-made for the link its ranks cross here, like for like
    assert by[2]["plan_link"] == "10gbit"
    assert by[2]["predicted_plan"]["link"] == by[2]["predicted_here"]["link"] == "loopback"
    # the pick's measured samples/s over the runner-up's: one run each decides nothing
    pair = v[0]["pair"]
    assert pair["repeats"] == [1, 1] and pair["verdict"].startswith("inconclusive (1 repeat)")
    runs = [r for r in read_jsonl(out / "results.jsonl") if r.get("kind") == "run"]
    names = [r.get("name") for r in runs]
    # the copies made at once open their timed windows together (one gate, in their ranks)
    starts = [r["metrics"]["window_clock"][0] for r in runs if r["name"].endswith("of2")]
    assert len(starts) == 2 and abs(starts[0] - starts[1]) < 0.05, starts
    # the 2-rank row after two one-rank runs made at once (each records itself as it ends,
    # in either order); the 1-rank row is its own
    two = names.index("plan-ddp-2x16")
    assert sorted(names[two - 2:two]) == ["plan-ddp-1x16-1of2", "plan-ddp-1x16-2of2"]
    assert names.count("plan-ddp-1x16") == 1 and len(names) == 4
    assert (by[2]["one_rank_side_by_side"], by[1]["one_rank_side_by_side"]) == (2, 1)
