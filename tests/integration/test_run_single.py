"""Real single-device runs on embedded and synthetic data (CPU)."""

import csv
import json
import statistics
import threading

import pytest

from scaleprobe.cli import main
from scaleprobe.config import runconfig as C
from scaleprobe.core.results import read_jsonl
from scaleprobe.run.workloads import run_config


def execute(cfg):
    """The run's record as written (result.json)."""
    return run_config(cfg).to_dict()

pytestmark = pytest.mark.timeout(180)

RESULT_KEYS = {"schema", "kind", "run_id", "name", "key", "status", "error", "started_at",
               "finished_at", "config", "env", "batch", "metrics", "null_reasons", "paths"}
METRIC_KEYS = {"samples_per_s", "step_time_s", "breakdown_s", "epoch_time_s",
               "epoch_time_projected", "peak_mem_bytes", "cpu_util_pct", "gpu_util_pct",
               "accuracy"}


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("digits")
    cfg = C.build({"epochs": 3, "eval": True, "loader": "naive", "out": str(out),
                   "progress": False, "monitor_interval_s": 0.1})
    return execute(cfg), out


@pytest.mark.slow  # digits_run: 3 epochs, 84 s measured under load
def test_digits_cnn_learns_digits(digits_run):
    rec, _ = digits_run
    assert rec["status"] == "ok", rec["error"]
    assert rec["metrics"]["accuracy"] >= 0.90
    assert rec["metrics"]["loss_last"] < rec["metrics"]["loss_first"]


@pytest.mark.slow  # digits_run: 3 epochs, 84 s measured under load
def test_result_schema_and_files(digits_run):
    rec, out = digits_run
    assert RESULT_KEYS <= set(rec) and METRIC_KEYS <= set(rec["metrics"])
    run_dir = out / rec["run_id"]
    for f in ("config.json", "result.json", "steps.csv", "monitor.csv"):
        assert (run_dir / f).is_file(), f
    on_disk = json.loads((run_dir / "result.json").read_text())
    assert on_disk["run_id"] == rec["run_id"] and on_disk["status"] == "ok"
    lines = read_jsonl(out / "results.jsonl")
    assert len(lines) == 1 and lines[0]["run_id"] == rec["run_id"]
    env = rec["env"]
    for k in ("host", "cores", "cpu_model", "torch", "gpus", "driver", "world_size"):
        assert k in env
    rows = list(csv.DictReader((run_dir / "steps.csv").open()))
    assert len(rows) == rec["metrics"]["steps_timed"]
    mon = list(csv.DictReader((run_dir / "monitor.csv").open()))
    assert mon and float(mon[-1]["t_s"]) > 0


@pytest.mark.slow  # digits_run: 3 epochs, 84 s measured under load
def test_epoch_time_measured_and_steps_per_epoch(digits_run):
    m = digits_run[0]["metrics"]
    assert m["epoch_time_projected"] is False and m["epoch_time_s"] > 0
    assert m["steps_per_epoch"] == 1438 // 64
    assert m["train_samples"] == 1438  # the split's, which plan and predict --memory read
    assert m["steps_done"] == 3 * m["steps_per_epoch"]
    assert m["steps_timed"] == m["steps_done"] - 5  # warm-up excluded


@pytest.mark.slow  # digits_run: 3 epochs, 84 s measured under load
def test_cpu_fields_measured_gpu_fields_null_with_reason(digits_run):
    rec = digits_run[0]
    m = rec["metrics"]
    assert 0 < m["cpu_util_pct"] <= 100
    assert m["peak_mem_bytes"]["host"] > 100 * 2**20
    assert m["gpu_util_pct"] is None and m["peak_mem_bytes"]["device_allocated"] is None
    assert rec["null_reasons"]["gpu_util_pct"]
    assert rec["null_reasons"]["peak_mem_bytes.device_allocated"]


@pytest.mark.slow  # digits_run: 3 epochs, 84 s measured under load
def test_host_memory_net_of_the_baseline_before_the_model(digits_run):
    """Bug: the host peak was total RSS only (torch's own memory included), so growth with
    the batch looked like a few per cent. The net figure is positive and below the total."""
    mem = digits_run[0]["metrics"]["peak_mem_bytes"]
    assert mem["host_baseline"] > 50 * 2**20  # torch is resident before the model is built
    assert 0 < mem["host_net"] < mem["host"]
    # training touches library code it had not used before: counted apart, left out of net;
    # 0 where the process had already touched it (this fixture trains in the test process,
    # after other tests trained there: 0 in the full suite, about 10 MiB alone)
    assert mem["host_file_growth"] >= 0
    # net of the rank's own peak, which the sampled total of the process tree can exceed
    assert mem["host_net"] <= mem["host"] - mem["host_baseline"] - mem["host_file_growth"]


def test_synthetic_pipelined_heavy_with_auto_steps(out_dir):
    cfg = C.build({"dataset": "synthetic-loader", "image_size": 32, "num_samples": 4096,
                   "batch_size": 32, "steps": "auto", "max_steps": 40, "min_steps": 10,
                   "warmup_steps": 2, "loader": "pipelined", "workers": 1, "prefetch": 2,
                   "transform": "heavy", "model": "linear", "out": str(out_dir),
                   "progress": False})
    rec = execute(cfg)
    m = rec["metrics"]
    assert rec["status"] == "ok"
    assert rec["input_mode"] == "loader"  # synthetic-loader: through the workers, not resident
    assert 10 <= m["steps_timed"] <= 40
    assert m["epoch_time_projected"] is True
    # steps.csv, every timed step as measured, read independently of the summary: samples/s
    # is the samples of those steps over their window (catches a rate from the wrong batch,
    # a median for the throughput, warm-up steps counted), the median step's rate beside it,
    # and the window is the steps laid end to end (catches a gap or a warm-up step inside the
    # window, or a window that lost steps).
    with open(rec["paths"]["steps_csv"]) as fh:
        times = [float(row["step_time_s"]) for row in csv.DictReader(fh)]
    assert len(times) == m["steps_timed"]
    assert m["window_s"] == pytest.approx(sum(times), rel=0.02)
    assert m["samples_per_s"] == pytest.approx(32 * len(times) / sum(times), rel=0.02)
    assert m["samples_per_s_median_step"] == pytest.approx(32 / statistics.median(times),
                                                           rel=1e-3)
    # The median step and the window's mean step differ by the steps' spread: 1.05-1.10x
    # under light load, 1.29x with six other jobs on the 2 cores, 2.87x in a full suite run
    # (2026-11-23; one loader worker with the heavy transform stalls every few steps and the
    # median step is a prefetched one). Past 25% the report and summary say so; samples/s
    # is the window's in every case, so no invariant is broken.
    ratio = m["samples_per_s_median_step"] / m["samples_per_s"]
    assert rec["invariants"] == []
    from scaleprobe.core.invariants import uneven_steps
    from scaleprobe.core.result_model import RunResult

    assert (uneven_steps(RunResult.from_dict(rec)) is None) == (abs(ratio - 1) <= 0.25)


def test_no_monitor_thread_left_after_an_exception(tmp_path, out_dir):
    bad = tmp_path / "boom.py"
    bad.write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__(); self.l = torch.nn.Linear(3*32*32, 10); self.n = 0\n"
        "    def forward(self, x):\n"
        "        self.n += 1\n"
        "        if self.n == 3: raise RuntimeError('model exploded')\n"
        "        return self.l(x.flatten(1))\n"
        "def build(num_classes):\n    return M()\n")
    cfg = C.build({"model": f"{bad}:build", "steps": 5, "loader": "naive",
                   "out": str(out_dir), "progress": False})
    rec = execute(cfg)
    assert rec["status"] == "failed" and "model exploded" in rec["error"]
    names = [t.name for t in threading.enumerate()]
    assert "scaleprobe-monitor" not in names
    assert read_jsonl(out_dir / "results.jsonl")[0]["status"] == "failed"


@pytest.mark.parametrize("error,needle", [
    ("RuntimeError('[enforce fail at alloc_cpu.cpp:121] data. DefaultCPUAllocator: not enough "
     "memory: you tried to allocate 8589934592 bytes.')", "DefaultCPUAllocator"),
    ("torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB')",
     "CUDA out of memory"),
    ("MemoryError()", "MemoryError"),
])
def test_out_of_memory_is_a_result_with_exit_code_3(tmp_path, out_dir, capsys, error, needle):
    """The CPU allocator's error, torch's OutOfMemoryError (what a full GPU raises) and
    Python's MemoryError all make an 'oom' result and exit code 3. Bug caught: one of them
    recorded as 'failed' (exit 1), so a sweep reruns it and tries the larger batches."""
    oom = tmp_path / "oom.py"
    oom.write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__(); self.l = torch.nn.Linear(3*32*32, 10)\n"
        "    def forward(self, x):\n"
        f"        raise {error}\n"
        "def build():\n    return M()\n")
    code = main(["run", "--model", f"{oom}:build", "--steps", "3", "--loader", "naive",
                 "--out", str(out_dir), "--no-progress"])
    assert code == 3
    rec = read_jsonl(out_dir / "results.jsonl")[0]
    assert rec["status"] == "oom" and needle in rec["error"]
    assert "status: oom" in capsys.readouterr().out


def test_epoch_starts_are_the_timed_steps_that_took_an_epochs_first_batch(tmp_path):
    """Digits at batch 512 (the linear model: the data is what counts): 2 steps per epoch, so after one warm-up step every other timed
    step takes an epoch's first batch (timed steps 1, 3, 5). Their median data wait and
    their share of the window's, recomputed here from steps.csv (bug caught: the flag set on
    the warm-up's epoch start, or shifted by one, which the H100 batch search's epochs of
    1-3 steps would have read as the wrong steps)."""
    res = execute(C.build({"model": "linear", "batch_size": 512, "steps": 7, "warmup_steps": 1,
                           "loader": "naive", "out": str(tmp_path), "progress": False}))
    m = res["metrics"]
    assert res["status"] == "ok" and m["steps_per_epoch"] == 2 and m["steps_timed"] == 7
    rows = list(csv.DictReader(open(next(tmp_path.glob("*/steps.csv")))))
    data = [float(r["data_s"]) for r in rows]
    assert len(data) == 7 and m["epoch_starts_timed"] == 3
    starts = [data[i] for i in (1, 3, 5)]
    assert m["epoch_start_data_s"] == pytest.approx(statistics.median(starts), abs=2e-6)
    assert m["epoch_start_data_share"] == pytest.approx(sum(starts) / sum(data), abs=1e-4)
    steps = [float(r["step_time_s"]) for r in rows]
    assert m["epoch_start_window_share"] == pytest.approx(sum(starts) / sum(steps), abs=1e-4)
    rest = [data[i] for i in (0, 2, 4, 6)]
    assert m["epoch_start_other_data_s"] == pytest.approx(statistics.median(rest), abs=2e-6)
