"""Two "hosts" in network namespaces joined by a shaped veth link (needs root, ip and tc).

The communication benchmark runs with one process per namespace, rendezvous on the first
namespace's address, and the cost model must predict its all_reduce time from the link rate
alone. Rates are 200 Mbit/s and 1 Gbit/s: at 10 Gbit/s this 2-core machine, not the link,
sets the pace (see docs/COMMUNICATION.md).
"""

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from scaleprobe.core.results import read_jsonl
from scaleprobe.features.links import Link
from scaleprobe.netlab import netns
from scaleprobe.predict.costmodel import comm_time_s
from tests.conftest import run_cli

pytestmark = pytest.mark.root

RATES_MBIT = (200, 1000)
SIZES = "1M,4M,16M"
LARGE_BYTES = (4 << 20, 16 << 20)
PORT = 29500


@pytest.fixture(scope="module")
def harness():
    ok, reason = netns.available()
    if not ok:
        pytest.skip(f"shaped namespaces unavailable here: {reason}")
    netns.cleanup_stale()
    # the kernel on the reference machine has no sch_netem: no delay shaping there
    return 0.5 if netns.netem_available() else None


def _namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


@pytest.mark.timeout(30)
def test_namespaces_removed_after_an_error(harness):
    with pytest.raises(RuntimeError, match="boom"):
        with netns.two_hosts(rate_mbit=1000) as hosts:
            names = set(hosts.namespaces)
            assert names <= _namespaces()
            sleeper = hosts.run(1, ["sleep", "60"])
            raise RuntimeError("boom")
    assert not names & _namespaces()
    assert sleeper.poll() is not None  # processes started inside were stopped


@pytest.mark.timeout(30)
def test_stale_namespaces_of_dead_processes_are_removed(harness):
    dead = subprocess.Popen(["true"])
    dead.wait()
    name = f"sp-{dead.pid}-0-a"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        assert name in netns.cleanup_stale()
        assert name not in _namespaces()
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


RECEIVER = """
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 5001)); s.listen(1); print("ready", flush=True)
c, _ = s.accept(); n = 0; t0 = None
while True:
    d = c.recv(1 << 20)
    if not d: break
    t0 = t0 or time.perf_counter(); n += len(d)
print(n * 8 / (time.perf_counter() - t0) / 1e6)
"""
SENDER = """
import socket, sys
s = socket.create_connection((sys.argv[1], 5001)); block = b"x" * (1 << 20)
for _ in range(int(sys.argv[2])): s.sendall(block)
s.close()
"""


@pytest.mark.timeout(30)
def test_shaped_link_carries_its_rate(harness):
    with netns.two_hosts(rate_mbit=1000) as hosts:
        recv = hosts.run(0, [sys.executable, "-c", RECEIVER, hosts.addrs[0]],
                         stdout=subprocess.PIPE, text=True)
        assert recv.stdout.readline().strip() == "ready"
        send = hosts.run(1, [sys.executable, "-c", SENDER, hosts.addrs[0], "32"])
        assert send.wait(timeout=20) == 0
        goodput_mbit = float(recv.communicate(timeout=20)[0].strip())
    # TCP/IP headers take ~5% of a 1500-byte frame
    assert 800 < goodput_mbit < 1020, f"{goodput_mbit:.0f} Mbit/s through a 1000 Mbit/s link"


def _comm_pair(rate_mbit: float, delay_ms: float | None, out) -> dict:
    with netns.two_hosts(rate_mbit=rate_mbit, delay_ms=delay_ms) as hosts:
        def host(node: int):  # forked inside the host's namespace: no import of torch to pay
            return run_cli("comm", "--nproc", "1", "--nnodes", "2", "--node-rank", node,
                           "--rdzv-endpoint", f"{hosts.addrs[0]}:{PORT}", "--ops", "all_reduce",
                           "--sizes", SIZES, "--iters", "3", "--warmup", "1", "--timeout", "60",
                           "--out", out / f"node{node}", timeout=75,
                           env=hosts.socket_env(node), netns=hosts.namespaces[node])

        with ThreadPoolExecutor(2) as pool:
            done = list(pool.map(host, (0, 1)))
    for p in done:
        assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    return read_jsonl(out / "node0" / "results.jsonl")[-1]


@pytest.fixture(scope="module")
def measured(harness, tmp_path_factory):
    out, t0, recs = tmp_path_factory.mktemp("netns"), time.perf_counter(), {}
    for rate in RATES_MBIT:
        recs[rate] = _comm_pair(rate, harness, out / f"r{rate}")
    return recs, time.perf_counter() - t0, harness


# Measured (2026-11-24, load average 4-12 from other work on the 2 cores, 3 runs of the
# fixture): all_reduce measured/model 1.05-1.125 (payload only: TCP/IP headers and gloo's
# framing make the measurement a little slower, never faster, than the shaped rate); bus
# bandwidth 0.188-0.189 Gbit/s at 200 Mbit/s, 0.91-0.98 at 1 Gbit/s (ratio 4.83-5.21).
RATIO_RANGE = (0.9, 1.3)  # below: the model over-predicts; above 1.3: 15% beyond the worst seen


@pytest.mark.slow
@pytest.mark.timeout(170)
def test_allreduce_time_follows_the_link_rate(measured):
    """Bug caught: a model or a benchmark off by a factor (bits for bytes: 8x; one of the
    ring's two phases, reduce-scatter or all-gather, forgotten: 2x), or a benchmark that no
    longer measures the link (CPU-bound: the ratio grows with the rate).
    The fixture's wall time (42-50 s, mostly starting four Python processes) is not checked;
    the timeout bounds it."""
    recs, _, delay_ms = measured
    for rate, rec in recs.items():
        assert rec["world_size"] == 2 and rec["nnodes"] == 2
        link = Link("shaped", rate / 1000, (delay_ms or 0.0) / 1000, "test")
        for row in rec["rows"]:
            if row["size_bytes"] in LARGE_BYTES:
                predicted = comm_time_s("allreduce", row["size_bytes"], 2, link)
                ratio = row["time_s"] / predicted
                assert RATIO_RANGE[0] < ratio < RATIO_RANGE[1], (
                    f"{rate} Mbit/s, {row['size_bytes']} B: measured {row['time_s']:.4f} s, "
                    f"model {predicted:.4f} s")


@pytest.mark.slow
def test_measured_bandwidth_differs_between_rates(measured):
    """The measured bus bandwidth follows the link: within 15% of 200 Mbit/s on the slow link
    (measured -6%), and at least 4x that on the 5x faster one (measured 4.83-5.21x). Bug
    caught: a fit or a busbw factor that does not reflect the link, or a measurement that is
    CPU-bound at 1 Gbit/s."""
    recs, _, _ = measured
    slow, fast = (recs[r]["fit"]["all_reduce"]["busbw_gbit_s"] for r in RATES_MBIT)
    assert fast / slow > 0.8 * RATES_MBIT[1] / RATES_MBIT[0], (slow, fast)
    assert slow == pytest.approx(RATES_MBIT[0] / 1000, rel=0.15)
