"""Two "hosts" on one machine: network namespaces joined by a veth pair with a shaped link
(``two_hosts``), or more joined through a bridge in a namespace of its own (``hosts``).

Each end shapes what it sends (a token bucket at ``rate_mbit`` with a queue deep enough that
TCP never sees drops, and a ``netem`` delay behind it, or where the kernel has no sch_netem a
relay that holds each packet, netlab/delay.py); the pairs never exist outside the namespaces
and their addresses are private to them. Needs root, ``ip`` and ``tc``. Leaving the block
stops the processes started with ``run`` (each leads its own process group, and whatever is
left inside the namespaces is killed), then deletes the namespaces; ``cleanup_stale()``
removes those left by a process that was killed. docs/COMMUNICATION.md ("Two hosts on one
machine", and the section on more hosts) shows both in use, with the names, addresses,
queue sizes and measured rates.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

PREFIX = "sp-"
IFNAMES = ("spv-a", "spv-b")
RELAY_IFNAMES = ("spt-a", "spt-b")  # the delay relay's TUN devices (no sch_netem)
RELAY_MTU = 64000  # netlab/delay.py: few packets per second for the relay to move
_STALE = re.compile(r"^sp-(\d+)-")
_SEQ = itertools.count()


class NetnsUnavailable(RuntimeError):
    """This machine cannot create shaped namespaces (not root, no ip/tc, missing qdisc)."""


def _ip_quiet(*argv: str) -> subprocess.CompletedProcess[str]:
    """``ip ARGV`` whose failure is not an error (listing, deleting what may be gone)."""
    return subprocess.run(["ip", *argv], capture_output=True, text=True, timeout=30)


def _checked(argv: list[str]) -> subprocess.CompletedProcess[str]:
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
    namespaces: tuple[str, ...]
    addrs: tuple[str, ...]
    ifnames: tuple[str, ...] = IFNAMES
    rate_mbit: float | tuple[float | None, ...] | None = None
    delay_ms: float | None = None
    procs: list[subprocess.Popen[Any]] = field(default_factory=list)
    switch: str | None = None  # the bridge's namespace (``hosts``); None for a veth pair
    groups: list[int] = field(default_factory=list)  # process groups led by ``procs``
    delay_via: str | None = None  # "netem", or "relay" (netlab/delay.py) where there is none
    relay_policy: str | None = None  # the relay's scheduling: "fifo" (real-time) or "other"

    def exec_argv(self, ns_index: int, argv: list[str],
                  cpus: Sequence[int] | None = None) -> list[str]:
        pin = ["taskset", "-c", ",".join(map(str, cpus))] if cpus else []
        return ["ip", "netns", "exec", self.namespaces[ns_index], *pin, *map(str, argv)]

    def socket_env(self, ns_index: int) -> dict[str, str]:
        """Point gloo / NCCL at this namespace's veth end."""
        name = self.ifnames[ns_index]
        return {"GLOO_SOCKET_IFNAME": name, "NCCL_SOCKET_IFNAME": name}

    def run(self, ns_index: int, argv: list[str], env: dict[str, str] | None = None,
            cpus: Sequence[int] | None = None, **popen_kwargs: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside namespace ``ns_index`` (0, 1, ...). The environment is this
        process's, plus ``socket_env(ns_index)``, plus ``env``. ``cpus`` pins the process (and
        what it starts) to those cores, so each "host" has cores of its own, as real hosts do:
        torch sizes its thread pool from the cores it may use. The process leads a session of
        its own, so ``stop_all`` also reaches the processes it started."""
        if cpus and shutil.which("taskset") is None:
            raise NetnsUnavailable("pinning to cores needs 'taskset' (util-linux)")
        full = dict(os.environ)
        full.update(self.socket_env(ns_index))
        full.update(env or {})
        popen_kwargs.setdefault("start_new_session", True)
        proc = subprocess.Popen(self.exec_argv(ns_index, argv, cpus), env=full, **popen_kwargs)
        self.procs.append(proc)
        if popen_kwargs["start_new_session"]:
            self.groups.append(proc.pid)
        return proc

    def pids(self) -> dict[str, list[int]]:
        """Processes still inside each namespace (the bridge's included), by namespace."""
        names = (*self.namespaces, *([self.switch] if self.switch else []))
        return {ns: [int(x) for x in _ip_quiet("netns", "pids", ns).stdout.split()]
                for ns in names}

    def stop_all(self, grace_s: float = 3.0) -> None:
        """Stop what ``run`` started: SIGTERM to each process group, SIGKILL after
        ``grace_s``; then SIGKILL whatever is still inside the namespaces."""
        groups = list(self.groups)
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        _signal_groups(groups, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=grace_s)
        _signal_groups(groups, signal.SIGKILL)
        for pids in self.pids().values():
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def _signal_groups(groups: list[int], sig: int) -> None:
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)


def _shape(ns: str, dev: str, rate_mbit: float | None, delay_ms: float | None) -> None:
    if rate_mbit is not None:
        _tc(ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", *tbf_args(rate_mbit))
    if delay_ms:
        parent = ["parent", "1:1"] if rate_mbit is not None else ["root"]
        _tc(ns, "qdisc", "add", "dev", dev, *parent, "handle", "10:", "netem",
            "delay", f"{delay_ms:g}ms", "limit", "100000")


def _create(hosts: Hosts, rate_mbit: float | None) -> None:
    (a, b), (ia, ib) = hosts.namespaces, hosts.ifnames
    _checked(["ip", "netns", "add", a])
    _checked(["ip", "netns", "add", b])
    _checked(["ip", "link", "add", ia, "netns", a, "type", "veth", "peer", "name", ib,
              "netns", b])
    for ns, dev, addr in ((a, ia, hosts.addrs[0]), (b, ib, hosts.addrs[1])):
        _checked(["ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev])
        _checked(["ip", "-n", ns, "link", "set", "lo", "up"])
        _checked(["ip", "-n", ns, "link", "set", dev, "up"])
        _shape(ns, dev, rate_mbit, hosts.delay_ms)


@contextmanager
def two_hosts(rate_mbit: float | None = None, delay_ms: float | None = None) -> Iterator[Hosts]:
    """Two namespaces joined by a veth pair shaped to ``rate_mbit`` (each direction) and
    ``delay_ms`` (each direction; needs sch_netem). None leaves that part unshaped."""
    ok, reason = available()
    if not ok:
        raise NetnsUnavailable(reason)
    relayed = bool(delay_ms) and not netem_available()
    if relayed and not os.path.exists("/dev/net/tun"):
        raise NetnsUnavailable("delay shaping needs the sch_netem kernel module or "
                               "/dev/net/tun (a delay relay); this machine has neither")
    if (rate_mbit is not None and rate_mbit <= 0) or (delay_ms is not None and delay_ms < 0):
        raise ValueError("rate must be positive and delay non-negative")
    cleanup_stale()
    pid, seq = os.getpid(), next(_SEQ)
    k = pid % 250 + 1
    hosts = Hosts(namespaces=(f"{PREFIX}{pid}-{seq}-a", f"{PREFIX}{pid}-{seq}-b"),
                  addrs=(f"10.213.{k}.1", f"10.213.{k}.2"), rate_mbit=rate_mbit,
                  delay_ms=delay_ms, ifnames=RELAY_IFNAMES if relayed else IFNAMES,
                  delay_via=("relay" if relayed else "netem") if delay_ms else None)
    try:
        _create_relayed(hosts, rate_mbit) if relayed else _create(hosts, rate_mbit)
        yield hosts
    finally:
        _teardown(hosts)


def _create_relayed(hosts: Hosts, rate_mbit: float | None, ready_s: float = 30.0) -> None:
    """Two namespaces joined through the delay relay (netlab/delay.py): a TUN device in
    each, the relay between them; each device shaped to the rate (token bucket)."""
    (a, b), (ia, ib) = hosts.namespaces, hosts.ifnames
    for ns in (a, b):
        _checked(["ip", "netns", "add", ns])
        _checked(["ip", "-n", ns, "link", "set", "lo", "up"])
    proc = subprocess.Popen([sys.executable, "-m", "scaleprobe.netlab.delay", a, ia, b, ib,
                             f"{hosts.delay_ms:g}"], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    hosts.procs.append(proc)
    hosts.groups.append(proc.pid)
    out = proc.stdout
    assert out is not None  # stdout=PIPE
    ready, _, _ = select.select([out], [], [], ready_s)
    words = out.readline().split() if ready else []
    if words[:1] != ["ready"]:
        raise NetnsUnavailable(f"the delay relay did not start (exit {proc.poll()})")
    hosts.relay_policy = words[1] if len(words) > 1 else None
    for ns, dev, addr, peer in ((a, ia, *hosts.addrs), (b, ib, *reversed(hosts.addrs))):
        _checked(["ip", "-n", ns, "link", "set", dev, "mtu", str(RELAY_MTU)])
        _checked(["ip", "-n", ns, "addr", "add", addr, "peer", f"{peer}/32", "dev", dev])
        _checked(["ip", "-n", ns, "link", "set", dev, "up"])
        _shape(ns, dev, rate_mbit, None)


def _teardown(hosts: Hosts) -> None:
    hosts.stop_all()
    for ns in (*hosts.namespaces, *([hosts.switch] if hosts.switch else [])):
        _ip_quiet("netns", "del", ns)


def _per_host_rates(n: int, rate_mbit: float | Sequence[float | None] | None
                    ) -> tuple[float | None, ...]:
    if rate_mbit is None or isinstance(rate_mbit, (int, float)):
        rates: tuple[float | None, ...] = (rate_mbit,) * n
    else:
        rates = tuple(rate_mbit)
    if len(rates) != n:
        raise ValueError(f"{len(rates)} rates for {n} hosts")
    if any(r is not None and r <= 0 for r in rates):
        raise ValueError("rates must be positive")
    return rates


def _create_switched(hosts: Hosts, sw: str, rates: tuple[float | None, ...]) -> None:
    _checked(["ip", "netns", "add", sw])
    _checked(["ip", "-n", sw, "link", "set", "lo", "up"])
    _checked(["ip", "-n", sw, "link", "add", "spbr", "type", "bridge"])
    _checked(["ip", "-n", sw, "link", "set", "spbr", "up"])
    for i, (ns, dev, addr) in enumerate(zip(hosts.namespaces, hosts.ifnames, hosts.addrs,
                                            strict=True)):
        port = f"spp-h{i}"
        _checked(["ip", "netns", "add", ns])
        _checked(["ip", "link", "add", dev, "netns", ns, "type", "veth", "peer", "name", port,
                  "netns", sw])
        _checked(["ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev])
        _checked(["ip", "-n", ns, "link", "set", "lo", "up"])
        _checked(["ip", "-n", ns, "link", "set", dev, "up"])
        _checked(["ip", "-n", sw, "link", "set", port, "master", "spbr"])
        _checked(["ip", "-n", sw, "link", "set", port, "up"])
        _shape(ns, dev, rates[i], None)  # what host i sends
        _shape(sw, port, rates[i], None)  # what host i receives


@contextmanager
def hosts(n: int, rate_mbit: float | Sequence[float | None] | None = None) -> Iterator[Hosts]:
    """``n`` hosts, each in its own namespace, cabled to one bridge (in a namespace of its
    own). ``rate_mbit``: one rate for every host's cable, or one per host (None = unshaped);
    each cable is shaped in both directions."""
    ok, reason = available()
    if not ok:
        raise NetnsUnavailable(reason)
    if not 2 <= n <= 16:
        raise ValueError(f"hosts() makes 2 to 16 hosts, not {n}")
    rates = _per_host_rates(n, rate_mbit)
    cleanup_stale()
    pid, seq = os.getpid(), next(_SEQ)
    k = pid % 250 + 1
    switch = f"{PREFIX}{pid}-{seq}-sw"
    hosts_ = Hosts(namespaces=tuple(f"{PREFIX}{pid}-{seq}-h{i}" for i in range(n)),
                   addrs=tuple(f"10.213.{k}.{i + 1}" for i in range(n)),
                   ifnames=tuple(f"spv-h{i}" for i in range(n)), rate_mbit=rates,
                   switch=switch)
    try:
        _create_switched(hosts_, switch, rates)
        yield hosts_
    finally:
        _teardown(hosts_)


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
