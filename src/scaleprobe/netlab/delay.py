"""Added latency between two network namespaces where the kernel has no ``sch_netem``: a
relay that holds every packet for a fixed time. Root, ``/dev/net/tun``.

    python -m scaleprobe.netlab.delay NS_A IF_A NS_B IF_B DELAY_MS

The relay creates a TUN device ``IF_A`` in namespace ``NS_A`` and ``IF_B`` in ``NS_B`` (it
opens ``/dev/net/tun`` inside each, entering it with ``setns``), prints ``ready`` and then
copies each IP packet that one namespace sends out of its device into the other's device,
``DELAY_MS`` after it was read, in order (a fixed delay keeps each direction a FIFO). The
devices are not persistent: they go when the relay ends. ``netns.two_hosts`` configures them
(addresses, MTU, a token bucket on each for the rate) once the relay is ready.

The devices carry a 64000-byte MTU, so that at 1 Gbit/s the relay moves ~2,000 packets a
second each way (a few percent of a core) rather than ~80,000. What it adds beyond the delay
is its own scheduling: a packet is written when the relay gets the CPU after its time. A link
takes none of its hosts' CPU, so where it may (root) the relay runs under the real-time
policy ``SCHED_FIFO``: it takes a core the moment a packet is due, ahead of the ranks that
share the machine, rather than queueing behind them. It prints ``ready fifo`` then, or
``ready other`` where the policy was refused, and a packet on a busy machine can then be
written later (``docs/COMMUNICATION.md`` gives what was measured either way).
"""

from __future__ import annotations

import collections
import ctypes
import errno
import fcntl
import os
import select
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000
CLONE_NEWNET = 0x40000000
MTU = 64000
FIFO_PRIORITY = 10  # above every normal process; the kernel still keeps 5% of each second


def _setns(ns: str) -> None:
    fd = os.open(f"/var/run/netns/{ns}", os.O_RDONLY)
    try:
        if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into {ns}: {os.strerror(err)}")
    finally:
        os.close(fd)


def open_tun(ns: str, ifname: str) -> int:
    """A TUN device ``ifname`` created in namespace ``ns``; its file descriptor."""
    _setns(ns)
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", ifname.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def relay(fa: int, fb: int, delay_s: float) -> None:
    """Copy packets a -> b and b -> a, each ``delay_s`` after it was read, until killed."""
    # (due time, packet) read from the key
    queues: dict[int, collections.deque[tuple[float, bytes]]] = {
        fa: collections.deque(), fb: collections.deque()}
    other = {fa: fb, fb: fa}
    while True:
        now = time.monotonic()
        for src, q in queues.items():
            while q and q[0][0] <= now:
                _, data = q.popleft()
                try:
                    os.write(other[src], data)
                except BlockingIOError:  # the other side's queue is full: a drop, as a link
                    pass
                except OSError as e:  # EIO: the other device is not up (yet): a drop
                    if e.errno != errno.EIO:
                        raise
        heads = [q[0][0] for q in queues.values() if q]
        timeout = max(0.0, min(heads) - now) if heads else 1.0
        ready, _, _ = select.select([fa, fb], [], [], timeout)
        now = time.monotonic()
        for fd in ready:
            for _ in range(64):  # what is there now, in one go
                try:
                    data = os.read(fd, MTU + 100)
                except BlockingIOError:
                    break
                queues[fd].append((now + delay_s, data))


def realtime() -> str:
    """Run this process under ``SCHED_FIFO`` where allowed: "fifo", or "other" if refused."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(FIFO_PRIORITY))
    except (AttributeError, OSError):  # no such call here, or not root (EPERM)
        return "other"
    return "fifo"


def main(argv: list[str]) -> int:
    ns_a, if_a, ns_b, if_b, delay_ms = argv
    fa = open_tun(ns_a, if_a)
    fb = open_tun(ns_b, if_b)
    print("ready", realtime(), flush=True)
    try:
        relay(fa, fb, float(delay_ms) / 1000.0)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
