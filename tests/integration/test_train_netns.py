"""Training across shaped links: ``scaleprobe run`` with one process per network namespace
(needs root, ip, tc and taskset).

Two hosts joined by one shaped veth link run ddp at 200 Mbit/s and 1 Gbit/s; the network
model's prediction for the run (``comm.prediction.comm_s``, told the rate with ``--link``) must
be within +-30% of the exposed communication measured in the run (``comm.exposed_s``). Three
hosts on a bridge, the first behind a 1 Gbit/s link and the others unshaped, run ps (the
server alone on the slow host) and ddp: all-reduce must spend less time communicating per step
than the parameter server and train more samples per second, as the model says.

The model: ``mlp`` at 64x64 inputs, 3.15 M parameters, 12.6 MB of fp32 gradients, 99.9% of
them in the first layer. That layer's gradient is the last one the backward pass computes, so
DDP has nothing to hide its all-reduce under and the comm hook's in-step measure
(``comm.exposed_s``) sees the whole transfer; and at 1 Gbit/s the transfer (101 ms) is 5-10 times the compute of a step
(10-20 ms), so CPU noise cannot hide it. (digits_cnn's 267 KB would take 2 ms at 1 Gbit/s.)

Each host is pinned to a core of its own (``cpus=``), as separate machines would be: unpinned,
every "host" sizes torch's thread pool to both cores, two hosts run four compute threads on two
cores, and the oversubscribed cores delay gloo's network threads too (see docs/COMMUNICATION.md,
"Measured across shaped links").

A run whose measured/predicted ratio falls outside +-30% is repeated once, and both attempts
are printed: on a quiet machine the ratios are 1.01-1.10, but other work on the two cores
delays every step of gloo's ring and has pushed a 1 Gbit/s run to 1.38. The tolerance itself
is never widened. Measured 2026-11-24 (three runs of this file, load average 2-6 from other
work): 2 hosts at 200 Mbit/s 1.07-1.11, at 1 Gbit/s 1.12-1.15; 3 hosts, ps 1.00-1.12 and ddp
1.08-1.21; every run within the tolerance at the first attempt. The model's other claims, with
the same runs: comm at 200 Mbit/s 4.6-4.8x that at 1 Gbit/s (model 5x, asserted > 3x); ps
2.7-2.8x ddp's comm behind the slow server link (model 3x, asserted > 1.5x). Each bound sits
below the measured factor by more than the 30% that load has moved one run, and far above the
1x of a run whose communication does not go over the shaped link. Since each host's process is
forked from the tests' CLI server inside its namespace and the no_sync cross-check is off
(2026-11-28, quiet, load average 0.5): 1.06 and 1.07 on two hosts, ps 1.03 and ddp 1.09 on
three, the two fixtures 16 s and 11 s (34 s and 31 s before).
"""

import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from scaleprobe.core.results import read_jsonl
from scaleprobe.netlab import netns
from tests.conftest import run_cli

pytestmark = [pytest.mark.root, pytest.mark.slow]

RATES_MBIT = (200, 1000)
SERVER_LINK_MBIT = 1000
TOLERANCE = 0.3  # +-30%: predicted comm time against the measured one
ATTEMPTS = 2  # a run outside the tolerance is repeated once (see _measure)
TRAIN = ["--model", "mlp", "--dataset", "synthetic", "--image-size", "64", "--num-samples",
         "1024", "--batch-size", "32", "--loader", "naive", "--steps", "10", "--warmup-steps",
         "2", "--timeout", "60", "--no-progress"]
# the no_sync cross-check is off: the in-step measure is what the model is held against, and
# the check's alternating phases took half of each run (7 s at 200 Mbit/s)
RUN_TIMEOUT_S = 110


@pytest.fixture(scope="module")
def harness():
    ok, reason = netns.available()
    if not ok:
        pytest.skip(f"shaped namespaces unavailable here: {reason}")
    if shutil.which("taskset") is None:
        pytest.skip("pinning each host to a core needs 'taskset' (util-linux)")
    netns.cleanup_stale()


def _namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _cpus(n_hosts: int) -> list[list[int]]:
    """One core per host, round robin over the cores this process may use."""
    cores = sorted(os.sched_getaffinity(0))
    return [[cores[i % len(cores)]] for i in range(n_hosts)]


def _train(hosts: netns.Hosts, strategy: str, rate_mbit: int, port: int, out) -> dict:
    """``scaleprobe run`` on every host (one process each, inside the host's namespace and
    pinned to its core, forked from the tests' CLI server: no host pays torch's import);
    rank 0's host's result."""
    n = len(hosts.namespaces)

    def host(node: int, cpus: list[int]):
        argv = ["run", "--strategy", strategy, "--nproc", 1, "--nnodes", n, "--node-rank", node,
                "--rdzv-endpoint", f"{hosts.addrs[0]}:{port}", "--link", f"{rate_mbit}mbit",
                *TRAIN, "--out", out / f"node{node}",
                "--set", "dist.calibrate_comm=false"]
        return run_cli(*argv, timeout=RUN_TIMEOUT_S, env=hosts.socket_env(node),
                       netns=hosts.namespaces[node], cpus=cpus)

    with ThreadPoolExecutor(n) as pool:
        done = list(pool.map(host, range(n), _cpus(n)))
    for node, p in enumerate(done):
        assert p.returncode == 0, f"host {node}:\n{(p.stdout + p.stderr)[-3000:]}"
    assert not _left_behind(hosts), "processes left inside the namespaces after the run"
    rec = read_jsonl(out / "node0" / "results.jsonl")[-1]
    assert rec["status"] == "ok", rec.get("error")
    return rec


def _left_behind(hosts: netns.Hosts, wait_s: float = 5.0) -> dict[str, list[int]]:
    """Processes still inside the namespaces ``wait_s`` after every host's command ended."""
    deadline = time.monotonic() + wait_s
    while True:
        left = {ns: pids for ns, pids in hosts.pids().items() if pids}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _figures(rec: dict) -> dict:
    c, m = rec["comm"], rec["metrics"]
    trainers = [r["samples_per_s"] for r in rec["ranks"] if r["samples_per_s"]]
    return {"measured_s": c["exposed_s"], "predicted_s": c["prediction"]["comm_s"],
            "step_s": m["step_time_s"]["median"],
            "samples_per_s": m["samples_per_s"], "per_worker_samples_per_s": trainers,
            "grad_bytes": c["prediction"]["grad_bytes"], "world_size": rec["batch"]["world_size"]}


def _line(label: str, f: dict) -> str:
    return (f"{label}: measured {f['measured_s'] * 1e3:.1f} ms, "
            f"model {f['predicted_s'] * 1e3:.1f} ms, ratio {f['measured_s'] / f['predicted_s']:.2f}"
            f"; step {f['step_s'] * 1e3:.1f} ms, {f['samples_per_s']:.1f} samples/s, per worker "
            + ", ".join(f"{v:.1f}" for v in f["per_worker_samples_per_s"]))


def _within(f: dict) -> bool:
    return abs(f["measured_s"] / f["predicted_s"] - 1) <= TOLERANCE


def _measure(hosts: netns.Hosts, strategy: str, rate_mbit: int, port: int, out,
             label: str) -> dict:
    """One run; a second one only when the first falls outside the tolerance (a timing test
    on a 2-core machine that may share its cores with other work). Every attempt is printed
    and kept under "attempts"; the figures are the last attempt's."""
    attempts = []
    for i in range(ATTEMPTS):
        rec = _train(hosts, strategy, rate_mbit, port + i, out / f"{strategy}-{i}")
        f = _figures(rec)
        f["server"] = rec["comm"].get("server")
        attempts.append(f)
        print(f"\n{label}, attempt {i + 1}: " + _line(strategy, f))
        if _within(f):
            break
    return {**attempts[-1], "attempts": attempts}


@pytest.fixture(scope="module")
def two_host_ddp(harness, tmp_path_factory):
    out, t0, figs = tmp_path_factory.mktemp("train2"), time.perf_counter(), {}
    for rate in RATES_MBIT:
        with netns.two_hosts(rate_mbit=rate) as hosts:
            figs[rate] = _measure(hosts, "ddp", rate, 29520, out / f"r{rate}",
                                  f"2 hosts, {rate} Mbit/s")
    return figs, time.perf_counter() - t0


@pytest.fixture(scope="module")
def three_host_ps_ddp(harness, tmp_path_factory):
    out, t0, figs = tmp_path_factory.mktemp("train3"), time.perf_counter(), {}
    with netns.hosts(3, rate_mbit=[SERVER_LINK_MBIT, None, None]) as hosts:
        for port, strategy in ((29530, "ps"), (29540, "ddp")):
            figs[strategy] = _measure(hosts, strategy, SERVER_LINK_MBIT, port, out,
                                      f"3 hosts, host 0 at {SERVER_LINK_MBIT} Mbit/s")
    return figs, time.perf_counter() - t0


@pytest.mark.timeout(200)
def test_ddp_comm_time_matches_the_model_at_both_rates(two_host_ddp):
    figs, wall_s = two_host_ddp
    for rate, f in figs.items():
        assert f["world_size"] == 2
        ratio = f["measured_s"] / f["predicted_s"]
        assert abs(ratio - 1) <= TOLERANCE, f"{rate} Mbit/s: {_line('ddp', f)}"
    print(f"\nshaped ddp runs on two hosts: {wall_s:.0f} s")


@pytest.mark.timeout(30)
def test_ddp_comm_grows_on_the_slower_link(two_host_ddp):
    figs, _ = two_host_ddp
    slow, fast = (figs[r] for r in RATES_MBIT)
    # the model says 5x; the fixed costs of a step make it a little less
    assert slow["measured_s"] > 3 * fast["measured_s"], (slow, fast)
    assert slow["samples_per_s"] < fast["samples_per_s"]


@pytest.mark.timeout(260)
def test_allreduce_beats_parameter_server_behind_a_slow_server_link(three_host_ps_ddp):
    figs, wall_s = three_host_ps_ddp
    ps, ddp = figs["ps"], figs["ddp"]
    assert ps["world_size"] == ddp["world_size"] == 3
    assert ps["server"]["role"] == "server" and ps["server"]["updates"] > 0
    # the model: ps carries 4 S over the server's link, the ring 4/3 S per direction
    assert ps["predicted_s"] == pytest.approx(3 * ddp["predicted_s"], rel=0.01)
    assert ps["measured_s"] > 1.5 * ddp["measured_s"], (ps, ddp)
    assert ps["samples_per_s"] < ddp["samples_per_s"]
    assert max(ps["per_worker_samples_per_s"]) < min(ddp["per_worker_samples_per_s"])
    for name, f in (("ps", ps), ("ddp", ddp)):
        ratio = f["measured_s"] / f["predicted_s"]
        assert abs(ratio - 1) <= TOLERANCE, _line(name, f)
    print(f"\nps and ddp on three shaped hosts: {wall_s:.0f} s")


@pytest.mark.timeout(30)
def test_three_hosts_are_removed_after_an_error(harness):
    with pytest.raises(RuntimeError, match="boom"):
        with netns.hosts(3, rate_mbit=[200, None, None]) as hosts:
            names = {*hosts.namespaces, hosts.switch}
            assert names <= _namespaces()
            # a child that starts a grandchild: both must go
            shell = hosts.run(2, ["sh", "-c", "sleep 60 & sleep 60"])
            time.sleep(0.3)
            inside = [pid for pids in hosts.pids().values() for pid in pids]
            assert len(inside) >= 2
            raise RuntimeError("boom")
    assert not names & _namespaces()
    assert shell.poll() is not None
    for pid in inside:
        stat = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True,
                              text=True).stdout.strip()
        assert stat in ("", "Z"), f"process {pid} survived: {stat}"
