"""From the ranks' raw records to a run's metrics (assemble.py), with hand-made records: no
process is started and no torch is needed."""

from typing import Any

import pytest

from scaleprobe.config import runconfig as C
from scaleprobe.core import results as res
from scaleprobe.core.rank_record import RankRecord
from scaleprobe.core.result_model import RunResult
from scaleprobe.run.assemble import build_result

MIB = 1 << 20
PHASES = ("data", "h2d", "forward", "backward", "optimizer", "comm")


def raw(rank: int, step_s: float | None = 0.1, *, batch: int = 4, steps: int = 10,
        indices: list[list[int]] | None = None, peak: int = 900 * MIB,
        baseline: int | None = 750 * MIB, file_growth: int | None = None) -> dict[str, Any]:
    """One rank's raw record (rankrecord.rank_record); ``step_s=None`` is a rank that took no
    batch (a parameter server)."""
    times = [step_s] * steps if step_s else []
    return {
        "rank": rank, "is_server": not step_s, "host": "h", "device": "cpu", "threads": 1,
        "steps_done": len(times), "steps_timed": len(times), "step_times_s": times,
        "phase_times_s": {p: [step_s / len(PHASES)] * len(times) if step_s else []
                          for p in PHASES},
        "window_s": sum(times) or None, "clock_window": (None, None),
        "epochs_complete": 0, "epoch_wall_s": [], "samples_per_step": batch, "towers": 1,
        "indices": indices if indices is not None else ([] if not step_s else [[]]),
        "loss_first": 1.0, "loss_last": 0.5, "loss_finite": True, "bad_samples": 0,
        "comm": None, "eval": {},
        "mem": {"host_peak_rss": peak, "host_baseline_rss": baseline,
                "host_file_growth": file_growth,
                "device_allocated": None, "device_reserved": None},
        "info": {"num_classes": 10, "image_size": 8, "dataset_source": "generated",
                 "train_samples": 64, "param_count": 100, "per_process_batch": batch,
                 "lr_effective": 0.1},
        "strategy_metrics": {},
    }


def assemble(raws: list[dict[str, Any]], mon: dict[str, Any] | None = None,
             **overrides: Any) -> dict[str, Any]:
    cfg = C.build({"link": "1gbit", **overrides})
    rec = RunResult.from_dict(res.new_run_record(cfg.to_dict(), "r", "r", cfg.key()))
    rec.status = "ok"
    ranks = [RankRecord.from_dict(r) for r in raws]
    return build_result(rec, cfg, ranks, mon or {}, None).to_dict()



def test_host_peak_net_of_the_baseline_read_before_the_model():
    """Bug: host memory was total RSS only, torch's ~750 MiB included, so a doubled batch
    showed +2-5% growth. The net figure is the peak less the ranks' baselines."""
    rec = assemble([raw(0, peak=900 * MIB, baseline=750 * MIB),
                    raw(1, peak=880 * MIB, baseline=740 * MIB)],
                   strategy="ddp", nproc=2)
    mem = rec["metrics"]["peak_mem_bytes"]
    assert mem["host"] == 1780 * MIB and mem["host_baseline"] == 1490 * MIB
    assert mem["host_net"] == 290 * MIB
    assert 0 < mem["host_net"] < mem["host"]


def test_library_code_first_touched_after_the_baseline_is_not_net_memory():
    """The file-backed pages each rank touched after its baseline (library code) are summed
    and left out of the net figure: a process forked from one that had imported torch
    touches more of them while training than a fresh interpreter, and counting them made its
    memory growth with the batch look half as large."""
    rec = assemble([raw(0, peak=900 * MIB, baseline=750 * MIB, file_growth=40 * MIB),
                    raw(1, peak=880 * MIB, baseline=740 * MIB, file_growth=50 * MIB)],
                   strategy="ddp", nproc=2)
    mem = rec["metrics"]["peak_mem_bytes"]
    assert mem["host_file_growth"] == 90 * MIB
    assert mem["host_net"] == 200 * MIB
    assert "peak_mem_bytes.host_file_growth" not in rec["null_reasons"]
    # one rank without the reading (not Linux): no correction, and the reason is said
    rec = assemble([raw(0, peak=900 * MIB, baseline=750 * MIB, file_growth=40 * MIB),
                    raw(1, peak=880 * MIB, baseline=740 * MIB)], strategy="ddp", nproc=2)
    mem = rec["metrics"]["peak_mem_bytes"]
    assert mem["host_file_growth"] is None and mem["host_net"] == 290 * MIB
    assert "RssFile" in rec["null_reasons"]["peak_mem_bytes.host_file_growth"]


def test_the_sampled_tree_peak_counts_in_host_but_not_in_the_net():
    """Bug: a monitor sample that caught library pages the kernel later took back (memory
    pressure) raised the host peak above the rank's own, and the net figure took the
    difference for the run's memory (136 MiB net for a run whose own peak grew 26 MiB)."""
    rec = assemble([raw(0, peak=711 * MIB, baseline=685 * MIB, file_growth=10 * MIB)],
                   mon={"host_mem_peak_bytes": 835 * MIB})
    mem = rec["metrics"]["peak_mem_bytes"]
    assert mem["host"] == 835 * MIB  # the tree's peak (loader workers too) stays the total
    assert mem["host_net"] == 16 * MIB


def test_host_net_null_with_a_reason_without_a_baseline():
    rec = assemble([raw(0, baseline=None)])
    mem = rec["metrics"]["peak_mem_bytes"]
    assert mem["host"] == 900 * MIB
    assert mem["host_baseline"] is None and mem["host_net"] is None
    assert rec["null_reasons"]["peak_mem_bytes.host_net"]
    assert rec["null_reasons"]["peak_mem_bytes.host_baseline"]


def test_ps_audit_over_the_workers_catches_a_shared_shard():
    """Bug: the shard audit ran for ddp and localsgd only, so two ps workers reading the same
    shard went unnoticed. It runs over the workers; the server reads no sample."""
    same = [[0, 1, 2, 3, 4, 5, 6, 7]]
    rec = assemble([raw(0, None), raw(1, indices=same), raw(2, indices=same)],
                   strategy="ps", nproc=3)
    a = rec["audit"]
    assert a["world_size"] == 2  # the two workers
    assert a["ok"] is False and a["duplicate_samples"] == 8
    rec = assemble([raw(0, None), raw(1, indices=[[0, 1, 2, 3]]), raw(2, indices=[[4, 5, 6, 7]])],
                   strategy="ps", nproc=3)
    assert rec["audit"]["ok"] is True and rec["audit"]["world_size"] == 2


def test_ps_async_headline_says_it_sums_the_workers_rates():
    """Bug: ps async's samples/s summed the workers' rates (10 + 20 = 30) and sat silently
    beside one worker's step median (400 ms: 4 / 0.4 = 10). The per-worker rates are kept
    beside the sum, and the summary and the report say what the figure adds up."""
    import io

    from rich.console import Console

    from scaleprobe.commands.run_summary import print_run
    from scaleprobe.report.render.sections_runs import rate_notes

    rec = assemble([raw(0, None), raw(1, 0.4), raw(2, 0.2)], strategy="ps", ps_mode="async",
                   nproc=3)
    rec["status"], rec["paths"] = "ok", {"dir": "d"}
    m = rec["metrics"]
    assert m["samples_per_s"] == pytest.approx(30.0)
    assert m["samples_per_s_by_rank"] == pytest.approx({"1": 10.0, "2": 20.0})
    assert m["step_time_rank"] == 1 and m["step_time_s"]["median"] == 0.4
    text = "sum of 2 workers' rates (10.0, 20.0); step times are rank 1's"
    assert RunResult.from_dict(rec).rate_definition() == text
    assert rate_notes([RunResult.from_dict(rec)]) == [f"Samples/s of r: {text}"]
    out = io.StringIO()
    print_run(RunResult.from_dict(rec), Console(file=out, width=200))
    assert f"samples/s: {text}" in out.getvalue()
    single = assemble([raw(0, 0.1)])
    assert single["metrics"]["samples_per_s_by_rank"] == pytest.approx({"0": 40.0})
    assert RunResult.from_dict(single).rate_definition() is None  # one rank: nothing to sum


def test_breakdown_labels_say_ms_of_the_median_step():
    """Bug: the breakdown was labelled "(mean)" / "Mean seconds per phase" while it holds each
    phase's share laid over the median step, in ms."""
    import io

    from rich.console import Console

    from scaleprobe.commands.run_summary import print_run
    from scaleprobe.report.render.sections_runs import breakdown_section

    rec = assemble([raw(0, 0.1)])
    rec["status"], rec["paths"] = "ok", {"dir": "d"}
    out = io.StringIO()
    print_run(RunResult.from_dict(rec), Console(file=out, width=200))
    assert "step breakdown (each phase of the median step): data 16.7 ms" in out.getvalue()
    assert "(mean)" not in out.getvalue()
    intro = breakdown_section([RunResult.from_dict(rec)]).blocks[0].text
    assert intro.startswith("Time per phase of the median step")
    assert "Mean seconds" not in intro


def test_a_token_task_records_tokens_per_s_beside_samples_per_s():
    """tokens/s = samples/s x tokens per sample, from the rank's data; images have none."""
    r = raw(0, 0.1, batch=8)
    r["info"].update(tokens_per_sample=128, seq_len=128, vocab_size=256,
                     unigram_entropy_nats=3.2, image_size=None,
                     model_shape={"layers": 4, "width": 128, "heads": 4, "context": 128})
    rec = assemble([r], task="lm", dataset="tokens-synthetic")
    m = rec["metrics"]
    assert m["samples_per_s"] == pytest.approx(80.0)
    assert m["tokens_per_s"] == pytest.approx(80.0 * 128)
    assert rec["batch"]["tokens_per_sample"] == 128 and m["unigram_entropy_nats"] == 3.2
    assert rec["resolved"]["data.seq_len"] == 128 and rec["resolved"]["model.layers"] == 4
    img = assemble([raw(0, 0.1)])
    assert img["metrics"]["tokens_per_s"] is None and "tokens_per_sample" not in img["batch"]
    assert "tokens_per_s" not in img["null_reasons"]


def test_a_failed_shard_audit_is_the_runs_status_and_exit_code():
    """Both ranks read the same samples: status audit_failed (exit 5), the audit's line as
    the error. Bug caught: a run whose ranks all read the whole dataset recorded ok, exit
    0, its samples/s a headline."""
    from scaleprobe.run.failure import exit_code

    same = [list(range(0, 64, 1))[:40]]
    rec = assemble([raw(0, indices=same), raw(1, indices=same)], strategy="ddp", nproc=2)
    assert rec["audit"]["ok"] is False
    assert rec["status"] == "audit_failed" and exit_code(rec["status"]) == 5
    assert rec["error"] == f"shard audit failed: {rec['audit']['detail']}"
    apart = assemble([raw(0, indices=[list(range(0, 32))]), raw(1, indices=[list(range(32, 64))])],
                     strategy="ddp", nproc=2)
    assert apart["status"] == "ok" and apart["audit"]["ok"] is True


def test_ranks_that_never_communicated_get_no_network_model():
    """wrap, 2 ranks of a script without a process group or a DDP model."""
    quiet = [{**raw(r), "communicates": False} for r in (0, 1)]
    rec = assemble(quiet, strategy="ddp", nproc=2)
    assert rec["comm"] is None and "never communicated" in rec["null_reasons"]["comm"]
    talking = assemble([raw(0), raw(1)], strategy="ddp", nproc=2)
    assert talking["comm"]["prediction"] is not None


def test_a_rank_read_from_its_step_log_leaves_the_audit_unrun_with_why():
    logged = {**raw(1), "indices": []}  # measure/steplog.py: its indices were not logged
    rec = assemble([raw(0, indices=[list(range(32))]), logged], strategy="ddp", nproc=2)
    assert rec["audit"] is None and "lost" in rec["null_reasons"]["audit"]


def test_energy_per_sample_and_token_from_the_windows_draw():
    """Joules per sample = the GPUs' mean draw / samples per second (40 samples/s at 200 W:
    5 J); per token divides by the tokens of a sample; without a GPU: null with the reason."""
    r = raw(0, 0.1, batch=4)  # 40 samples/s
    r["info"].update(tokens_per_sample=64, seq_len=64, vocab_size=256, image_size=None,
                     model_shape={"layers": 2, "width": 32, "heads": 2, "context": 64})
    mon = {"gpu_energy_w": 200.0, "gpu_energy_method": "NVML energy counter"}
    m = assemble([r], mon, task="lm", dataset="tokens-synthetic")["metrics"]
    assert m["joules_per_sample"] == pytest.approx(5.0)
    assert m["joules_per_token"] == pytest.approx(5.0 / 64)
    assert m["energy_method"] == "NVML energy counter"
    cpu = assemble([raw(0, 0.1)], {"gpu_reason": "no NVIDIA driver (NVML not found)"})
    assert cpu["metrics"]["joules_per_sample"] is None
    assert cpu["null_reasons"]["joules_per_sample"] == "no NVIDIA driver (NVML not found)"


def test_the_monitor_takes_the_energy_counter_over_the_window_else_sampled_power():
    from scaleprobe.measure.monitor import energy_rate

    rows = [{"t_s": 1.0, "gpu_energy_mj": 10_000}, {"t_s": 3.0, "gpu_energy_mj": 610_000},
            {"t_s": 2.0, "gpu_energy_mj": None}]
    rows = sorted(rows, key=lambda x: x["t_s"])
    got = energy_rate([r for r in rows if r["gpu_energy_mj"] is not None], 250.0)
    assert got == {"gpu_energy_w": pytest.approx(300.0), "gpu_energy_method": "NVML energy counter"}
    assert energy_rate([{"t_s": 1.0, "gpu_energy_mj": None}], 250.0)["gpu_energy_method"] == \
        "sampled power (NVML)"
    assert energy_rate([], None)["gpu_energy_w"] is None


def test_a_target_run_never_says_add_eval_after_evaluating():
    """--target evaluates on its schedule: without a final evaluation the reason points at
    its curve, not at --eval; a run with neither says add --eval."""
    rec = assemble([raw(0)], target="accuracy=0.9")
    assert "add --eval" not in rec["null_reasons"]["accuracy"]
    assert "target.curve" in rec["null_reasons"]["accuracy"]
    assert assemble([raw(0)])["null_reasons"]["accuracy"] == "not evaluated (add --eval)"


def test_energy_per_sample_is_the_windows_draw_over_the_windows_rate():
    """Steps of unequal length: nine of 0.1 s and one of 1.0 s, 4 samples each. The window
    holds 40 samples in 1.9 s (21.05 samples/s), the median step's rate is 40 samples/s; at
    200 W a sample costs 200 / (40 / 1.9) = 9.5 J. Catches the energy taken from the median
    step's rate (5.0 J): the draw is the window's, so the rate must be too."""
    r = raw(0, 0.1, batch=4)
    r["step_times_s"] = [0.1] * 9 + [1.0]
    r["phase_times_s"] = {p: [t / len(PHASES) for t in r["step_times_s"]] for p in PHASES}
    r["window_s"] = 1.9
    m = assemble([r], {"gpu_energy_w": 200.0, "gpu_energy_method": "NVML energy counter"}
                 )["metrics"]
    assert m["samples_per_s"] == pytest.approx(40 / 1.9)
    assert m["samples_per_s_median_step"] == pytest.approx(40.0)
    assert m["joules_per_sample"] == pytest.approx(9.5)


def _one_process_ddp(sync: list[float], no_sync: list[float]) -> dict[str, Any]:
    r = raw(0, 0.3)
    s, n = sorted(sync[1:]), sorted(no_sync[1:])
    r["comm"] = {"sync_step_s": s[len(s) // 2], "no_sync_step_s": n[len(n) // 2],
                 "sync_cost_s": max(0.0, s[len(s) // 2] - n[len(n) // 2]), "exposed_s": 0.0,
                 "wrapper_overhead_s": max(0.0, s[len(s) // 2] - n[len(n) // 2]),
                 "samples": {"sync": sync, "no_sync": no_sync}, "method": "calibration"}
    return assemble([r], **{"dist.strategy": "ddp"})


def _comm_text(rec: dict[str, Any]) -> str:
    from rich.console import Console

    from scaleprobe.commands.run_summary import _comm_line

    con = Console(record=True, width=400)
    _comm_line(con, RunResult.from_dict(rec))
    return con.export_text()


def test_one_process_wrapper_overhead_only_with_an_interval_clear_of_zero():
    """Bug caught: one-process DDP printed "wrapper overhead 107.6 ms per step" (34% of
    the step, no interval) from sync-minus-no_sync noise. The paired differences here (first
    pair dropped) are +0.10, -0.10, +0.10, -0.10, +0.10, -0.09, +0.12 s: median 0.10 s, the
    interval of 7 runs from the least to the largest, -0.10 to +0.12 s, so 0 lies inside:
    "not resolved", and no 100.0 ms figure on its own."""
    noisy = _one_process_ddp([0.5, 0.20, 0.21, 0.19, 0.22, 0.20, 0.21, 0.23],
                             [0.4, 0.10, 0.31, 0.09, 0.32, 0.10, 0.30, 0.11])
    fig = noisy["comm"]["wrapper_overhead"]  # extra fields sit beside the known ones
    assert fig["difference_s"] == pytest.approx(0.10) and fig["pairs"] == 7
    assert fig["interval_s"][0] < 0 < fig["interval_s"][1]
    line = _comm_text(noisy)
    assert "communication: none (world size 1)" in line
    assert "wrapper overhead: not resolved (the interval includes 0: 100.0 ms [" in line
    assert "wrapper overhead 100.0 ms per step" not in line
    # every pair 10 ms apart (+/- 1 ms): the interval lies above 0, the figure is shown
    clear = _one_process_ddp([0.5, 0.110, 0.111, 0.109, 0.110, 0.112, 0.110, 0.111],
                             [0.4, 0.100, 0.100, 0.100, 0.100, 0.100, 0.100, 0.100])
    line = _comm_text(clear)
    assert "wrapper overhead 10.0 ms [9.0 ms, 12.0 ms] over 7 pairs per step" in line, line


def test_flops_per_s_from_the_median_step_when_no_samples_were_counted():
    """A wrapped script without a DataLoader: 38 steps timed, FLOPs counted, no samples.
    Bug caught: `FLOPs: 256 FLOP per step, n/a achieved; MFU: no step was timed`. Now the
    achieved rate is the step's FLOPs over the median step, and MFU follows from it."""
    r = raw(0, 0.025, batch=0, steps=38)
    r["flops"] = {"flops_per_step": 256.0, "peak": {"flops_per_s": 1e9, "source": "measured"}}
    m = assemble([r])["metrics"]
    assert m["samples_per_s"] is None
    assert m["achieved_flops_per_s"] == pytest.approx(256 / 0.025)
    assert m["mfu"] == pytest.approx(256 / 0.025 / 1e9)
    # with samples, the rate is still per sample x samples/s (the same figure in lockstep)
    r = raw(0, 0.025, batch=8, steps=38)
    r["flops"] = {"flops_per_step": 256.0}
    assert assemble([r])["metrics"]["achieved_flops_per_s"] == pytest.approx(256 / 0.025)


def test_an_mfu_above_the_whole_is_null_with_the_figures_that_show_why():
    """Bug caught: bf16 on a CPU without bf16 instructions, its matrix products measured at
    1.31 GFLOP/s while the digits CNN's bf16 convolutions reached 3.94: "MFU 301% of 1.31
    GFLOP/s bf16". A share above 100% says the peak is not the device's: no MFU, and why."""
    r = raw(0, 0.025, batch=0, steps=38)
    r["flops"] = {"flops_per_step": 1e8, "peak": {"flops_per_s": 1.31e9, "dtype": "bf16",
                                                   "source": "measured peak: best of 3"}}
    out = assemble([r])
    assert out["metrics"]["achieved_flops_per_s"] == pytest.approx(4e9)
    assert out["metrics"]["mfu"] is None
    why = out["null_reasons"]["mfu"]
    assert why.startswith("not shown: the run's 4 GFLOP/s exceed the 1.31 GFLOP/s of its "
                          "bf16 peak (305%)"), why
    assert "measured peak: best of 3" in why
    # at the peak or under it, the share is shown
    r["flops"]["peak"]["flops_per_s"] = 8e9
    assert assemble([r])["metrics"]["mfu"] == pytest.approx(0.5)


def test_gloo_socket_cpu_per_step_is_the_most_of_any_training_rank():
    """Each rank's socket threads' CPU over its window / its timed steps; a server's does not
    count; no rank with a gloo group (one process, NCCL): null."""
    server = {**raw(0, step_s=None), "gloo_io_cpu_s": 9.0}
    rec = assemble([server, {**raw(1, steps=10), "gloo_io_cpu_s": 0.012},
                    {**raw(2, steps=10), "gloo_io_cpu_s": 0.05}], strategy="ps", nproc=3)
    assert rec["metrics"]["gloo_io_cpu_per_step_s"] == pytest.approx(0.005)
    assert assemble([raw(0)])["metrics"]["gloo_io_cpu_per_step_s"] is None


def test_page_faults_per_step_is_the_most_of_any_training_rank():
    """Faults over each rank's window / its timed steps; the server's do not count (it takes
    no batch); without a count (a script's ranks) null, with the reason."""
    server = {**raw(0, step_s=None), "page_faults": 90_000}
    rec = assemble([server, {**raw(1, steps=10), "page_faults": 12_000},
                    {**raw(2, steps=10), "page_faults": 30_010}], strategy="ps", nproc=3)
    assert rec["metrics"]["page_faults_per_step"] == 3001.0
    rec = assemble([raw(0)])
    assert rec["metrics"]["page_faults_per_step"] is None
    assert "no timed step" in rec["null_reasons"]["page_faults_per_step"]
