"""Two "hosts" on one machine: network namespaces joined by a veth pair with a shaped link.

    with two_hosts(rate_mbit=1000, delay_ms=None) as hosts:
        server = hosts.run(0, ["python", "-m", "scaleprobe", "comm", ...])
        client = hosts.run(1, ["python", "-m", "scaleprobe", "comm", ...])

Each namespace has loopback up and one end of the veth pair (``spv-a`` at 10.213.K.1/24,
``spv-b`` at 10.213.K.2/24, K taken from the process id). The pair never exists outside the
two namespaces, and addresses are private to them, so nothing else on the machine sees this
traffic. Each end shapes what it sends: a token bucket (``tbf``) at ``rate_mbit`` in each
direction (a full-duplex link), with a queue deep enough that TCP never sees drops from it,
and, when ``delay_ms`` is given, a ``netem`` delay behind it (needs the sch_netem module).

Needs root, ``ip`` and ``tc``. Namespaces are named ``sp-<pid>-<n>-a`` / ``-b``; leaving the
block deletes them (and the veth pair) and kills the processes started with ``run`` that are
still alive. ``cleanup_stale()`` removes namespaces left by a process that was killed.
"""

from __future__ import annotations

import functools
import itertools
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

PREFIX = "sp-"
IFNAMES = ("spv-a", "spv-b")
_STALE = re.compile(r"^sp-(\d+)-")
_SEQ = itertools.count()


class NetnsUnavailable(RuntimeError):
    """This machine cannot create shaped namespaces (not root, no ip/tc, missing qdisc)."""


def _ip_quiet(*argv: str) -> subprocess.CompletedProcess:
    """``ip ARGV`` whose failure is not an error (listing, deleting what may be gone)."""
    return subprocess.run(["ip", *argv], capture_output=True, text=True, timeout=30)


def _checked(argv: list[str]) -> subprocess.CompletedProcess:
    p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        raise NetnsUnavailable(f"`{' '.join(argv)}` failed: {p.stderr.strip() or p.returncode}")
    return p


def _tc(ns: str, *argv: str) -> None:
    _checked(["ip", "netns", "exec", ns, "tc", *argv])


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cleanup_stale() -> list[str]:
    """Delete ``sp-<pid>-*`` namespaces whose process is gone; returns their names."""
    if shutil.which("ip") is None:
        return []
    listing = _ip_quiet("netns", "list").stdout
    removed = []
    for line in listing.splitlines():
        name = line.split()[0] if line.strip() else ""
        m = _STALE.match(name)
        if m and not _pid_alive(int(m.group(1))):
            _ip_quiet("netns", "del", name)
            removed.append(name)
    return removed


def tbf_args(rate_mbit: float) -> list[str]:
    """Token bucket settings that hold the rate without starving large TCP transfers.

    burst: 1 ms of traffic but at least 64 KiB (one GSO segment), so segments pass whole;
    limit: 50 ms of traffic but at least 4 MiB of queue, so the sender is slowed by the
    socket's back-pressure, not by drops and retransmissions."""
    rate_byte_s = rate_mbit * 1e6 / 8
    burst = max(64 * 1024 + 1514, int(rate_byte_s * 1e-3))
    limit = max(4 << 20, int(rate_byte_s * 0.05))
    return ["tbf", "rate", f"{rate_mbit:g}mbit", "burst", str(burst), "limit", str(limit)]


@dataclass
class Hosts:
    namespaces: tuple[str, str]
    addrs: tuple[str, str]
    ifnames: tuple[str, str] = IFNAMES
    rate_mbit: float | None = None
    delay_ms: float | None = None
    procs: list[subprocess.Popen] = field(default_factory=list)

    def exec_argv(self, ns_index: int, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.namespaces[ns_index], *map(str, argv)]

    def socket_env(self, ns_index: int) -> dict[str, str]:
        """Point gloo / NCCL at this namespace's veth end."""
        name = self.ifnames[ns_index]
        return {"GLOO_SOCKET_IFNAME": name, "NCCL_SOCKET_IFNAME": name}

    def run(self, ns_index: int, argv: list[str], env: dict[str, str] | None = None,
            **popen_kwargs) -> subprocess.Popen:
        """Start ``argv`` inside namespace ``ns_index`` (0 or 1). The environment is this
        process's, plus ``socket_env(ns_index)``, plus ``env``."""
        full = dict(os.environ)
        full.update(self.socket_env(ns_index))
        full.update(env or {})
        proc = subprocess.Popen(self.exec_argv(ns_index, argv), env=full, **popen_kwargs)
        self.procs.append(proc)
        return proc

    def stop_all(self, grace_s: float = 3.0) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=grace_s)


def _shape(ns: str, dev: str, rate_mbit: float | None, delay_ms: float | None) -> None:
    if rate_mbit is not None:
        _tc(ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", *tbf_args(rate_mbit))
    if delay_ms:
        parent = ["parent", "1:1"] if rate_mbit is not None else ["root"]
        _tc(ns, "qdisc", "add", "dev", dev, *parent, "handle", "10:", "netem",
            "delay", f"{delay_ms:g}ms", "limit", "100000")


def _create(hosts: Hosts) -> None:
    (a, b), (ia, ib) = hosts.namespaces, hosts.ifnames
    _checked(["ip", "netns", "add", a])
    _checked(["ip", "netns", "add", b])
    _checked(["ip", "link", "add", ia, "netns", a, "type", "veth", "peer", "name", ib,
              "netns", b])
    for ns, dev, addr in ((a, ia, hosts.addrs[0]), (b, ib, hosts.addrs[1])):
        _checked(["ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev])
        _checked(["ip", "-n", ns, "link", "set", "lo", "up"])
        _checked(["ip", "-n", ns, "link", "set", dev, "up"])
        _shape(ns, dev, hosts.rate_mbit, hosts.delay_ms)


@contextmanager
def two_hosts(rate_mbit: float | None = None, delay_ms: float | None = None) -> Iterator[Hosts]:
    """Two namespaces joined by a veth pair shaped to ``rate_mbit`` (each direction) and
    ``delay_ms`` (each direction; needs sch_netem). None leaves that part unshaped."""
    ok, reason = available()
    if not ok:
        raise NetnsUnavailable(reason)
    if delay_ms and not netem_available():
        raise NetnsUnavailable("delay shaping needs the sch_netem kernel module, "
                               "which this kernel does not provide")
    if (rate_mbit is not None and rate_mbit <= 0) or (delay_ms is not None and delay_ms < 0):
        raise ValueError("rate must be positive and delay non-negative")
    cleanup_stale()
    pid, seq = os.getpid(), next(_SEQ)
    k = pid % 250 + 1
    hosts = Hosts(namespaces=(f"{PREFIX}{pid}-{seq}-a", f"{PREFIX}{pid}-{seq}-b"),
                  addrs=(f"10.213.{k}.1", f"10.213.{k}.2"), rate_mbit=rate_mbit,
                  delay_ms=delay_ms)
    try:
        _create(hosts)
        yield hosts
    finally:
        hosts.stop_all()
        for ns in hosts.namespaces:
            _ip_quiet("netns", "del", ns)


def _probe(qdisc: list[str]) -> tuple[bool, str]:
    """Create a namespace with a veth pair, try ``qdisc`` on it, delete everything."""
    ns = f"{PREFIX}{os.getpid()}-probe"
    try:
        _checked(["ip", "netns", "add", ns])
        _checked(["ip", "-n", ns, "link", "add", "p0", "type", "veth", "peer", "name", "p1"])
        _tc(ns, "qdisc", "add", "dev", "p0", "root", *qdisc)
        return True, ""
    except (NetnsUnavailable, OSError, subprocess.SubprocessError) as e:
        return False, str(e)
    finally:
        _ip_quiet("netns", "del", ns)


@functools.cache
def available() -> tuple[bool, str]:
    """(True, "") when shaped namespaces can be made here, else (False, the reason)."""
    if os.name != "posix" or os.geteuid() != 0:
        return False, "network namespaces need root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return False, f"'{tool}' (iproute2) is not installed"
    ok, err = _probe(tbf_args(1000))
    return (True, "") if ok else (False, f"cannot create a shaped namespace: {err}")


@functools.cache
def netem_available() -> bool:
    return available()[0] and _probe(["netem", "delay", "1ms"])[0]
