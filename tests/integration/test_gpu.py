"""CUDA paths, on a host with a GPU (skipped elsewhere): NCCL DDP at world size 1, AMP with
CUDA events and NVML, device-resident synthetic data, FLOPs and MFU against the card's
data-sheet peak, and a real CUDA out-of-memory as a result, in a run and in a batch search.
benchmarks/gpu_paths.sh runs the same paths at full size and keeps their figures."""

import pytest

from scaleprobe.core.results import read_jsonl

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300),
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

R18 = ("--model", "resnet18", "--dataset", "synthetic", "--image-size", 64, "--batch-size", 64,
       "--steps", 10, "--warmup-steps", 2, "--no-progress")


def _last(out_dir):
    return read_jsonl(out_dir / "results.jsonl")[-1]


def test_nccl_ddp_and_amp_measure_on_the_device(cli, out_dir):
    p = cli("run", *R18, "--strategy", "ddp", "--nproc", 1, "--amp", "bf16", "--out", out_dir)
    assert p.returncode == 0, p.stderr[-2000:]
    rec = _last(out_dir)
    m = rec["metrics"]
    assert rec["status"] == "ok" and rec["env"]["gpus"]
    assert m["peak_mem_bytes"]["device_allocated"] > 0
    assert m["peak_mem_bytes"]["device_nvml"] >= m["peak_mem_bytes"]["device_reserved"]
    assert m["breakdown_s"]["forward"] > 0 and m["breakdown_s"]["backward"] > 0
    # energy from NVML over the timed window: a GPU draws tens of watts at least
    assert m["joules_per_sample"] is not None and m["joules_per_sample"] > 0
    assert m["energy_method"] in ("NVML energy counter", "sampled power (NVML)")


def test_cuda_out_of_memory_is_a_result(cli, out_dir):
    p = cli("run", "--model", "resnet50", "--dataset", "synthetic", "--image-size", 224,
            "--batch-size", 4096, "--num-samples", 8192, "--steps", 2, "--warmup-steps", 1,
            "--no-progress", "--out", out_dir)
    assert p.returncode == 3, p.stderr[-2000:]
    rec = _last(out_dir)
    assert rec["status"] == "oom" and "out of memory" in rec["error"]


def test_device_resident_synthetic_data_waits_for_nothing_on_the_gpu(cli, out_dir):
    """Catches synthetic batches made on the host and copied every step (on an H100 the old
    loader path waited 24.8 of 34.2 ms per step): the batch lives on the device already."""
    p = cli("run", *R18, "--out", out_dir)
    assert p.returncode == 0, p.stderr[-2000:]
    rec = _last(out_dir)
    m = rec["metrics"]
    assert rec["input_mode"] == "device-resident"
    assert m["data_wait_fraction"] < 0.01, m["breakdown_s"]
    assert m["breakdown_s"]["h2d"] < 0.01 * m["step_time_s"]["median"], m["breakdown_s"]


def test_mfu_on_a_known_card_is_against_its_data_sheet_peak(cli, out_dir):
    """Catches a known GPU given a measured (or fp32) peak under bf16, and an MFU off the
    achieved FLOP/s: the figure must come from the table for this card and dtype."""
    from scaleprobe.measure.peaks import table_peak

    p = cli("run", *R18, "--amp", "bf16", "--out", out_dir)
    assert p.returncode == 0, p.stderr[-2000:]
    m = _last(out_dir)["metrics"]
    name = torch.cuda.get_device_name(0)
    hit = table_peak(name, "bf16")
    if hit is None:
        assert m["peak"]["measured"] is True, m["peak"]  # a card the table lacks is measured
        pytest.skip(f"{name} is not in the peak table: its peak was measured")
    assert m["peak"]["measured"] is False and m["peak"]["dtype"] == "bf16"
    assert m["peak"]["flops_per_s"] == hit[0] and m["peak"]["source"].startswith("data sheet")
    assert m["mfu"] == pytest.approx(m["achieved_flops_per_s"] / hit[0])
    assert 0 < m["mfu"] < 1


def test_device_memory_three_ways(cli, out_dir):
    """Catches the allocator's figures swapped or read as 0 on a real device, and NVML's
    figure (which holds the CUDA context) below the allocator's reservation."""
    p = cli("run", *R18, "--out", out_dir)
    assert p.returncode == 0, p.stderr[-2000:]
    mem = _last(out_dir)["metrics"]["peak_mem_bytes"]
    assert 0 < mem["device_allocated"] <= mem["device_reserved"] <= mem["device_nvml"], mem


def test_batch_search_runs_to_a_real_out_of_memory(cli, tmp_path, out_dir):
    """Catches an out-of-memory probe recorded as failed (the search would stop without a
    limit), and a largest fit that is not the largest size that ran: resnet50 at 512 px
    doubles from 64 until the card runs out, then bisects."""
    spec = tmp_path / "oom.toml"
    spec.write_text('[sweep]\nid = "gpu-oom"\nbatch_start = 64\nbatch_max = 8192\n'
                    'batch_round = 64\nmax_probes = 8\n\n[base]\nmodel = "resnet50"\n'
                    'dataset = "synthetic"\nimage_size = 512\nnum_samples = 8192\n'
                    'steps = 2\nwarmup_steps = 1\n\n[grid]\nbatch_size = "auto"\n')
    p = cli("sweep", spec, "--out", out_dir, "--no-progress", timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    recs = read_jsonl(out_dir / "results.jsonl")
    (search,) = [r for r in recs if r["kind"] == "sweep"][-1]["searches"]
    probes = search["probes"]
    ok = [b for b, st in probes if st == "ok"]
    oom = [b for b, st in probes if st == "oom"]
    assert ok and oom and {st for _, st in probes} == {"ok", "oom"}, probes
    assert search["largest_fit"] == max(ok) < min(oom), search
    runs = [r for r in recs if r["kind"] == "run" and r["status"] == "oom"]
    assert runs and all("out of memory" in r["error"].lower() for r in runs)


def test_fsdp_bf16_on_one_gpu_shards_with_mixed_precision(cli, out_dir):
    """FSDP2 on CUDA (nccl, world size 1 on a one-GPU host): bf16 mixed precision
    (MixedPrecisionPolicy) through forward, backward and the evaluation, and the state the
    rank holds beside its device peak."""
    p = cli("run", *R18, "--strategy", "fsdp", "--nproc", 1, "--amp", "bf16", "--eval",
            "--out", out_dir)
    assert p.returncode == 0, p.stderr[-2000:]
    rec = _last(out_dir)
    assert rec["status"] == "ok" and rec["metrics"]["accuracy"] is not None
    sb = rec["metrics"]["state_bytes"]["by_rank"][0]
    n = rec["metrics"]["param_count"]
    assert sb["params_bytes"] == 4 * n  # one rank: the whole model, fp32 master weights
    assert sb["device_allocated"] >= sb["total_bytes"]
    assert rec["metrics"]["breakdown_s"]["forward"] > 0
    assert rec["comm"]["exposed_s"] == 0.0  # one rank: nothing is sent


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_compile_on_the_gpu_keeps_compiling_out_of_the_window(cli, out_dir, mode):
    """`run --compile` with bf16 on the GPU: the forward and backward compile (and, with
    reduce-overhead, the CUDA graphs record) in the warm-up, nothing inside the window, and
    the FLOPs of the compiled model are the eager run's."""
    p = cli("run", *R18, "--amp", "bf16", "--compile", "--compile-mode", mode,
            "--warmup-steps", 5, "--out", out_dir / "c")
    assert p.returncode == 0, p.stderr[-2000:]
    e = cli("run", *R18, "--amp", "bf16", "--out", out_dir / "e")
    assert e.returncode == 0, e.stderr[-2000:]
    rec, eager = _last(out_dir / "c"), _last(out_dir / "e")
    m = rec["metrics"]
    assert m["compile_time_s"] > 0 and m["compiles_in_window"] == 0, rec["compile"]
    assert m["flops_per_step"] == eager["metrics"]["flops_per_step"] and m["mfu"] > 0



def test_the_target_look_back_copies_device_state_and_puts_it_back(cli, out_dir):
    """Catches copies of the model that fail on the device or are not put back: on CUDA the
    copies go to host memory and back, the look back ends at the first copy that reaches
    the target, and the evaluation after training (--eval) sees the trained model again:
    the value of the epoch's evaluation that reached it."""
    p = cli("run", "--model", "digits_cnn", "--dataset", "digits", "--target", "accuracy=0.8",
            "--loader", "naive", "--no-progress", "--eval", "--out", out_dir)
    assert p.returncode == 0, p.stderr[-2000:]
    rec = _last(out_dir)
    tt, curve = rec["target"], rec["target"]["curve"]
    looked = [c for c in curve if c["looked_back"]]
    assert looked and tt["copies_s"] > 0 and tt["looked_back"] == len(looked)
    assert all(c["value"] < 0.8 for c in looked[:-1])
    assert tt["steps_to_target"] <= curve[-1]["step"]
    assert rec["metrics"]["accuracy"] == pytest.approx(curve[-1]["value"], abs=0.003)
