"""`scaleprobe wrap`: a user's own script, unchanged, measured in 1 and 2 processes (gloo).

The scripts print their own throughput over the steps after their warm-up (``own: steps=K
samples=S seconds=T``); scaleprobe's figures are checked against what the script itself saw.
"""

import re
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from scaleprobe.core.invariants import window_samples_per_s
from scaleprobe.core.result_model import RunResult
from scaleprobe.core.results import read_jsonl
from scaleprobe.core.run_metrics import BREAKDOWN_PHASES
from tests import cliserver
from tests.conftest import ROOT, run_cli, run_torchrun

pytestmark = pytest.mark.timeout(300)
SCRIPTS = ROOT / "examples" / "scripts"
OWN = re.compile(r"own: steps=(\d+) samples=(\d+) seconds=([\d.]+)")
# The script's clock and scaleprobe's cover the same steps (from the end of the warm-up's last
# optimizer step to the end of the last one); they differ by the clock reads and the loop's
# own bookkeeping between them: well under 1% of a window of 25+ steps of 4+ ms.
RATE_TOL = 0.05


def _wrap(out, *target, nproc=1, warmup=3, extra=(), timeout=240, cwd=None, env=None):
    return run_cli("wrap", "--nproc", nproc, "--warmup-steps", warmup, "--out", out, *extra,
                   "--", *map(str, target), timeout=timeout, cwd=cwd, env=env)


def _result(out: Path) -> dict:
    recs = read_jsonl(out / "results.jsonl")
    assert len(recs) == 1
    return recs[0]


def _own(stdout: str) -> tuple[int, int, float]:
    m = OWN.search(stdout)
    assert m, stdout[-2000:]
    return int(m.group(1)), int(m.group(2)), float(m.group(3))


def _no_rank_left(rec: dict) -> None:
    """Every rank (pids from the run's heartbeats) is gone."""
    from scaleprobe.measure.heartbeat import read_beats

    pids = [b.pid for b in read_beats(rec["paths"]["dir"]).values()]
    assert pids
    deadline = time.time() + 5
    while time.time() < deadline and any(psutil.pid_exists(int(p)) for p in pids):
        time.sleep(0.2)
    alive = [p for p in pids if psutil.pid_exists(int(p))
             and psutil.Process(int(p)).status() != psutil.STATUS_ZOMBIE]
    assert not alive


def _check_figures(rec: dict, stdout: str, warmup: int) -> None:
    """Bugs caught: warm-up steps timed, a step counted per forward or per loader batch instead
    of per optimizer step, samples miscounted, phases that do not add up to the step."""
    steps, samples, seconds = _own(stdout)
    m = rec["metrics"]
    assert m["steps_timed"] == steps
    assert m["steps_done"] == steps + warmup
    assert window_samples_per_s(RunResult.from_dict(rec)) == pytest.approx(samples / seconds,
                                                                           rel=RATE_TOL)
    # the headline throughput is the script's own count over the same steps
    assert m["samples_per_s"] == pytest.approx(samples / seconds, rel=RATE_TOL)
    bd = m["breakdown_s"]
    total = sum(bd[p] for p in BREAKDOWN_PHASES if bd[p] is not None)
    assert total == pytest.approx(m["step_time_s"]["median"], rel=1e-6)
    assert bd["forward"] > 0 and bd["backward"] > 0 and bd["optimizer"] > 0


# the examples' MLP, Linear(256, 512) -> Linear(512, 512) -> Linear(512, 10), one sample's
# training step by hand: forward and weight gradients 2 FLOPs per multiply-add each, input
# gradients of the two later layers (the first layer's input needs none)
MLP_MACS = 256 * 512 + 512 * 512 + 512 * 10
MLP_FLOPS_PER_SAMPLE = 2 * MLP_MACS + 2 * MLP_MACS + 2 * (512 * 512 + 512 * 10)


def _check_flops(rec):
    """The script's step counted under wrap as `run` counts its own (bugs caught: no count, a
    count of two steps or of one rank for the job, an MFU against the wrong peak)."""
    m = rec["metrics"]
    assert m["flops_per_sample"] == MLP_FLOPS_PER_SAMPLE
    assert m["flops_per_step"] == MLP_FLOPS_PER_SAMPLE * rec["batch"]["global"]
    assert m["peak"]["dtype"] == "fp32" and m["peak"]["measured"] is True
    assert m["mfu"] == pytest.approx(m["achieved_flops_per_s"] / m["peak"]["flops_per_s"])
    assert 0 < m["mfu"] < 1


def test_plain_script_single_process(tmp_path):
    """In a fresh interpreter, as on a GPU host (the other tests' ranks are forked from the
    launcher: launch/__init__.py)."""
    out = tmp_path / "out"
    p = _wrap(out, SCRIPTS / "train_plain.py", "--epochs", 1, "--samples", 1024,
              "--warmup", 3, env={"SCALEPROBE_RANK_START": "spawn"})
    assert p.returncode == 0, p.stderr[-3000:]
    assert "epoch 0: loss" in p.stdout  # the script's own output passes through
    rec = _result(out)
    assert rec["status"] == "ok"
    _check_figures(rec, p.stdout, 3)
    assert rec["batch"]["per_process"] == 64 and rec["batch"]["world_size"] == 1
    assert rec["metrics"]["breakdown_s"]["comm"] == 0.0  # one process: nothing to send
    assert rec["metrics"]["param_count"] == 256 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10
    assert rec["audit"] is None and rec["script"]["exit_code"] == 0
    _check_flops(rec)
    assert "MFU" in p.stderr  # the summary, on stderr beside the script's own output
    assert (Path(rec["paths"]["dir"]) / "steps.csv").is_file()
    _no_rank_left(rec)


@pytest.mark.slow
def test_ddp_script_two_processes(tmp_path):
    """The tutorial DDP script: each rank's shard audited; its all-reduce timed through DDP's
    comm hook without changing the training: the losses it prints are those of the same
    script under torchrun, digit for digit (bug caught: a hook that does not average, or
    runs instead of the script's own)."""
    import os

    args = ["--epochs", 2, "--samples", 1024, "--warmup", 3]
    out = tmp_path / "out"
    # gloo's socket threads at SCHED_BATCH from the first step: the losses are the same
    p = _wrap(out, SCRIPTS / "train_ddp.py", *args, nproc=2,
              extra=("--gloo-io", "batch"))
    assert p.returncode == 0, p.stderr[-3000:]
    bare = run_torchrun("--standalone", "--nproc-per-node", 2, SCRIPTS / "train_ddp.py", *args,
                        env={"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 2) // 2))})
    assert bare.returncode == 0, bare.stderr[-3000:]
    losses = re.compile(r"epoch \d+: loss [\d.]+")
    assert losses.findall(p.stdout) == losses.findall(bare.stdout) != []
    rec = _result(out)
    assert rec["status"] == "ok"
    _check_figures(rec, p.stdout, 3)
    assert rec["batch"]["global"] == 64 and rec["batch"]["world_size"] == 2
    assert rec["audit"]["ok"] is True, rec["audit"]
    assert rec["audit"]["same_order_across_epochs"] is False  # set_epoch reshuffles
    m, c = rec["metrics"], rec["comm"]
    assert m["breakdown_s"]["comm"] > 0 and c["exposed_s"] == m["breakdown_s"]["comm"]
    assert c["in_flight_s"] >= c["exposed_s"] and c["models_timed"] == 1  # same basis as exposed
    assert "comm hook" in c["method"]
    assert m["comm_fraction"] == pytest.approx(c["exposed_s"] / m["step_time_s"]["median"],
                                               rel=0.05)
    assert "standalone collective" in rec["null_reasons"]["comm.transfer_s"]
    assert rec["config"]["dist"]["gloo_io"] == "batch"
    assert 0 < m["gloo_io_cpu_per_step_s"] < m["step_time_s"]["median"]
    _check_flops(rec)
    _no_rank_left(rec)


@pytest.mark.slow
def test_missing_distributed_sampler_is_caught(tmp_path):
    """The reference study's bug: every rank reads the whole dataset. The audit fails with
    the duplicate count (every sample read once more by the second rank, each epoch) and the
    sampler is named."""
    out = tmp_path / "out"
    p = _wrap(out, SCRIPTS / "train_ddp_nosampler.py", "--epochs", 1, "--samples", 512,
              "--warmup", 3, nproc=2)
    # a failed audit is the run's status and exit code (bug caught: status ok, exit 0)
    assert p.returncode == 5, p.stderr[-3000:]
    rec = _result(out)
    assert rec["status"] == "audit_failed"
    assert rec["error"].startswith("shard audit failed: epoch 1: 512 samples")
    assert "exit code: 5 (audit_failed); the script's own was 0" in p.stderr
    assert rec["comm"]["prediction"] is not None  # DDP: its ranks do communicate
    a = rec["audit"]
    assert a["ok"] is False
    assert a["duplicate_samples"] == 512
    assert a["unique_fraction"] == pytest.approx(0.5)
    assert "RandomSampler" in rec["script"]["sampler_note"]
    assert "RandomSampler, not a DistributedSampler" in p.stderr
    assert rec["metrics"]["unique_samples_per_s"] == pytest.approx(
        rec["metrics"]["samples_per_s"] / 2)


@pytest.mark.slow
def test_ranks_that_never_communicate_get_no_network_model(tmp_path):
    """`wrap --nproc 2` of a one-process script (no process group, no DDP, a shuffling
    DataLoader): every rank reads the whole dataset. Bugs caught: status ok and exit 0 after
    a failed audit, and a network model ("needs >= 1.55 Gbit/s") for ranks that never sent
    a byte."""
    out = tmp_path / "out"
    p = _wrap(out, SCRIPTS / "train_plain.py", "--epochs", 1, "--samples", 512, "--warmup", 3,
              nproc=2)
    assert p.returncode == 5, p.stderr[-3000:]
    rec = _result(out)
    assert rec["status"] == "audit_failed" and rec["audit"]["ok"] is False
    assert rec["comm"] is None and "never communicated" in rec["null_reasons"]["comm"]
    assert rec["metrics"]["breakdown_s"]["comm"] == 0.0
    assert "Gbit/s" not in p.stderr


USER_SCRIPT = """
import os, sys, time
import torch
from helper import make_model          # a module beside the script (sys.path[0])

assert __name__ == "__main__"
args = sys.argv[1:]
print("argv", args, "rank", os.environ["RANK"], "world", os.environ["WORLD_SIZE"],
      "master", os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"], flush=True)
if int(os.environ["WORLD_SIZE"]) > 1:
    torch.distributed.init_process_group("gloo")
torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(480, 32), torch.randint(0, 4, (480,)))
sampler = (torch.utils.data.distributed.DistributedSampler(data)
           if torch.distributed.is_initialized() else None)
loader = torch.utils.data.DataLoader(data, batch_size=int(args[0]), sampler=sampler,
                                     shuffle=sampler is None, num_workers=1)
model = make_model()
if torch.distributed.is_initialized():
    model = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.Adam(model.parameters())
step, n, t0 = 0, 0, None
for xb, yb in loader:
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(xb), yb).backward()
    time.sleep(0.004)  # a steady step: some compute the hooks cannot see as a module
    opt.step()
    t1 = time.perf_counter()  # the end of this step: what follows the loop is not a step
    step += 1
    if step == 2:
        t0 = time.perf_counter()
    elif step > 2:
        n += len(xb)
world = int(os.environ["WORLD_SIZE"])
if os.environ["RANK"] == "0":
    print(f"own: steps={step - 2} samples={n * world} seconds={t1 - t0:.6f}")
if torch.distributed.is_initialized():
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
"""


def _user_script(tmp_path: Path) -> Path:
    d = tmp_path / "user"
    d.mkdir()
    (d / "helper.py").write_text("import torch\n\ndef make_model():\n"
                                 "    return torch.nn.Sequential(torch.nn.Linear(32, 64), "
                                 "torch.nn.ReLU(), torch.nn.Linear(64, 4))\n")
    (d / "train.py").write_text(textwrap.dedent(USER_SCRIPT))
    return d


@pytest.mark.slow
def test_script_outside_the_package(tmp_path):
    """A script written here, with a sibling import and its own arguments, run from another
    folder in 2 processes: it sees its argv, the launcher's environment, and a loader with a
    worker. Bugs caught: the script not run as __main__, its folder not on sys.path, argv of
    boot. (One process: test_module_target.)"""
    d = _user_script(tmp_path)
    out = tmp_path / "out"
    p = _wrap(out, d / "train.py", 12, nproc=2, warmup=2, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "argv ['12'] rank 0 world 2 master" in p.stdout
    rec = _result(out)
    assert rec["status"] == "ok"
    _check_figures(rec, p.stdout, 2)
    assert rec["script"]["loader"]["workers"] == 1
    assert rec["audit"]["ok"] is True


def test_module_target(tmp_path):
    """`-- -m package.module ARGS` in one process: found on the caller's path, run as
    __main__, with its argv, the launcher's environment and its loader's worker. Bugs caught:
    the module not run as __main__, argv of boot, the figures of a one-process script."""
    d = _user_script(tmp_path)
    (d / "__init__.py").write_text("")
    (d / "train.py").write_text(textwrap.dedent(USER_SCRIPT).replace(
        "from helper import", "from user.helper import"))
    out = tmp_path / "out"
    p = run_cli("wrap", "--warmup-steps", 2, "--out", out, "--", "-m", "user.train", 24,
                cwd=tmp_path, env={"PYTHONPATH": f"{tmp_path}:{ROOT / 'src'}"})
    assert p.returncode == 0, p.stderr[-3000:]
    assert "argv ['24'] rank 0 world 1 master" in p.stdout
    rec = _result(out)
    assert rec["status"] == "ok" and rec["metrics"]["steps_timed"] == 480 // 24 - 2
    _check_figures(rec, p.stdout, 2)
    assert rec["script"]["loader"]["workers"] == 1 and rec["audit"] is None


RAISES = """
import os, sys, torch
if int(os.environ["WORLD_SIZE"]) > 1:
    torch.distributed.init_process_group("gloo")
m = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 4)),
                                     batch_size=8, num_workers=1)
for i, (x,) in enumerate(loader):
    opt.zero_grad(); m(x).sum().backward(); opt.step()
    if i == 5 and os.environ["RANK"] == os.environ.get("FAIL_RANK", "0"):
        if "EXIT_CODE" in os.environ:
            sys.exit(int(os.environ["EXIT_CODE"]))
        raise ValueError("the user's bug at step 6")
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
"""


@pytest.mark.slow
def test_script_that_raises(tmp_path):
    """Rank 1 raises while rank 0 waits in a collective: status failed naming rank 1 and its
    error, the traceback in the run folder and on stderr as Python prints it, exit code 1,
    and no rank nor loader worker left behind."""
    (tmp_path / "bad.py").write_text(textwrap.dedent(RAISES))
    out = tmp_path / "out"
    t0 = time.time()
    p = run_cli("wrap", "--nproc", 2, "--warmup-steps", 1, "--out", out, "--",
                tmp_path / "bad.py", env={"FAIL_RANK": "1"})
    assert p.returncode == 1, p.stderr[-3000:]
    rec = _result(out)
    assert rec["status"] == "failed"
    assert rec["error"].startswith("rank 1: ValueError: the user's bug at step 6")
    tb = (Path(rec["paths"]["dir"]) / "traceback.txt").read_text()
    assert 'bad.py", line' in tb and "ValueError: the user's bug" in tb
    assert "boot.py" not in tb  # the user's frames, not scaleprobe's
    assert "ValueError: the user's bug at step 6" in p.stderr
    assert rec["script"]["exit_code"] == 1
    _no_rank_left(rec)
    # this job's processes only: another test's leftover is that test's to catch
    assert not [c for c in cliserver.running_descendants() if c.create_time() >= t0 - 1]


def test_the_scripts_exit_code_is_kept_and_scaleprobe_exits_with_its_own(tmp_path):
    """sys.exit(3) in the script: the run is failed with that line, the script's code is in
    the record and printed, and scaleprobe exits 1 (failed). Bug caught: scaleprobe exiting
    3, which is its own code for out of memory."""
    (tmp_path / "bad.py").write_text(textwrap.dedent(RAISES))
    out = tmp_path / "out"
    p = run_cli("wrap", "--warmup-steps", 1, "--out", out, "--", tmp_path / "bad.py",
                env={"EXIT_CODE": "3"})
    assert p.returncode == 1, p.stderr[-3000:]
    assert "exit code: 1 (failed); the script's own was 3" in p.stderr
    rec = _result(out)
    assert rec["status"] == "failed" and "exited with code 3" in rec["error"]
    assert rec["script"]["exit_code"] == 3
    assert rec["metrics"]["steps_done"] == 6  # the steps before the exit are kept
    _no_rank_left(rec)


@pytest.mark.parametrize("argv, needle", [
    (["--", "no_such_script.py"], "script not found: no_such_script.py"),
    ([], "wrap needs a script"),
    (["--", "-m", "no_such_pkg.train"], "no module named 'no_such_pkg.train'"),
    (["--steps", "auto", "--", "x.py"], "--steps"),
])
def test_usage_mistakes_are_one_line(tmp_path, argv, needle):
    (tmp_path / "x.py").write_text("")
    p = run_cli("wrap", "--out", tmp_path / "out", *argv, cwd=tmp_path, timeout=60)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], p.stderr
    assert not (tmp_path / "out").exists()


def test_steps_stops_the_script_cleanly(tmp_path):
    """--steps N: the script stops after N timed steps, status ok, exit 0. Bug caught: the
    stop taken for a failure (exit 1), or counted from the first step instead of after the
    warm-up."""
    out = tmp_path / "out"
    p = _wrap(out, SCRIPTS / "train_plain.py", "--epochs", 50, extra=("--steps", 6))
    assert p.returncode == 0, p.stderr[-3000:]
    assert "own:" not in p.stdout  # it never reached its own end
    rec = _result(out)
    assert rec["status"] == "ok"
    assert rec["metrics"]["steps_timed"] == 6 and rec["metrics"]["steps_done"] == 9
    assert rec["script"]["stopped_after"] == 6
    _no_rank_left(rec)


@pytest.mark.slow
def test_ctrl_c_keeps_the_steps_so_far(tmp_path):
    """Ctrl+C to scaleprobe: the ranks stop, status interrupted with the steps timed so far,
    exit code 130, nothing left running."""
    import signal

    from tests.conftest import start_cli, wait_for

    out = tmp_path / "out"
    proc, out_f, err_f = start_cli(tmp_path, "wrap", "--nproc", 2, "--warmup-steps", 2,
                                   "--out", out, "--", SCRIPTS / "train_ddp.py", "--epochs",
                                   1000, "--samples", 256)
    try:  # the script's second epoch ended: steps were timed
        assert wait_for(lambda: out_f.exists() and "\nepoch 1:" in out_f.read_text(
            errors="replace"), 180, every_s=0.05), err_f.read_text(errors="replace")[-3000:]
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = err_f.read_text(errors="replace")
    assert code == 130, err[-3000:]
    rec = _result(out)
    assert rec["status"] == "interrupted"
    assert rec["metrics"]["steps_timed"] >= 2 * (256 // 2 // 32) - 2
    _no_rank_left(rec)


def test_scale_over_a_script_gives_the_scale_table_and_resumes(tmp_path):
    """`scale --nproc 1,2 -- SCRIPT.py`: the user's script at each count under wrap. Bugs
    caught: the counts not recorded as one scale experiment (no speedup row), the script's
    own options taken as scaleprobe's, a rerun measuring the finished points again, and run
    options a script cannot take (--model) silently ignored."""
    out = tmp_path / "out"
    argv = ("scale", "--nproc", "1,2", "--repeats", 1, "--warmup-steps", 3, "--steps", 20,
            "--out", out, "--", SCRIPTS / "train_ddp.py")
    p = run_cli(*argv, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    runs = [r for r in read_jsonl(out / "results.jsonl") if r["kind"] == "run"]
    # one run per count; an implausible speedup (a baseline caught by load) re-measures both
    assert len(runs) in (2, 4) and all(r["status"] == "ok" for r in runs)
    assert [r["experiment"]["point"]["nproc"] for r in runs] == [1, 2] * (len(runs) // 2)
    assert [r["experiment"]["repeat"] for r in runs] == sorted([0, 0, 1, 1][:len(runs)])
    assert {r["experiment"]["id"] for r in runs} == {"scale-script-train_ddp"}
    assert all(r["experiment"]["kind"] == "scale" and r["script"] for r in runs)
    assert {r["metrics"]["steps_timed"] for r in runs} == {20}
    assert [r["batch"]["world_size"] for r in runs[:2]] == [1, 2]
    assert re.search(r"^\| 2 \| \d+ \| [\d,]+ \| \d+\.\d\dx", p.stdout, re.M), p.stdout
    assert (out / "scale.md").is_file()

    again = run_cli(*argv, timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    assert len([r for r in read_jsonl(out / "results.jsonl") if r["kind"] == "run"]) == len(runs)

    bad = run_cli("scale", "--nproc", "1,2", "--model", "resnet18", "--out", out, "--",
                  SCRIPTS / "train_ddp.py", timeout=60)
    assert bad.returncode == 2
    assert "--model does not apply to a script" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_summaries_and_profiles_under_wrap(tmp_path):
    """--summary-every and --profile-every under wrap, as in `run`. Bugs caught: the options
    refused or silently ignored for a script, TensorBoard without the script's loss (the
    backward it starts from is not seen) or with a samples/s of 0 (the batch of a script is
    not known in advance), traces of one rank only."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "out"
    p = _wrap(out, SCRIPTS / "train_ddp.py", nproc=2,
              extra=("--summary-every", "0.05", "--profile-every", "30", "--steps", "30"))
    assert p.returncode == 0, p.stderr[-2000:]
    rec = _result(out)
    assert rec["status"] == "ok"
    traces = rec["paths"]["traces"]
    assert sorted(Path(t).name for t in traces) == ["trace-rank0-0.json", "trace-rank1-0.json"]
    assert rec["paths"]["top_ops"]
    acc = EventAccumulator(rec["paths"]["tensorboard"])
    acc.Reload()
    losses = [e.value for e in acc.Scalars("train/loss")]
    rates = [e.value for e in acc.Scalars("perf/samples_per_s")]
    assert losses and all(0 < v < 10 for v in losses)
    assert rates and all(v > 0 for v in rates)


def test_sweep_over_a_scripts_own_flags_runs_each_and_resumes(tmp_path):
    """A sweep spec whose base names a script and whose grid varies the script's own flags.
    Bugs caught: the grid's arguments not reaching the script (every point the same batch),
    the base's arguments dropped when a point adds its own, the points sharing one key (the
    second "resumed" from the first), and a rerun measuring the finished points again."""
    spec = tmp_path / "sweep.toml"
    spec.write_text(textwrap.dedent(f"""
        [sweep]
        id = "plain-batch"
        repeats = 1
        [base]
        script = "{SCRIPTS / 'train_plain.py'}"
        args = ["--epochs", "1", "--samples", "512"]
        warmup_steps = 2
        [grid]
        args = [["--batch-size", "16"], ["--batch-size", "32"]]
    """))
    out = tmp_path / "out"
    p = run_cli("sweep", spec, "--out", out, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    runs = [r for r in read_jsonl(out / "results.jsonl") if r["kind"] == "run"]
    assert [r["status"] for r in runs] == ["ok", "ok"]
    assert [r["experiment"]["point"]["args"] for r in runs] == ["--batch-size 16",
                                                               "--batch-size 32"]
    assert [r["script"]["target"][1:] for r in runs] == [
        ["--epochs", "1", "--samples", "512", "--batch-size", b] for b in ("16", "32")]
    assert [r["batch"]["per_process"] for r in runs] == [16, 32]  # as the script ran it
    assert [r["metrics"]["steps_timed"] for r in runs] == [512 // 16 - 2, 512 // 32 - 2]
    assert runs[0]["key"] != runs[1]["key"]
    assert "| --batch-size 16 | ok |" in (out / "sweep.md").read_text()

    again = run_cli("sweep", spec, "--out", out, timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "not rerun" in again.stderr
    assert len([r for r in read_jsonl(out / "results.jsonl") if r["kind"] == "run"]) == 2


HOSTILE = """
import os, torch
m = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
x = torch.randn(8, 4)
if os.environ.get("CHDIR"):
    os.chdir(os.environ["CHDIR"])
for i in range(8):
    opt.zero_grad(); m(x).sum().backward()
    if not os.environ.get("NO_STEP"):
        opt.step()
    if i == 5 and "HARD_EXIT" in os.environ:
        os._exit(int(os.environ["HARD_EXIT"]))
"""


@pytest.mark.parametrize("case", ["chdir, os._exit(0)", "os._exit(5)", "no optimizer step"])
def test_hostile_scripts_lose_no_step_and_are_named(tmp_path, case):
    """Bug caught: a script that os.chdir's with a relative --out wrote its rank files under
    its new folder (0 steps recorded); os._exit(0) left 0 steps and `batch: None`; os._exit(5)
    was named by torch's boilerplate; a script that never calls optimizer.step() said "too
    few steps after warm-up?"."""
    from scaleprobe.run.script import NO_OPTIMIZER_STEP

    (tmp_path / "hostile.py").write_text(HOSTILE)
    (tmp_path / "elsewhere").mkdir()
    env = {"chdir, os._exit(0)": {"CHDIR": str(tmp_path / "elsewhere"), "HARD_EXIT": "0"},
           "os._exit(5)": {"HARD_EXIT": "5"}, "no optimizer step": {"NO_STEP": "1"}}[case]
    p = run_cli("wrap", "--warmup-steps", 1, "--out", "out", "--", "hostile.py", env=env,
                cwd=tmp_path)
    rec = _result(tmp_path / "out")  # the relative --out, resolved before the script ran
    assert not list((tmp_path / "elsewhere").rglob("*")), "files written outside --out"
    m = rec["metrics"]
    if case == "no optimizer step":
        assert p.returncode == 0 and m["steps_done"] == 0, p.stderr[-2000:]
        assert rec["null_reasons"]["step_time_s"] == NO_OPTIMIZER_STEP
        assert "optimizer.step()" in p.stderr
        return
    assert m["steps_done"] == 6 and m["steps_timed"] == 5, (rec, p.stderr[-2000:])
    if case == "os._exit(5)":
        assert p.returncode == 1 and rec["status"] == "failed"
        assert rec["error"].endswith(": the script exited with code 5 (os._exit)"), rec["error"]
        assert rec["script"]["exit_code"] == 5
    else:
        assert p.returncode == 0 and rec["status"] == "ok", p.stderr[-2000:]


FRESH = """
import atexit, os, sys, numpy, torch
rank = os.environ["RANK"]
out = os.environ["OUT"]
m = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for _ in range(4):
    opt.zero_grad(); m(torch.ones(8, 4)).sum().backward(); opt.step()
with open(os.path.join(out, f"rank{rank}.txt"), "w") as f:
    f.write(f"{numpy.random.random()} {torch.rand(1).item()} {torch.get_num_threads()} "
            f"{sys.path[0]}")
atexit.register(lambda: open(os.path.join(out, f"atexit{rank}"), "w").close())
"""


def test_a_forked_rank_starts_as_a_fresh_interpreter(tmp_path):
    """The ranks of a CPU host are forked from the launcher, which imported torch already.
    Bugs caught: every rank drawing the same random numbers, numpy's and torch's (the
    launcher's states, copied), the script's atexit handlers never run (a forked process
    ends without them), the ranks' one thread each ignored (torch read OMP_NUM_THREADS in
    the launcher), and sys.path[0] the launcher's instead of the script's folder."""
    (tmp_path / "fresh.py").write_text(FRESH)
    p = _wrap(tmp_path / "out", tmp_path / "fresh.py", nproc=2, warmup=1,
              env={"OUT": str(tmp_path)})
    assert p.returncode == 0, p.stderr[-2000:]
    rank0, rank1 = ((tmp_path / f"rank{r}.txt").read_text().split() for r in (0, 1))
    np_draws, torch_draws, threads, paths = zip(rank0, rank1, strict=True)
    assert np_draws[0] != np_draws[1] and torch_draws[0] != torch_draws[1]
    assert threads == ("1", "1") and paths == (str(tmp_path),) * 2
    assert (tmp_path / "atexit0").exists() and (tmp_path / "atexit1").exists()
