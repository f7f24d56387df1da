"""One host, each rank behind a cable of its own: ``scaleprobe run --nproc 3 --link
rank2=100mbit`` puts every rank of the job in a network namespace of its own, cabled to one
bridge (``netns.hosts``), rank 2's cable shaped to 100 Mbit/s in each direction and the
others as the spec's first item says (a rate, or unshaped when it names none). Seed 000's
topology (a parameter server whose worker sits behind a slower link) from the command line.
Needs root, ``ip`` and ``tc``.

The launcher and its rendezvous store stay in the host's own namespace, on 127.0.0.1. Each
rank connects to that store first, then moves into its namespace (``setns``, this thread
only: the threads torch and gloo start afterwards follow it) and creates its process group
there, so every collective and message between ranks crosses the shaped cables, while the
store's connection, made before, stays on loopback.

    context(cfg)   the driver side: the namespaces around the launch (``run/builtin.py``)
    join()         the rank side: the store, connected, after entering the rank's namespace;
                   None when the run asked for no per-rank links (``env.init_distributed``)
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
from collections.abc import Iterator
from typing import Any

from scaleprobe.core.errors import ConfigError
from scaleprobe.features.links import rates_mbit
from scaleprobe.netlab import netns

ENV = "SCALEPROBE_RANK_NETNS"  # the namespaces, one per rank, for the ranks to join
CLONE_NEWNET = 0x40000000


@contextlib.contextmanager
def context(spec: str | None, nproc: int, nnodes: int = 1) -> Iterator[None]:
    """The per-rank namespaces for the launch (nothing when ``spec`` names none)."""
    rates = rates_mbit(spec, nproc, nnodes)
    if rates is None:
        yield
        return

    ok, reason = netns.available()
    if not ok:
        raise ConfigError(f"--link {spec} puts each rank in a network namespace: {reason}")
    with netns.hosts(nproc, rates) as hosts:
        ranks = [{"ns": ns, "ifname": ifn, "addr": addr}
                 for ns, ifn, addr in zip(hosts.namespaces, hosts.ifnames, hosts.addrs,
                                          strict=True)]
        saved = os.environ.get(ENV)
        os.environ[ENV] = json.dumps(ranks)
        try:
            yield
        finally:
            if saved is None:
                os.environ.pop(ENV, None)
            else:
                os.environ[ENV] = saved


def enter(ns: str) -> None:
    """Move the calling thread into network namespace ``ns`` (``ip netns add`` made it)."""
    fd = os.open(f"/var/run/netns/{ns}", os.O_RDONLY)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into {ns}: {os.strerror(err)}")
    finally:
        os.close(fd)


def join(timeout: Any) -> Any | None:
    """This rank's store, connected on loopback, after moving into the rank's namespace;
    None without per-rank namespaces. ``timeout``: a ``timedelta``."""
    raw = os.environ.get(ENV)
    if not raw:
        return None
    import torch.distributed as dist  # heavy: torch

    rank = int(os.environ.get("RANK", "0"))
    me = json.loads(raw)[rank]
    store, _, _ = next(dist.rendezvous("env://", timeout=timeout))
    enter(me["ns"])
    os.environ["GLOO_SOCKET_IFNAME"] = me["ifname"]
    return dist.PrefixStore("default_pg", store)
