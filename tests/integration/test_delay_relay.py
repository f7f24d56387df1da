"""Added latency without sch_netem (netlab/delay.py): ``netns.two_hosts(delay_ms=...)`` joins
the namespaces through a relay that holds every packet. A TCP round trip of one byte must
take the two delays (one each way) and little more, and the rate shaping still holds.
Needs root, ip, tc and /dev/net/tun. Measured 2026-11-26 under load average ~14: 1 ms each
way gave a median round trip of 2.37 ms (2.32-5.74 ms, 10th-90th percentile), 967 Mbit/s of
TCP through 1 Gbit/s; unshaped and undelayed the round trip was 0.03 ms.
"""

import os
import subprocess
import sys

import pytest

from scaleprobe.netlab import netns

pytestmark = pytest.mark.root

SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 5002)); s.listen(1); print("ready", flush=True)
c, _ = s.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while True:
    d = c.recv(1 << 20)
    if not d: break
    if d[-1:] in (b"x", b"z"): c.sendall(d[-1:])  # a ping, or the end of the bulk
"""
CLIENT = """
import socket, sys, time
c = socket.create_connection((sys.argv[1], 5002))
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
ts = []
for _ in range(100):
    t = time.perf_counter(); c.sendall(b"x"); c.recv(1); ts.append(time.perf_counter() - t)
buf = b"y" * (1 << 20); t = time.perf_counter()
for _ in range(32): c.sendall(buf)
c.sendall(b"z"); c.recv(1)  # the server has read everything before it answers
rate = 32 * 8 * (1 << 20) / (time.perf_counter() - t) / 1e6
print(sorted(ts)[50], rate)
"""


@pytest.fixture(scope="module")
def harness():
    ok, reason = netns.available()
    if not ok:
        pytest.skip(f"shaped namespaces unavailable here: {reason}")
    if netns.netem_available():
        pytest.skip("this kernel has sch_netem: two_hosts delays with netem, not the relay")
    if not os.path.exists("/dev/net/tun"):
        pytest.skip("no /dev/net/tun for the relay")
    netns.cleanup_stale()


@pytest.mark.timeout(120)
def test_the_relay_adds_its_delay_each_way_and_keeps_the_rate(harness):
    with netns.two_hosts(rate_mbit=200, delay_ms=2.0) as hosts:
        assert hosts.delay_via == "relay" and hosts.ifnames == netns.RELAY_IFNAMES
        # a link takes none of its hosts' CPU: as root the relay runs ahead of the ranks
        policy = os.sched_getscheduler(hosts.procs[0].pid)
        assert hosts.relay_policy == ("fifo" if os.geteuid() == 0 else "other")
        assert policy == (os.SCHED_FIFO if os.geteuid() == 0 else os.SCHED_OTHER)
        srv = hosts.run(1, [sys.executable, "-c", SERVER, hosts.addrs[1]],
                        stdout=subprocess.PIPE, text=True)
        assert srv.stdout.readline().strip() == "ready"
        cli = hosts.run(0, [sys.executable, "-c", CLIENT, hosts.addrs[1]],
                        stdout=subprocess.PIPE, text=True)
        rtt_s, mbit = map(float, cli.communicate(timeout=90)[0].split())
    print(f"\nround trip {rtt_s * 1e3:.2f} ms (2 x 2 ms added), {mbit:.0f} Mbit/s through 200")
    assert 4e-3 <= rtt_s < 12e-3  # both delays; the relay's own time on a busy machine
    assert 120 < mbit < 210  # the token bucket still sets the rate
