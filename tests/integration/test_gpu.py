"""CUDA paths, on a host with a GPU (skipped elsewhere): NCCL DDP at world size 1, AMP with
CUDA events and NVML, and a real CUDA out-of-memory as a result. benchmarks/gpu_paths.sh runs
the same paths at full size and keeps their figures."""

import pytest

from scaleprobe.results import read_jsonl

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


def test_cuda_out_of_memory_is_a_result(cli, out_dir):
    p = cli("run", "--model", "resnet50", "--dataset", "synthetic", "--image-size", 224,
            "--batch-size", 4096, "--num-samples", 8192, "--steps", 2, "--warmup-steps", 1,
            "--no-progress", "--out", out_dir)
    assert p.returncode == 3, p.stderr[-2000:]
    rec = _last(out_dir)
    assert rec["status"] == "oom" and "out of memory" in rec["error"]
