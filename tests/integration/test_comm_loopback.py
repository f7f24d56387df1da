"""`scaleprobe comm` between 2 processes over loopback gloo: a valid record, a usable fit."""

import json

import pytest

from scaleprobe.cli import main
from scaleprobe.core.results import read_jsonl
from scaleprobe.features.links import link_from_comm
from scaleprobe.measure.comm.bench import DEFAULT_OPS
from tests.conftest import run_cli

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

SIZES = "64K,256K,1M,16M"  # the stored fit's sizes: 4 MiB is held out
HELD_OUT = 4 << 20
ITERS, WARMUP = 20, 3  # 5 iterations gave held-out ratios of 0.21-2.3; 20 give 0.39-1.36
ROW_KEYS = {"op", "size_bytes", "time_s", "algbw_gbyte_s", "busbw_gbyte_s", "iters"}


def _comm(out, *argv, env=None):
    proc = run_cli("comm", "--nproc", "2", "--iters", ITERS, "--warmup", WARMUP, *argv,
                   "--out", out, timeout=200, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = read_jsonl(out / "results.jsonl")
    assert len(recs) == 1
    return recs[0], proc.stdout


@pytest.fixture(scope="module")
def comm_record(tmp_path_factory):
    out = tmp_path_factory.mktemp("comm")
    tmp = tmp_path_factory.mktemp("comm-tmpdir")
    rec, stdout = _comm(out, "--sizes", SIZES, env={"TMPDIR": str(tmp)})
    return rec, stdout, out, tmp


def test_leaves_no_launcher_folders_behind(comm_record):
    """Bug caught: every `comm` (and every launch given no log folder) left a
    scaleprobe-logs-* folder of the launcher's per-rank folders in the system's temporary
    folder; the suite alone left a hundred a session."""
    *_, tmp = comm_record
    assert not [p.name for p in tmp.iterdir() if p.name.startswith("scaleprobe-logs-")]


def test_prints_tables_and_runs_the_iterations_asked(comm_record):
    """Bug caught: --iters or --warmup not reaching the workers (the record would say one
    thing and the rows another). The wall time of the command is not checked: on this shared
    2-core machine it is mostly process start-up (13-49 s measured), which says nothing about
    the benchmark."""
    rec, stdout, *_ = comm_record
    assert "busbw" in stdout and "alpha" in stdout and "ps_push_pull" in stdout
    assert rec["settings"] == {"sizes_bytes": [64 << 10, 256 << 10, 1 << 20, 16 << 20],
                               "iters": ITERS, "warmup": WARMUP, "gloo_io": "default"}
    assert {r["iters"] for r in rec["rows"]} == {ITERS}  # 16 MiB x 20 is under the byte budget


def test_record_schema(comm_record):
    rec, *_ = comm_record
    assert rec["kind"] == "comm" and rec["schema"] == 2
    assert rec["experiment"]["kind"] == "comm" and rec["experiment"]["id"]
    assert rec["backend"] == "gloo" and rec["world_size"] == 2
    assert rec["env"]["cores"] >= 1 and rec["env"]["torch"]
    assert len(rec["rows"]) == len(DEFAULT_OPS) * 4
    for row in rec["rows"]:
        assert ROW_KEYS <= set(row) and row["time_s"] > 0 and row["busbw_gbyte_s"] > 0
    # on the CPU the small sizes are timed a second way, right after a step's compute
    assert {r["size_bytes"] for r in rec["rows"] if "after_compute_s" in r} == {
        64 << 10, 256 << 10, 1 << 20}
    assert all(r["after_compute_s"] > 0 for r in rec["rows"] if "after_compute_s" in r)
    # every timed call is kept (the slowest rank's), and the row's time is their median
    for row in rec["rows"]:
        times = sorted(row["times_s"])
        assert len(times) == row["iters"] and row["time_s"] == pytest.approx(
            (times[len(times) // 2 - 1] + times[len(times) // 2]) / 2 if len(times) % 2 == 0
            else times[len(times) // 2])
        if "after_compute_s" in row:
            assert len(row["after_compute_times_s"]) == row["iters"]
    assert set(rec["fit"]) == set(DEFAULT_OPS)
    for fit in rec["fit"].values():
        assert {"alpha_s", "beta_s_per_byte", "bandwidth_gbit_s"} <= set(fit)
        assert fit["beta_s_per_byte"] > 0  # 16 MiB takes longer than 64 KiB
        assert fit["wake_s"] >= 0
    # what else used the machine while it measured: its two ranks are its own tree
    load = rec["load"]
    assert load["outside_cpu_cores"] is not None and load["outside_cpu_cores"] >= 0
    assert load["window_s"] > 0 and load["machine_cores"] >= 1
    json.dumps(rec)


def test_stored_fit_predicts_a_held_out_size(comm_record, tmp_path):
    """The all_reduce fit that `scaleprobe comm` stored (64 KiB-16 MiB) predicts a 4 MiB
    all_reduce measured by a second `scaleprobe comm` within a factor of 3.

    The margin: the two measurements come from different processes on a 2-core machine
    shared with other work, where loopback gloo's times move a lot between processes (the
    same 1 MiB all_reduce measured 2.6-4.4x apart in two invocations). Measured (2026-11-24,
    load average 4-12, 9 pairs at 20 iterations): predicted/measured 0.39-1.36, 0.59-1.36 but
    for one pair run beside another test. A factor of 3 either way holds that, and still
    catches a fit in the wrong unit (bits or KiB for bytes: 8x or 1024x), alpha and beta
    swapped, or a fit made from another operation's much slower rows (ps_push_pull at 2 ranks
    is measured near 2x all_reduce, so it is not told apart)."""
    rec, *_ = comm_record
    fit = rec["fit"]["all_reduce"]
    # with gloo's socket threads as dist.gloo_io=batch sets them (the record says so, and so
    # does a link made from it): at 4 MiB their stalls are a small part of the time
    held, _ = _comm(tmp_path, "--ops", "all_reduce", "--sizes", "1M,4M", "--gloo-io", "batch")
    assert held["settings"]["gloo_io"] == "batch"
    assert "SCHED_BATCH" in link_from_comm(held).name
    measured = next(r["time_s"] for r in held["rows"] if r["size_bytes"] == HELD_OUT)
    predicted = fit["alpha_s"] + fit["beta_s_per_byte"] * HELD_OUT
    ratio = predicted / measured
    print(f"4 MiB all_reduce: stored fit {predicted * 1e3:.2f} ms, measured "
          f"{measured * 1e3:.2f} ms, ratio {ratio:.2f}")
    assert 1 / 3 < ratio < 3, f"predicted/measured = {ratio:.2f}"


def test_predict_uses_the_measured_link(comm_record, capsys):
    _, _, out, _ = comm_record
    assert main(["predict", "--params", "11.7e6", "--nproc", "2", "--link", str(out),
                 "--compute-time", "0.3", "--json"]) == 0
    preds = json.loads(capsys.readouterr().out)["predictions"]
    ar = next(p for p in preds if p["strategy"] == "allreduce")
    assert ar["link"].startswith("measured") and 0 < ar["efficiency"] < 1
    assert ar["bandwidth_gbit_s"] > 0.5
