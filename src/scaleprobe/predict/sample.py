"""What the step model takes from one measured run: every timed step's compute (its
``steps.csv``: data, h2d, forward, backward, optimizer), DDP's gradient buckets (when each was
ready in backward, its one-rank all-reduce time), the gradient bytes, and the setting that
identifies it (model, batch per device, threads per rank). No torch.

The run is read through its typed record (``RunResult``); the steps come from the run's own
``steps.csv`` (``paths.steps_csv``, else ``<folder>/<run id>/steps.csv``). Without them, one
step is made of the breakdown's medians, and the prediction has no interval from the run's
spread (``rows_source`` says so).

What the model needs that the run may not hold (DDP's buckets from a single run, the memory
pass rate, DDP's own cost in backward) has a stand-in, noted in ``notes`` and shown with the
prediction; docs/COMMUNICATION.md ("Bucket-ready times on one process", "Memory passes")
says which.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field, replace
from pathlib import Path

from scaleprobe.core.result_model import RunResult
from scaleprobe.core.result_model import num as _num
from scaleprobe.core.traits import known
from scaleprobe.predict.timeline import Bucket, Compute, Unit

FP32_BYTES = 4
DDP_COPY_PASSES = 2.0  # gradients into DDP's buckets and back
DIVIDE_PASSES = 1.0  # the comm hook's division by the world size
# buckets this large time the memory pass; below, the hook's fixed cost (a Python call, gloo's
# dispatch: ~1-3 ms here) would pass for bandwidth
PASS_MIN_BYTES = 4 << 20


@dataclass
class RunSample:
    """One run, as the step model sees it."""

    label: str
    strategy: str
    world: int
    threads: int | None
    grad_bytes: float
    rows: list[Compute]
    rows_source: str
    buckets: list[Bucket] | None
    pass_s_per_byte: float | None
    fresh_s_per_byte: float | None
    step_median_s: float | None
    started_at: str | None
    notes: list[str] = field(default_factory=list)
    # which run each row came from, when several one-rank runs are pooled (check.pooled):
    # the interval resamples runs, then steps within them (None: one run)
    groups: tuple[int, ...] | None = None
    on_cpu: bool = True  # its ranks computed on the CPU (the collective's CPU is theirs)
    cores: int | None = None  # the host's cores the run could use (None: not recorded)

    @property
    def has_ddp(self) -> bool:
        t = known(self.strategy)  # its buckets logged by DDP's comm hook
        return bool(t and t.bucketed)


def stretched(s: RunSample, factor: float) -> RunSample:
    """``s`` with every compute phase (and its median step) ``factor`` times as long: the
    one-rank run as it would have computed under another outside load (``check.load_factor``),
    noted; ``s`` itself where the factor is 1."""
    if abs(factor - 1.0) < 1e-3:
        return s
    rows = [Compute(c.data * factor, c.h2d * factor, c.forward * factor, c.backward * factor,
                    c.optimizer * factor) for c in s.rows]
    more = "longer" if factor > 1 else "shorter"
    note = (f"compute {abs(factor - 1):.1%} {more} than the one-rank runs measured it: the "
            "outside load on the machine while the run was measured, against theirs")
    return replace(s, rows=rows, notes=[*s.notes, note],
                   step_median_s=s.step_median_s * factor if s.step_median_s else None)


def _steps_csv(rec: RunResult) -> Path | None:
    cands = [rec.paths.get("steps_csv")]
    if rec.source:
        cands.append(str(Path(rec.source) / rec.run_id / "steps.csv"))
    for c in cands:
        if c and Path(c).is_file():
            return Path(c)
    return None


def _rows(rec: RunResult) -> tuple[list[Compute], str]:
    path = _steps_csv(rec)
    if path is not None:
        rows = []
        with path.open() as fh:
            for r in csv.DictReader(fh):
                vals = {k: _num(_float(r.get(f"{k}_s"))) or 0.0
                        for k in ("data", "h2d", "forward", "backward", "optimizer")}
                rows.append(Compute(**vals))
        if rows:
            return rows, f"{len(rows)} timed steps ({path})"
    bd = rec.metrics.breakdown_s
    one = Compute(*(float(getattr(bd, k) or 0.0)
                    for k in ("data", "h2d", "forward", "backward", "optimizer")))
    return [one], "the breakdown's medians (no steps.csv found: no interval from the spread)"


def _float(x: str | None) -> float | None:
    try:
        return float(x) if x not in (None, "") else None
    except ValueError:
        return None


def _buckets(rec: RunResult) -> list[Bucket] | None:
    got = rec.comm.buckets if rec.comm is not None else None
    if not got:
        return None
    bwd = rec.metrics.breakdown_s.backward or 0.0
    out = []
    for b in got:
        frac = b.ready_fraction
        if frac is None and b.ready_s is not None and bwd > 0:
            frac = min(1.0, b.ready_s / bwd)
        if b.bytes is None or frac is None:
            return None
        out.append(Bucket(float(b.bytes), float(frac), float(b.allreduce_s or 0.0)))
    return out


def from_run(rec: RunResult) -> RunSample:
    """A RunSample of ``rec`` (any strategy; the model uses one-rank runs)."""
    rows, source = _rows(rec)
    buckets = _buckets(rec)
    params = rec.metrics.param_count
    grad = float(FP32_BYTES * params) if params else (
        sum(b.nbytes for b in buckets) if buckets else 0.0)
    pass_s = fresh = None
    probe = rec.metrics.memory_pass
    big = [b for b in buckets or [] if b.nbytes >= PASS_MIN_BYTES]
    if probe is not None and probe.warm_s_per_byte:
        pass_s, fresh = probe.warm_s_per_byte, probe.fresh_s_per_byte
    elif big and (rec.world_size or 1) == 1:  # small buckets: the hook's fixed cost dominates
        moved, local = sum(b.nbytes for b in big), sum(b.local_s for b in big)
        pass_s = local / moved if local > 0 else None
    return RunSample(label=rec.label, strategy=str(rec.cfg("dist.strategy") or "single"),
                     world=int(rec.world_size or 1), threads=_int(rec.env.get("threads")),
                     grad_bytes=grad, rows=rows, rows_source=source, buckets=buckets,
                     pass_s_per_byte=pass_s, fresh_s_per_byte=fresh,
                     step_median_s=rec.step_median_s,
                     started_at=rec.started_at,
                     on_cpu=str(rec.env.get("cuda_available")).lower() != "true",
                     cores=_int(rec.env.get("cores")))


def _int(x: object) -> int | None:
    v = _num(x)
    return int(v) if v else None


def for_ddp(s: RunSample, pass_s_per_byte: float) -> tuple[list[Compute], list[Bucket]]:
    """Rows and buckets for a DDP prediction: the run's own when it ran DDP; from a run
    without DDP, one bucket at the end of backward and DDP's copies and division added."""
    if s.buckets:
        return s.rows, s.buckets
    extra = (DDP_COPY_PASSES + DIVIDE_PASSES) * pass_s_per_byte * s.grad_bytes
    s.notes.append("no DDP buckets in the run (strategy "
                   f"{s.strategy}): one bucket of all {s.grad_bytes / 1e6:.1f} MB, ready at "
                   "the end of backward; DDP's bucket copies and division added to backward "
                   f"({extra * 1e3:.1f} ms, from the memory pass)")
    rows = [replace(c, backward=c.backward + extra) for c in s.rows]
    return rows, [Bucket(s.grad_bytes, 1.0, 0.0)]


def without_ddp(s: RunSample, pass_s_per_byte: float) -> list[Compute]:
    """Rows for a strategy without DDP (a parameter server's worker, local SGD): a DDP run's
    backward less its hook time and bucket copies."""
    if not s.has_ddp or not s.buckets:
        return s.rows
    local = sum(b.local_s for b in s.buckets)
    less = local + DDP_COPY_PASSES * pass_s_per_byte * s.grad_bytes
    s.notes.append(f"the run's backward holds DDP's hooks and bucket copies: {less * 1e3:.1f} ms "
                   "taken out for a strategy without DDP (from its buckets' one-rank time)")
    return [replace(c, backward=max(0.0, c.backward - less)) for c in s.rows]


def for_fsdp(s: RunSample, unit_bytes: list[float], world: int, pass_s_per_byte: float,
             fresh_pages_from: float) -> list[Compute]:
    """Rows for FSDP on ``world`` ranks of the CPU: what a rank computes beyond a one-rank
    run's forward and backward around each unit's all-gather (FSDP2 on one rank gathers
    nothing: it copies its parameters into place, as a rank of many copies the gathered
    ones): its shard copied into the gather's buffer (``1/world`` of the unit, a pass) and
    that buffer's pages touched for the first time where it is at least
    ``fresh_pages_from`` bytes (glibc maps it afresh at each gather: the run's measured
    fresh pass less a warm one), once before the forward and once before the backward.
    Measured on resnet18 at 32 px (docs/PLAN.md): its two ranks' forward and backward took
    68 ms a step more than two one-rank FSDP runs side by side, which gather nothing; its
    33.6 MB unit (layer4) is the only one over 32 MiB."""
    if world < 2 or not s.on_cpu:
        return s.rows
    touch = max(0.0, (s.fresh_s_per_byte or 0.0) - pass_s_per_byte)
    per_gather = sum(b / world * pass_s_per_byte + (b * touch if b >= fresh_pages_from
                                                     else 0.0) for b in unit_bytes)
    big = [b for b in unit_bytes if b >= fresh_pages_from]
    if big and not s.fresh_s_per_byte:
        s.notes.append("fsdp: the gathered buffers of its largest units come fresh each "
                       "gather; the run measured no first-touch cost (no memory probe): "
                       "not counted")
    s.notes.append("fsdp: its shard copied into each unit's gathered buffer"
                   + (f", and {len(big)} unit(s) of {min(big) / 1e6:.1f} MB or more touched "
                      "afresh" if big and touch else "")
                   + f": {per_gather * 1e3:.1f} ms added to forward and to backward each "
                   "(the run's memory pass)")
    return [replace(c, forward=c.forward + per_gather, backward=c.backward + per_gather)
            for c in s.rows]



def recorded_buffers(run: RunResult) -> tuple[int, ...] | None:
    """The model's buffers as the run recorded them (``memory_facts.buffer_bytes``: bytes per
    dtype, each a broadcast of DDP's before every forward); None where the run recorded none
    (older records, runs without the memory probe)."""
    facts = run.metrics.memory_facts
    got = facts.buffer_bytes if facts is not None else None
    return tuple(int(b) for b in got) if got is not None else None


def recorded_units(run: RunResult) -> tuple[Unit, ...]:
    """FSDP's units as the run's model had them (``memory_facts.unit_bytes``: the rule's
    order, the root last), each with its bytes and, as its share of compute, its share of the
    bytes; () where the run recorded none (older records, a model the rule cannot split)."""
    facts = run.metrics.memory_facts
    got = list(facts.unit_bytes or []) if facts is not None else []
    total = sum(got)
    last = len(got) - 1  # the root: gathered once, kept through backward
    return tuple(Unit(float(b), b / total, regather=i != last)
                 for i, b in enumerate(got) if b > 0) if total else ()
