"""The run record and terminal summary of an fsdp run, from hand-made rank records:
communication from the step's own comm phase (never carved out of backward), its interval,
the calibration as a cross-check, and the state each rank holds."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from scaleprobe.commands.run_summary import print_run
from scaleprobe.core.result_model import RunResult
from tests.unit.run.test_assemble import MIB, assemble, raw

STEPS = 10


def _fsdp_rank(rank: int, comm_s: list[float], cross: dict | None = None) -> dict:
    r = raw(rank, 0.1, steps=STEPS)
    # each 100 ms step: forward 20, backward 30, the comm phase as given, the optimizer the rest
    r["phase_times_s"].update(forward=[0.02] * STEPS, backward=[0.03] * STEPS, comm=comm_s,
                              optimizer=[0.05 - c for c in comm_s], data=[0.0] * STEPS,
                              h2d=[0.0] * STEPS)
    r["comm"] = {"method": "in step", "in_step": True, "exposed_reason": None,
                 "cross_check": cross, "calls_per_step": {"all_gather": 7, "reduce_scatter": 4},
                 "units": 4, "sharding_rule": "blocks",
                 "transfer": {"op": "fsdp_step", "bytes": 3000, "times_s": [0.005],
                              "median_s": 0.005, "every": 1, "per_step_s": 0.005,
                              "method": "standalone"}}
    r["mem"].update(params_bytes=1000, grads_bytes=1000, optimizer_bytes=2040)
    return r


CROSS = {"sync_step_s": 0.1, "no_sync_step_s": 0.09, "difference_s": 0.004,
         "interval_s": [-0.002, 0.011], "resolved": False, "pairs": 7, "method": "cross-check"}


def _rec():
    comm = [0.010, 0.012, 0.011, 0.013, 0.009, 0.010, 0.012, 0.011, 0.010, 0.011]
    return assemble([_fsdp_rank(0, comm, CROSS), _fsdp_rank(1, comm)], strategy="fsdp",
                    nproc=2), comm


def test_the_comm_phase_is_the_steps_own_and_backward_keeps_its_time():
    """Bug caught: a calibration figure under exposed_s carved out of backward (the
    breakdown's backward is what backward measured, 30 ms here)."""
    rec, comm = _rec()
    bd, c = rec["metrics"]["breakdown_s"], rec["comm"]
    assert bd["backward"] == pytest.approx(0.03) and bd["forward"] == pytest.approx(0.02)
    assert bd["comm"] == pytest.approx(sum(comm) / len(comm))
    assert c["exposed_s"] == bd["comm"]
    per = c["exposed_per_step"]
    assert per["median_s"] == pytest.approx(0.011) and per["steps"] == STEPS
    assert per["resolved"] is True and 0.009 <= per["interval_s"][0] < per["interval_s"][1]
    assert c["cross_check"]["resolved"] is False  # kept beside, with its own interval


def test_the_state_each_rank_holds_and_the_summary_lines():
    rec, _ = _rec()
    sb = rec["metrics"]["state_bytes"]
    assert sb["total_bytes"] == 4040 and [r["rank"] for r in sb["by_rank"]] == [0, 1]
    assert sb["by_rank"][1]["host_peak_rss"] == 900 * MIB
    rec["status"], rec["paths"] = "ok", {"dir": "out/r"}
    out = io.StringIO()
    print_run(RunResult.from_dict(rec), Console(file=out, width=300))
    text = out.getvalue()
    assert ("state per rank, params + grads + optimizer: rank 0 1000 B + 1000 B + 2.0 KiB = "
            "3.9 KiB (peak RSS 900 MiB); rank 1 ") in text
    line = next(ln for ln in text.splitlines() if "measured in the step" in ln)
    assert "median 11.0 ms" in line and "over 10 steps" in line
    assert "7 all-gathers and 4 reduce-scatters per step" in line
    assert ("sync overhead: the rest, not the network (not split further: its parts are not "
            "measured apart; it may hold one collective per unit and its latency, buffer "
            "copies, waiting for the slowest rank)") in text
    assert "bucket copies" not in text  # FSDP has no buckets
    cross = next(ln for ln in text.splitlines() if "cross-check" in ln)
    assert "4.0 ms" in cross and "not resolved from noise" in cross


def test_the_comm_headline_is_the_in_step_median_with_its_interval():
    """Bug caught: "exposed 23.9 ms" (the breakdown's mean-share figure, no interval)
    stood above the in-step median of 11.4 ms. The headline is now the in-step median and
    its interval; the breakdown's figure follows, labelled; sync minus no_sync only as the
    labelled cross-check; sync overhead is not split into parts nobody measured."""
    rec, _ = _rec()
    c = rec["comm"]
    c["exposed_per_step"] = {"median_s": 0.0114, "interval_s": [0.0100, 0.0130], "steps": 40,
                             "resolved": True}
    c["exposed_s"], c["exposed_fraction"] = 0.0239, 0.26
    rec["status"], rec["paths"] = "ok", {"dir": "out/r"}
    out = io.StringIO()
    print_run(RunResult.from_dict(rec), Console(file=out, width=300))
    lines = out.getvalue().splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("communication:"))
    assert lines[i].startswith("communication: exposed, measured in the step: median 11.4 ms "
                               "[10.0 ms, 13.0 ms] over 40 steps per step")
    assert "23.9" not in lines[i]
    assert lines[i + 1].strip().startswith("in the breakdown (the typical steps laid over the "
                                           "median step): 23.9 ms (26% of the step)")
    cross = [ln for ln in lines if "sync minus no_sync" in ln]
    assert cross and all(ln.strip().startswith("cross-check") for ln in cross)
    assert not any("sync overhead: the rest (" in ln for ln in lines)
