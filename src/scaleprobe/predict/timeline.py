"""The timeline of a data-parallel step, laid out from one measured run. No torch.

Each function takes, per step, every rank's compute as a one-rank run measured it
(``Compute``: data, h2d, forward, backward, optimizer) and returns every rank's step with
its phases as a multi-rank run would record them (``RankStep``: the wait on communication in
``comm``). Steps follow each other per rank, so a rank that finished early waits at the next
collective for the slowest (what a synchronous job does every step). How each strategy's
communication is laid out (ddp's buckets, the parameter server's pushes and replies through
predict/fluid.py, local SGD's averaging, FSDP's per-unit collectives with and without
prefetch) is docs/COMMUNICATION.md's step model table. A collective that starts on an idle
link (every rank computed until it) costs ``wake_s`` more: on the CPU, gloo's threads woken
from sleep (``Link.wake_s``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scaleprobe.predict.fluid import Transfer, finish_times

Cost = Callable[[float], float]  # seconds to move this many bytes (one collective / message)


@dataclass(frozen=True)
class Compute:
    """One rank's compute in one step, seconds, as a one-rank run measured it."""

    data: float = 0.0
    h2d: float = 0.0
    forward: float = 0.0
    backward: float = 0.0
    optimizer: float = 0.0

    @property
    def before_backward(self) -> float:
        return self.data + self.h2d + self.forward

    @property
    def total(self) -> float:
        return self.before_backward + self.backward + self.optimizer


@dataclass(frozen=True)
class Bucket:
    """A DDP gradient bucket: bytes, when it is ready (a fraction of the backward phase),
    and what its all-reduce cost on one rank (``local_s``: no wire crossed)."""

    nbytes: float
    ready_fraction: float
    local_s: float = 0.0


@dataclass
class RankStep:
    """One rank's predicted step: its phases add up to ``step_s``."""

    step_s: float
    data: float = 0.0
    h2d: float = 0.0
    forward: float = 0.0
    backward: float = 0.0
    optimizer: float = 0.0
    comm: float = 0.0


def _ddp_tail(c: Compute, buckets: Sequence[Bucket]) -> float:
    """The part of the one-rank backward after its own last all-reduce (buckets copied back
    to the gradients): backward minus the end of the one-rank chain of all-reduces."""
    end = 0.0
    for b in buckets:
        end = max(b.ready_fraction * c.backward, end) + b.local_s
    return max(0.0, c.backward - end)


# gloo's threads sleep once their link has been idle this long: a 200 KB all-gather between
# 2 processes over loopback took 0.31-0.38 ms after 0-3 ms of compute, 0.45 and 1.69 ms after
# 5 ms, 1.4-1.9 ms after 10 and 3.7 ms after 20 (60 calls each, twice, 2026-11-29)
WAKE_IDLE_S = 4e-3


def _on_link(link: float, issued: float, seconds: float, wake_s: float) -> float:
    """When a collective issued at ``issued`` ends on a link busy until ``link``: after the
    one before it; at once where the link was idle; ``wake_s`` later where it was idle for
    longer than ``WAKE_IDLE_S`` (the first of a step always)."""
    if issued <= link:
        return link + seconds
    return issued + (wake_s if issued - link > WAKE_IDLE_S else 0.0) + seconds


def _spans(buckets: Sequence[Bucket], ready: list[list[float]],
           allreduce_s: Cost, wake_s: float = 0.0) -> list[tuple[float, float]]:
    """Each bucket's all-reduce on the link: it starts when every rank has it ready and the
    bucket before it is done, and lasts its local time plus the transfer."""
    link, out = -float("inf"), []
    for i, b in enumerate(buckets):
        start = max(max(r[i] for r in ready), link)
        link = _on_link(link, start, b.local_s + allreduce_s(b.nbytes), wake_s)
        out.append((start, link))
    return out


def _overlap_cpu(buckets: Sequence[Bucket], spans: list[tuple[float, float]], t0: float,
                 t1: float, cpu_s_per_byte: float) -> float:
    """The collective's CPU time that falls inside one rank's backward ``[t0, t1]``: each
    bucket's bytes x ``cpu_s_per_byte``, in the share of its all-reduce inside the window."""
    got = 0.0
    for b, (s, e) in zip(buckets, spans, strict=True):
        if e > s:
            got += b.nbytes * cpu_s_per_byte * max(0.0, min(e, t1) - max(s, t0)) / (e - s)
    return got


def ddp_steps(steps: Sequence[Sequence[Compute]], buckets: Sequence[Bucket],
              allreduce_s: Cost, cpu_s_per_byte: float = 0.0,
              wake_s: float = 0.0, broadcast_s: float = 0.0) -> list[list[RankStep]]:
    """DDP: ``steps[k][r]`` rank r's compute in step k; ``allreduce_s(bytes)`` the transfer
    of one bucket's all-reduce over every rank. One rank: the compute as measured.
    ``cpu_s_per_byte``: the collective's CPU time per byte on a rank's own cores (a comm fit's,
    on the CPU); the part of it that runs while the rank's backward still computes delays
    that backward by as much (one pass: the buckets laid out again after it).
    ``broadcast_s``: the model's buffers broadcast from rank 0 before every forward: every
    rank's forward starts that long after the last rank has its batch (in its forward)."""
    if not buckets:
        raise ValueError("DDP's timeline needs at least one gradient bucket")
    world = len(steps[0]) if steps else 0
    t = [0.0] * world
    out: list[list[RankStep]] = []
    tails: dict[int, float] = {}  # per drawn row (rows repeat: drawn from one run's steps)
    for row in steps:
        if world == 1:
            c = row[0]
            out.append([RankStep(c.total, c.data, c.h2d, c.forward, c.backward, c.optimizer)])
            continue
        held = [0.0] * world  # each rank's wait in the buffers' broadcast (in its forward)
        if broadcast_s > 0:
            fw0 = [t[r] + c.data + c.h2d for r, c in enumerate(row)]
            held = [max(fw0) + broadcast_s - f for f in fw0]
        bw0 = [t[r] + held[r] + c.before_backward for r, c in enumerate(row)]
        ready = [[bw0[r] + b.ready_fraction * c.backward for b in buckets]
                 for r, c in enumerate(row)]
        spans = _spans(buckets, ready, allreduce_s, wake_s)
        if cpu_s_per_byte > 0:
            for r in range(world):
                ready[r][-1] += _overlap_cpu(buckets, spans, bw0[r], ready[r][-1],
                                             cpu_s_per_byte)
            spans = _spans(buckets, ready, allreduce_s, wake_s)
        link = spans[-1][1]
        ranks = []
        for r, c in enumerate(row):
            if id(c) not in tails:
                tails[id(c)] = _ddp_tail(c, buckets)
            end_bwd = max(link, ready[r][-1]) + tails[id(c)]
            wait = link - ready[r][-1]
            end = end_bwd + c.optimizer
            ranks.append(RankStep(end - t[r], c.data, c.h2d, c.forward + held[r],
                                  end_bwd - bw0[r] - wait, c.optimizer, wait))
            t[r] = end
        out.append(ranks)
    return out


def localsgd_steps(steps: Sequence[Sequence[Compute]], period: int, allreduce_s: Cost,
                   param_bytes: float, local_s: float = 0.0,
                   wake_s: float = 0.0) -> list[list[RankStep]]:
    """Local SGD: each rank's own step; on steps 0, K, 2K, ... the parameters' all-reduce
    (``local_s``: the averaging's own copies and division) once every rank has stepped."""
    world = len(steps[0]) if steps else 0
    t = [0.0] * world
    out = []
    for k, row in enumerate(steps):
        ends = [t[r] + c.total for r, c in enumerate(row)]
        sync = world > 1 and k % max(1, period) == 0
        done = max(ends) + wake_s + local_s + allreduce_s(param_bytes) if sync else 0.0
        ranks = []
        for r, c in enumerate(row):
            end = done if sync else ends[r]
            ranks.append(RankStep(end - t[r], c.data, c.h2d, c.forward, c.backward,
                                  c.optimizer, end - ends[r]))
            t[r] = end
        out.append(ranks)
    return out


@dataclass(frozen=True)
class WorkerPath:
    """A worker's path to the server: its cable's rate (None: no slower than the server's
    link) and the latency of one message."""

    cap_byte_s: float | None
    alpha_s: float


@dataclass(frozen=True)
class Server:
    """The parameter server: its link's rate; seconds per byte of a memory pass over memory
    already touched (``pass_s_per_byte``) and into a fresh allocation (``fresh_s_per_byte``,
    None: the same); and the update of every step (``update_s[k]``; None: the optimizer time
    of the first worker's compute drawn for that step, as the one-rank run measured it)."""

    capacity_byte_s: float
    pass_s_per_byte: float
    update_s: Sequence[float] | None
    fresh_s_per_byte: float | None = None

    def passes_s(self, nbytes: float, fresh: float, warm: float = 0.0) -> float:
        f = self.fresh_s_per_byte if self.fresh_s_per_byte is not None else self.pass_s_per_byte
        return nbytes * (fresh * f + warm * self.pass_s_per_byte)


# Memory passes over the gradient bytes that scaleprobe's parameter server makes per step
# (strategies/ps.py), as (into fresh buffers, over touched memory). A worker flattens its
# gradients and appends the version into new tensors (2 fresh), receives the reply into a new
# tensor and copies it into its parameters (first touch + a pass: 1 fresh). The server clones
# each push (1 fresh each), stacks them (1 fresh each), averages them (a fresh output, and the
# other pushes read: (n - 1) / 2 warm), flattens the parameters and appends the version
# (2 fresh).
WORKER_BEFORE, WORKER_AFTER, SERVER_PER_PUSH = (2.0, 0.0), (1.0, 0.0), (1.0, 0.0)


def server_passes(workers: int) -> tuple[float, float]:
    """The server's passes after the pushes' clones: stack, mean, flatten, append."""
    return workers + 3.0, (workers - 1) / 2.0


def ps_steps(steps: Sequence[Sequence[Compute]], nbytes: float, paths: Sequence[WorkerPath],
             server: Server) -> list[list[RankStep]]:
    """A synchronous parameter server: ``steps[k][w]`` worker w's compute (its optimizer
    field unused: the server steps), ``paths[w]`` its path to the server."""
    workers = len(paths)
    t = [0.0] * workers
    out = []
    before, after = server.passes_s(nbytes, *WORKER_BEFORE), server.passes_s(nbytes, *WORKER_AFTER)
    clone, rest = server.passes_s(nbytes, *SERVER_PER_PUSH), server.passes_s(
        nbytes, *server_passes(workers))
    for k, row in enumerate(steps):
        sent = [t[w] + c.before_backward + c.backward + before for w, c in enumerate(row)]
        arrive = finish_times([Transfer(sent[w], nbytes, p.cap_byte_s, p.alpha_s)
                               for w, p in enumerate(paths)], server.capacity_byte_s)
        order = sorted(range(workers), key=lambda w: arrive[w])
        busy = -float("inf")
        for w in order:  # the server copies each push as it takes it
            busy = max(busy, arrive[w]) + clone
        update = (row[0].optimizer if server.update_s is None
                  else server.update_s[k % len(server.update_s)])
        send = busy + rest + update
        ranks: dict[int, RankStep] = {}
        for w in order:  # replies one after another, in arrival order
            p = paths[w]
            rate = min(server.capacity_byte_s, p.cap_byte_s or server.capacity_byte_s)
            send += p.alpha_s + nbytes / rate
            end = send + after
            c = row[w]
            comm = end - (t[w] + c.before_backward + c.backward)
            ranks[w] = RankStep(end - t[w], c.data, c.h2d, c.forward, c.backward, 0.0, comm)
            t[w] = end
        out.append([ranks[w] for w in range(workers)])
    return out


@dataclass(frozen=True)
class Unit:
    """An FSDP unit: its parameter bytes and its share of forward and backward compute;
    ``regather``: all-gathered again for backward (False for the root, which FSDP keeps
    gathered from the end of forward: a run of 2 blocks and a root makes 5 all-gathers)."""

    nbytes: float
    share: float
    regather: bool = True


def fsdp_steps(steps: Sequence[Sequence[Compute]], units: Sequence[Unit], all_gather_s: Cost,
               reduce_scatter_s: Cost, prefetch: bool,
               wake_s: float = 0.0) -> list[list[RankStep]]:
    """FSDP over every rank: one link carries the collectives in the order they are issued;
    a collective starts when every rank has issued it."""
    world = len(steps[0]) if steps else 0
    t = [0.0] * world
    out = []
    for row in steps:
        if world == 1:
            c = row[0]
            out.append([RankStep(c.total, c.data, c.h2d, c.forward, c.backward, c.optimizer)])
            continue
        cs = [t[r] + c.before_backward - c.forward for r, c in enumerate(row)]
        link = -float("inf")
        waited = [0.0] * world
        for phase, order in (("forward", list(range(len(units)))),
                             ("backward", list(reversed(range(len(units)))))):
            for j, u in enumerate(order):
                # prefetch: issued when the previous unit's compute began (the first: now)
                issue = max(cs) if not prefetch or j == 0 else max(
                    cs[r] - _share(row[r], units[order[j - 1]], phase) for r in range(world))
                gather = phase == "forward" or units[u].regather
                if gather:
                    link = _on_link(link, issue, all_gather_s(units[u].nbytes), wake_s)
                for r, c in enumerate(row):
                    start = max(cs[r], link) if gather else cs[r]
                    waited[r] += start - cs[r]
                    cs[r] = start + _share(c, units[u], phase)
                if phase == "backward":
                    link = _on_link(link, max(cs), reduce_scatter_s(units[u].nbytes), wake_s)
                    if not prefetch:
                        for r in range(world):
                            waited[r] += link - cs[r]
                            cs[r] = link
        ranks = []
        for r, c in enumerate(row):
            end = max(cs[r], link) + c.optimizer
            waited[r] += max(0.0, link - cs[r])
            ranks.append(RankStep(end - t[r], c.data, c.h2d, c.forward, c.backward,
                                  c.optimizer, waited[r]))
            t[r] = end
        out.append(ranks)
    return out


def _share(c: Compute, u: Unit, phase: str) -> float:
    return (c.forward if phase == "forward" else c.backward) * u.share
