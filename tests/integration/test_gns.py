"""`--gns` on one process: each step as two half-batches, the noise scale in the record and
the summary; `--no-gns` and an odd batch. The run also turns the memory probe off."""

import json

import pytest

from scaleprobe.core.results import read_jsonl

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]


def test_one_process_gns_from_two_half_batches(cli, out_dir):
    p = cli("run", "--gns", "--model", "linear", "--image-size", "8", "--batch-size", 16,
            "--steps", 12, "--warmup-steps", 2, "--loader", "naive", "--out", out_dir,
            "--no-progress", "--no-memory-probe")
    assert p.returncode == 0, p.stderr[-2000:]
    rec = read_jsonl(out_dir / "results.jsonl")[0]
    # no memory probe after the window: its facts null, with the reason
    assert rec["metrics"].get("memory_facts") is None
    assert rec["null_reasons"]["memory_facts"].startswith("not probed: --no-memory-probe")
    g = rec["gns"]
    assert (g["method"], g["b_small"], g["b_big"], g["steps"]) == ("micro_batches", 8, 16, 12)
    assert g["trace_sigma"] > 0
    assert "gradient noise scale B_simple" in p.stdout or "gradient noise scale:" in p.stdout
    # the step's phases still add up: two forwards and two backwards counted once each
    bd = rec["metrics"]["breakdown_s"]
    assert bd["forward"] > 0 and bd["backward"] > 0
    cfg = json.loads(next(out_dir.glob("*/config.json")).read_text())
    assert cfg["measure"]["gns"] is True


def test_odd_batch_is_one_line_and_exit_2(cli, out_dir):
    p = cli("run", "--gns", "--batch-size", 7, "--out", out_dir)
    assert p.returncode == 2
    assert "even batch" in p.stderr and "Traceback" not in p.stderr
