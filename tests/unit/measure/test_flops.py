"""FLOP counting, the peak table, the measured peak and its cache (measure/flops.py, peaks.py)."""

import json
import time

import pytest
import torch
from torch import nn

from scaleprobe.core import metrics as M
from scaleprobe.measure import flops as F
from scaleprobe.measure.peaks import TABLE, find, table_peak

pytestmark = pytest.mark.timeout(120)


def _mlp_step(batch=8, d_in=10, hidden=20, d_out=5):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, d_out))
    x = torch.randn(batch, d_in)

    def step():
        model(x).square().mean().backward()
    return step


def test_mlp_step_flops_match_a_hand_count():
    """Catches a count that misses the backward pass, counts the bias or the element-wise
    operators, or counts multiply-adds instead of FLOPs. Hand count, batch B=8, 10 -> 20 -> 5,
    2 FLOPs per multiply-add:
      forward   2*B*10*20 + 2*B*20*5                      = 3200 + 1600 = 4800
      backward  layer 2: grad input 2*B*5*20 + grad weight 2*5*B*20 = 1600 + 1600
                layer 1: grad weight 2*20*B*10 (the input needs no gradient) = 3200
    total 4800 + 6400 = 11200."""
    sf = F.StepFlops(warmup_steps=1)
    with sf.around(step=0, timed=False):
        _mlp_step()()
    assert sf.result().flops_per_step == 11200
    assert sf.result().reason is None


def test_only_the_first_untimed_step_is_counted():
    """Catches the counter wrapping a timed step (its dispatch overhead would land inside the
    window) or counting every step (a per-step cost)."""
    sf = F.StepFlops(warmup_steps=2)
    with sf.around(step=0, timed=True):  # warm-up 0 is timed only with --warmup-steps 0
        _mlp_step()()
    assert sf.flops is None
    with sf.around(step=1, timed=False):
        _mlp_step()()
    assert sf.flops is None
    zero = F.StepFlops(warmup_steps=0)
    with zero.around(step=0, timed=False):
        _mlp_step()()
    assert zero.flops is None and "--warmup-steps 0" in zero.reason


def test_a_step_without_products_is_null_with_a_reason_not_zero():
    """Catches a FLOP count of 0 (an MFU of 0%) for a model the counter cannot see."""
    sf = F.StepFlops(warmup_steps=1)
    w = torch.ones(4, requires_grad=True)
    with sf.around(0, False):
        (w * 2).sum().backward()
    assert sf.result().flops_per_step is None and "no matrix product" in sf.reason


def test_resnet18_224_forward_matches_the_published_multiply_adds():
    """Catches a wrong convention or a missed layer type. torchvision's model card gives
    resnet18 at 224 px 1.81 GFLOPS, fvcore-style multiply-adds (1.82 G in the ResNet paper's
    table); the counter counts 2 FLOPs per multiply-add, so forward / 2 must be within 5%."""
    from torchvision.models import resnet18

    model = resnet18(num_classes=1000).eval()
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        fwd = F.count_flops(lambda: model(x))
    assert abs(fwd / 2 - 1.82e9) / 1.82e9 < 0.05, fwd


def test_resnet18_backward_is_about_twice_the_forward():
    """Catches the backward pass missing from the step count (total = forward) or counted
    twice: backward computes the input and the weight gradient of each layer, about 2x the
    forward, a little less since the first convolution's input needs no gradient."""
    from torchvision.models import resnet18

    model = resnet18(num_classes=10)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        fwd = F.count_flops(lambda: model(x))
    total = F.count_flops(lambda: model(x).sum().backward())
    assert 2.6 < total / fwd < 3.0, total / fwd


# ---- the peak table -------------------------------------------------------------------------

@pytest.mark.parametrize("nvml_name, row", [
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"),
    ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe"),
    ("NVIDIA H100 NVL", "NVIDIA H100 NVL"),
    ("NVIDIA H200", "NVIDIA H200 SXM"),
    ("NVIDIA A100-SXM4-80GB", "NVIDIA A100"),
    ("NVIDIA A100 80GB PCIe", "NVIDIA A100"),
    ("NVIDIA A10", "NVIDIA A10"),
    ("NVIDIA L4", "NVIDIA L4"),
    ("NVIDIA L40S", "NVIDIA L40S"),
    ("Tesla V100-SXM2-16GB", "NVIDIA V100 SXM2"),
    ("Tesla T4", "NVIDIA T4"),
])
def test_nvml_names_find_their_own_row(nvml_name, row):
    """Catches a card matched to a sibling's row (an A10 read as an A100, a PCIe H100 held to
    the SXM peak, an L40S to the L4's): its MFU would be off by up to 2.5x."""
    assert find(nvml_name).name == row


def test_every_row_of_the_table_file_is_found_by_its_own_name():
    """Catches a row of accelerators.csv shadowed by an earlier, broader pattern (a new card
    appended after its family's row), a missing FP32 peak, or a peak read in the wrong
    unit (the file is in TFLOP/s)."""
    assert len(TABLE) >= 13
    for acc in TABLE:
        assert find(acc.name) is acc, acc.name
        assert 1e12 < acc.peaks["fp32"] < 1e15, acc.name
        assert set(acc.peaks) == {"fp32", "tf32", "bf16", "fp16"} and acc.source


def test_unknown_devices_have_no_table_peak():
    """Catches an unknown GPU (or a CPU) silently given some table row instead of a measured
    peak."""
    assert find("AMD Instinct MI300X") is None and table_peak("AMD EPYC 7763", "fp32") is None
    assert find("") is None and find(None) is None


def test_table_peaks_are_dense_and_ordered_by_dtype():
    """Catches a data-sheet 'with sparsity' figure copied as the peak (MFU halved) and a dtype
    column mixed up: on every tensor-core card bf16 = fp16 > tf32 >= fp32, and the H100 SXM's
    dense bf16 is under 1,000 TFLOP/s (1,979 is the sparse figure)."""
    h100 = table_peak("NVIDIA H100 80GB HBM3", "bf16")
    assert h100[0] < 1000e12 and "H100 SXM" in h100[1]
    for name in ("NVIDIA H100 PCIe", "NVIDIA A100-SXM4-40GB", "NVIDIA L4", "NVIDIA H200"):
        p = {d: table_peak(name, d)[0] for d in ("fp32", "tf32", "bf16", "fp16")}
        assert p["bf16"] == p["fp16"] > p["tf32"] >= p["fp32"] > 0, name


def test_a_dtype_the_card_lacks_falls_back_to_fp32_and_says_so():
    """Catches a T4 bf16 run held to no peak or to a peak it has no unit for."""
    v, src = table_peak("Tesla T4", "bf16")
    assert v == table_peak("Tesla T4", "fp32")[0] and "no bf16 unit" in src


def test_cpu_dtype_follows_autocast():
    """Catches a bf16 run held to the fp32 peak (or the reverse)."""
    cpu = torch.device("cpu")
    assert [F.run_dtype(cpu, a) for a in ("off", "bf16", "fp16")] == ["fp32", "bf16", "fp16"]


# ---- the measured peak and its cache --------------------------------------------------------

def test_calibration_counts_two_flops_per_multiply_add():
    """Catches the peak counted as n^3 (or any other count than 2 n^3 per n x n product):
    with a clock that advances 0.5 s per product the rate is exactly 2 n^3 / 0.5."""
    ticks = iter(range(10_000))

    def clock() -> float:
        return next(ticks) * 0.25  # two reads per product: 0.5 s each

    got = F.calibrate(torch.device("cpu"), "fp32", n=16, seconds=3.0, clock=clock,
                      cpu_clock=lambda: 0.0)
    assert got["flops_per_s"] == pytest.approx(2 * 16 ** 3 / 0.25)


@pytest.mark.parametrize("smallest_s,n", [(0.0003, 1024), (0.003, 1024), (0.0045, 512),
                                          (0.03, 512), (0.05, 256), (0.048 * 60, 256)])
def test_the_cpu_product_size_keeps_one_product_short(smallest_s, n):
    """Bug caught: bf16 on a CPU without bf16 kernels took 2.9 s a 1024 x 1024 product; a
    calibration of five took 14.4 s before every bf16 run. One product at 256 sets the size:
    the largest whose product would take at most CPU_PRODUCT_S (0.25 s)."""
    assert F.cpu_size(smallest_s) == n


def test_a_slow_dtype_is_calibrated_in_a_second_or_two_not_fifteen():
    """On this CPU bf16's products are slow (no bf16 instructions: 14.4 s at 1024); on one
    with them the size stays 1024 and the calibration takes about ``seconds``. Either way one
    calibration stays short, and its figure is a positive rate at the size it names."""
    t0 = time.perf_counter()
    got = F.calibrate(torch.device("cpu"), "bf16", seconds=0.2)
    took = time.perf_counter() - t0
    assert took < 8.0, (took, got["method"])  # 14.4 s before, on this CPU
    assert got["flops_per_s"] > 0 and f"{got['n']}x{got['n']}" in got["method"]
    assert got["n"] in F.CPU_SIZES


def test_calibration_measures_a_matmul_rate_and_restores_threads():
    """Catches a calibration that reports 0 or a rate off by the 2 FLOPs per multiply-add
    (checked against a matrix product timed here independently), or leaves the process
    with a different thread count."""
    import time

    threads = torch.get_num_threads()
    got = F.calibrate(torch.device("cpu"), "fp32", n=256, seconds=0.2)
    assert torch.get_num_threads() == threads
    assert got["reps"] >= 3 and "measured peak" in got["method"]
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    torch.set_num_threads(F.cpu_threads())
    try:
        # best of as many products as fit 0.5 s (at least 20): under load a fixed 20 can all
        # land on descheduled threads (2.6 against 70 GFLOP/s beside two busy loops); load
        # only slows a product, so a best still 4x below the calibration goes on for up to
        # 3 s (2.1 against 184 GFLOP/s once after 0.5 s at load average 3-5)
        times, t0 = [], time.perf_counter()
        while (len(times) < 20 or time.perf_counter() < t0 + 0.5 or
               (2 * 256 ** 3 / min(times) * 4 < got["flops_per_s"]
                and time.perf_counter() < t0 + 3.0)):
            times.append(_timed(lambda: torch.mm(a, b), time.perf_counter))
        best = min(times)
    finally:
        torch.set_num_threads(threads)
    independent = 2 * 256 ** 3 / best
    # both are best-of-many on a shared machine: within a factor 4, not the 2x of a
    # convention error squared with load. A calibration that met a busy 0.2 s (2.1 against
    # 199 GFLOP/s at load average 3) is run again, at most twice: its best can only rise
    rate = got["flops_per_s"]
    for _ in range(2):
        if rate > independent / 4:
            break
        rate = max(rate, F.calibrate(torch.device("cpu"), "fp32", n=256,
                                     seconds=0.2)["flops_per_s"])
    assert independent / 4 < rate < independent * 4


def _timed(fn, clock):
    t0 = clock()
    fn()
    return clock() - t0


def test_measured_peak_is_cached_per_machine_and_dtype(tmp_path):
    """Catches a calibration repeated by every run (seconds each, and a peak that moves with
    the load of the moment) and one dtype's peak used for another."""
    calls = []

    def fake(device, dtype):
        calls.append(dtype)
        return {"flops_per_s": 1e11 if dtype == "fp32" else 3e11, "method": f"measured peak: {dtype}"}

    cpu = torch.device("cpu")
    first = F.measured_peak(cpu, "fp32", tmp_path, fake)
    again = F.measured_peak(cpu, "fp32", tmp_path, fake)
    other = F.measured_peak(cpu, "bf16", tmp_path, fake)
    assert calls == ["fp32", "bf16"]
    assert first["cached"] is False and again["cached"] is True
    assert again["flops_per_s"] == 1e11 and other["flops_per_s"] == 3e11
    assert len(json.loads((tmp_path / F.CACHE_FILE).read_text())) == 2


class _Clocks:
    """A wall clock that moves 10 ms a reading, a CPU clock that moves ``share`` of the wall
    time of every thread the calibration runs (its products got that share of the cores), and
    the machine's busy clock: that, plus ``others`` of those cores kept busy by others."""

    def __init__(self, share, others):
        self.t, self.share, self.others = 0.0, share, others

    def wall(self):
        self.t += 0.01
        return self.t

    def cpu(self):
        return self.t * self.share * F.cpu_threads()

    def machine(self):
        return self.t * (self.share + self.others) * F.cpu_threads()


@pytest.mark.parametrize("share, others, busy", [(1.0, 0.0, False), (0.9, 0.1, False),
                                                 (0.5, 0.0, False), (0.45, 0.55, True)])
def test_calibration_says_whether_other_processes_took_its_cores(share, others, busy):
    """Catches a peak measured beside other work (two busy loops gave the threads 34-44% of
    their cores, 2026-11-25) taken for the machine's peak, and a slow kernel taken for load:
    bf16's products on this CPU use one thread of two on a quiet machine (share 0.5), and
    every bf16 peak was said to be "measured while other processes used the CPU" and measured
    again at every run. The machine's busy time less the calibration's own decides."""
    c = _Clocks(share, others)
    got = F.calibrate(torch.device("cpu"), "fp32", n=32, seconds=0.0, clock=c.wall,
                      cpu_clock=c.cpu, machine_clock=c.machine)
    assert got["cpu_share"] == pytest.approx(share)
    assert got["outside_cores"] == pytest.approx(others * F.cpu_threads())
    assert got["under_load"] is busy


def test_a_peak_measured_under_load_is_measured_again_and_the_higher_kept(tmp_path):
    """Catches a busy machine's low peak cached for good (every later MFU too high), a
    second busy measurement replacing a higher first one, and a quiet one not settling it."""
    cpu = torch.device("cpu")
    seq = iter([(2e10, True), (1.5e10, True), (3e10, True), (4e10, False), (1e10, True)])
    calls = []

    def fake(device, dtype):
        v, busy = next(seq)
        calls.append(v)
        return {"flops_per_s": v, "under_load": busy, "cpu_share": 0.5 if busy else 1.0,
                "method": "measured peak: fake"}

    got = [F.measured_peak(cpu, "fp32", tmp_path, fake) for _ in range(6)]
    assert calls == [2e10, 1.5e10, 3e10, 4e10]  # settled by the quiet one: no fifth
    assert [g["flops_per_s"] for g in got] == [2e10, 2e10, 3e10, 4e10, 4e10, 4e10]
    assert [g["under_load"] for g in got] == [True, True, True, False, False, False]
    label = F.resolve_peak(cpu, "off", tmp_path)
    assert label["under_load"] is False and "other processes" not in label["source"]


def test_a_peak_under_load_says_so_in_its_source(tmp_path, monkeypatch):
    """Catches an MFU against a busy machine's peak printed as if the peak were sound."""
    monkeypatch.setattr(F, "calibrate", lambda d, t: {
        "flops_per_s": 2e10, "under_load": True, "cpu_share": 0.44, "outside_cores": 1.1,
        "threads": 2, "method": "measured peak: fake"})
    got = F.resolve_peak(torch.device("cpu"), "off", tmp_path)
    assert got["under_load"] is True
    assert got["source"] == ("measured peak: fake; measured while other processes used the CPU "
                             "(they kept 1.1 of its 2 threads' cores busy): the peak is likely higher "
                             "and the MFU lower than shown; measured again at the next run")


def test_a_damaged_cache_costs_a_measurement_not_the_run(tmp_path):
    """Catches a torn or foreign peaks.json (or a zero entry) failing every later run."""
    cpu = torch.device("cpu")
    (tmp_path / F.CACHE_FILE).write_text("{not json")
    ok = {"flops_per_s": 2e10, "method": "measured peak: x"}
    assert F.measured_peak(cpu, "fp32", tmp_path, lambda d, t: ok)["flops_per_s"] == 2e10
    key = F.cache_key(cpu, "fp32")
    (tmp_path / F.CACHE_FILE).write_text(json.dumps({key: {"flops_per_s": 0}}))
    assert F.measured_peak(cpu, "fp32", tmp_path, lambda d, t: ok)["cached"] is False


def test_an_unwritable_cache_folder_still_gives_a_peak(tmp_path):
    """Catches a read-only home (a container) turning the peak into a failed run."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        got = F.measured_peak(torch.device("cpu"), "fp32", ro / "sub",
                              lambda d, t: {"flops_per_s": 5e9, "method": "measured peak: x"})
    finally:
        ro.chmod(0o700)
    assert got["flops_per_s"] == 5e9


def test_resolve_on_cpu_is_labelled_measured(tmp_path, monkeypatch):
    """Catches a CPU given a data-sheet figure, or a measured peak not labelled as such."""
    monkeypatch.setattr(F, "calibrate", lambda d, t: {"flops_per_s": 4e10,
                                                      "method": "measured peak: fake"})
    got = F.resolve_peak(torch.device("cpu"), "off", tmp_path)
    assert got["measured"] is True and got["source"].startswith("measured peak")
    assert got["dtype"] == "fp32" and got["flops_per_s"] == 4e10


def _fake_cuda(monkeypatch, name, capability=(9, 0)):
    """A CUDA device as resolve_peak asks about it (its name and compute capability), on a
    machine without one; calibrating it is an error: a known card is never measured."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: name)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: capability)

    def no_calibration(d, t):
        raise AssertionError(f"calibrated a known card ({name}, {t})")

    monkeypatch.setattr(F, "calibrate", no_calibration)


@pytest.mark.parametrize("amp, dtype", [("bf16", "bf16"), ("fp16", "fp16"), ("off", "tf32")])
def test_a_known_card_gets_its_data_sheet_peak_for_the_runs_dtype(amp, dtype, monkeypatch,
                                                                   tmp_path):
    """Catches a known GPU measured instead of looked up, the fp32 figure given to a bf16 run
    (or the other way round), and an Ampere-or-later card without AMP not taken as TF32
    (PyTorch allows TF32 convolutions by default)."""
    _fake_cuda(monkeypatch, "NVIDIA H100 80GB HBM3")
    got = F.resolve_peak(torch.device("cuda", 0), amp, tmp_path)
    want, src = table_peak("NVIDIA H100 80GB HBM3", dtype)
    assert got == {"flops_per_s": want, "dtype": dtype, "device_name": "NVIDIA H100 80GB HBM3",
                   "source": f"data sheet: {src}", "measured": False}
    assert not list(tmp_path.iterdir())  # nothing cached for a data-sheet figure


def test_an_unknown_cuda_card_is_measured_and_says_so(monkeypatch, tmp_path):
    """Catches an unknown card given some row of the table (a loose name match) instead of a
    measured peak, labelled as such."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "NVIDIA Future X1")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (10, 0))
    seen = []
    monkeypatch.setattr(F, "calibrate", lambda d, t: seen.append(t) or {
        "flops_per_s": 7e14, "method": "measured peak: fake"})
    got = F.resolve_peak(torch.device("cuda", 0), "bf16", tmp_path)
    assert seen == ["bf16"] and got["measured"] is True and got["flops_per_s"] == 7e14
    assert got["source"].startswith("measured peak") and got["device_name"] == "NVIDIA Future X1"


def test_mfu_is_achieved_over_the_devices_peak():
    """Catches MFU against one device when the run used several (N x too high) and a null
    figure read as 0."""
    fps = M.flops_per_sample(3.2e9, 16)
    assert M.mfu(M.achieved_flops_per_s(fps, 100.0), 1e11, 2) == pytest.approx(0.1)
    assert M.mfu(None, 1e11, 1) is None and M.mfu(1e10, None, 1) is None


def test_a_cached_peak_beaten_by_a_short_check_is_measured_again(tmp_path, monkeypatch):
    """The peak cached in the morning on the 2-core machine was 101 GFLOP/s; the same VM gave
    195-198 GFLOP/s in the evening, and every MFU read twice the truth (a small CNN at "81%"
    of peak). A best-of can only be beaten by a faster machine, so a short check above the
    cached figure by more than 10% replaces it; a check within 10%, or below it (a busy
    moment), keeps the cache. Bug caught: a cached peak trusted for good."""
    monkeypatch.setattr(F, "CHECK_EVERY_S", 0.0)  # every call checks (the window: below)
    cpu = torch.device("cpu")
    full = iter([1.0e11, 1.96e11])
    calls = []

    def measure(device, dtype):
        calls.append("full")
        return {"flops_per_s": next(full), "method": "measured peak: fake"}

    def check_at(v):
        def check(device, dtype):
            calls.append("check")
            return {"flops_per_s": v}
        return check

    assert F.measured_peak(cpu, "fp32", tmp_path, measure)["flops_per_s"] == 1.0e11
    for v in (1.09e11, 0.5e11):  # within the margin; a busy moment
        got = F.measured_peak(cpu, "fp32", tmp_path, measure, check_at(v))
        assert got["cached"] is True and got["flops_per_s"] == 1.0e11
    got = F.measured_peak(cpu, "fp32", tmp_path, measure, check_at(1.95e11))
    assert calls == ["full", "check", "check", "check", "full"]
    assert got["cached"] is False and got["flops_per_s"] == 1.96e11
    assert got["replaced"]["flops_per_s"] == 1.0e11
    assert got["replaced"]["check_flops_per_s"] == 1.95e11
    kept = json.loads((tmp_path / F.CACHE_FILE).read_text())[F.cache_key(cpu, "fp32")]
    assert kept["flops_per_s"] == 1.96e11


def test_a_check_that_held_is_not_repeated_within_its_window(tmp_path, monkeypatch):
    """A sweep's short runs each paid 0.23 s (cProfile of one short run, load average 3) of matrix products to check the same cached
    peak: a check that held stands for CHECK_EVERY_S, then the next run checks again."""
    cpu = torch.device("cpu")
    calls = []

    def measure(device, dtype):
        calls.append("full")
        return {"flops_per_s": 1.0e11, "method": "measured peak: fake"}

    def check(device, dtype):
        calls.append("check")
        return {"flops_per_s": 1.0e11}

    now = [1000.0]
    monkeypatch.setattr(F.time, "time", lambda: now[0])
    F.measured_peak(cpu, "fp32", tmp_path, measure)
    for t in (1000.0, 1000.0 + F.CHECK_EVERY_S - 1, 1000.0 + F.CHECK_EVERY_S + 1, 1001.0 +
              F.CHECK_EVERY_S + 1):
        now[0] = t
        assert F.measured_peak(cpu, "fp32", tmp_path, measure, check)["cached"] is True
    # the measurement counts as a check: none within its window, one after it, and that
    # one's time starts the next window
    assert calls == ["full", "check"]


def test_resolve_peak_checks_the_cache_and_says_what_it_replaced(tmp_path, monkeypatch):
    """The run's own path: resolve_peak checks a quiet cached peak with a few real products
    (``calibrate`` with ``CHECK_SECONDS``) and labels a replaced one."""
    cpu = torch.device("cpu")
    key = F.cache_key(cpu, "fp32")
    (tmp_path / F.CACHE_FILE).write_text(json.dumps({key: {
        # far below any real product's rate, also beside a full test suite (at 1 GFLOP/s,
        # 64 x 64 products under load read below the margin and the check kept the cache)
        "flops_per_s": 1e6, "measured_at": "2026-11-25 09:00:00", "under_load": False,
        "method": "measured peak: old"}}))
    seconds = []
    real = F.calibrate

    def spy(d, t, *a, **kw):
        seconds.append(kw.get("seconds"))
        return {**real(d, t, n=64, seconds=0.0), "under_load": False}  # a quiet machine

    monkeypatch.setattr(F, "calibrate", spy)
    got = F.resolve_peak(cpu, "off", tmp_path)
    assert seconds == [F.CHECK_SECONDS, None]  # the check, then the full measurement
    assert got["flops_per_s"] > 1.1e6
    assert "replaces the peak cached 2026-11-25 09:00:00 (0.001 GFLOP/s)" in got["source"]
    # the next run reads the new entry: "cached", without the replacement note
    monkeypatch.setattr(F, "calibrate", lambda d, t, *a, **kw: {"flops_per_s": 1.0})
    again = F.resolve_peak(cpu, "off", tmp_path)
    assert ", cached " in again["source"] and "replaces" not in again["source"]


def test_a_busy_calibration_after_a_stale_check_keeps_the_check_s_figure(tmp_path,
                                                                         monkeypatch):
    """Cached 100, the check 120 (the cache is low), then the calibration runs beside other
    work and reads 90. Bug caught: the 90 replaced the cache, below both figures seen."""
    monkeypatch.setattr(F, "CHECK_EVERY_S", 0.0)  # checked at once, not after the window
    cpu = torch.device("cpu")
    F.measured_peak(cpu, "fp32", tmp_path, lambda d, t: {
        "flops_per_s": 1e11, "method": "measured peak: fake"})
    got = F.measured_peak(
        cpu, "fp32", tmp_path,
        lambda d, t: {"flops_per_s": 9e10, "under_load": True, "cpu_share": 0.5,
                      "method": "measured peak: busy"},
        lambda d, t: {"flops_per_s": 1.2e11})
    assert got["flops_per_s"] == 1.2e11 and got["under_load"] is True
    assert got["method"] == "measured peak: busy; the check before it reached 120 GFLOP/s, kept"
