"""Batch-size analysis of sweep runs, usable outside the report.

``batch_table(records)`` gives one row per batch size (grouped by the sweep's other axes)
with growth rates between consecutive points, in the style of the reference studies::

    | Batch size | Devices | Peak memory | Growth | Epoch time | Growth | Samples/s | TFLOP/s |
    | MFU | ...

The rule that reads the table (``recommend_batch``: which batch size pays) is
``report/tables/batch_rule.py``; loader settings: ``report/tables/workers.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scaleprobe.core import fmt
from scaleprobe.core import metrics as M
from scaleprobe.core.record import Record
from scaleprobe.core.result_model import BATCH_AXES, RunResult
from scaleprobe.measure.aggregate import projected_epoch_s
from scaleprobe.predict import memmodel as MM
from scaleprobe.report.reading import repeats as P
from scaleprobe.report.tables import critical as C
from scaleprobe.report.tables import time_to_target as T
from scaleprobe.report.tables.rows import BatchRow
from scaleprobe.report.tables.sweep_points import point_groups, sweep_runs

# an epoch's samples (steps per epoch x the global batch: each rank drops its last partial
# batch) that differ by more than this between the batch sizes of a group make their epoch
# times unlike: a larger batch's shorter epoch is then partly the samples it left out
SAME_SAMPLES_REL = 0.01
SAME_SAMPLES = "same samples"

BATCH_HEADERS = ("Batch size", "Devices", "Peak memory", "Growth", "Epoch time", "Growth",
                 "Samples/s", "TFLOP/s", "MFU", "CPU util", "GPU util")


def host_memory(r: RunResult) -> float | None:
    """Host memory a batch size costs: the peak net of the process's resident memory before
    the model was built (torch itself is ~750 MiB that no batch size changes), else the total
    peak for records that predate the baseline."""
    pm = r.metrics.peak_mem_bytes
    return pm.host_net or pm.host


def device_memory(r: RunResult) -> float | None:
    return r.metrics.peak_mem_bytes.device_peak()


def tensor_memory(r: RunResult) -> float | None:
    """On the CPU: the tensor bytes live at the step's peak, as the run's probe step read them
    at its own batch (held parameters and optimizer state, the batch, and the allocator's
    peak over forward, backward and the optimizer step: ``memmodel.cpu_tensor_peak``). What a
    batch size moves, and the same in every repeat: the process's resident memory beside it
    also holds what glibc's allocator keeps or gives back, which moves from one fresh process
    to the next (docs/REPORTS.md, "Memory taken afresh every step"). None on CUDA (the
    device's own peak is the figure there) or without the probe."""
    return MM.cpu_tensor_peak(r)


MEMORY_FIGURES = {"device": device_memory, "tensor": tensor_memory, "host": host_memory}
# what each kind is, in the words under the table
MEMORY_WORDS = {
    "device": "device memory", "host": "host memory",
    "tensor": ("the CPU's tensor bytes at the step's peak (held parameters and optimizer "
               "state, the batch, and the allocator's peak over forward, backward and the "
               "optimizer step, as each run's probe step read them at its batch; the same in "
               "every repeat), with the process's resident peak in brackets"),
}


def memory_figure(kind: str) -> Any:
    return MEMORY_FIGURES.get(kind, host_memory)


def memory_kind(ok: Sequence[RunResult]) -> str:
    """The peak memory a batch table compares: the device's where every run (and repeat) has
    it, else the CPU's tensor bytes where every one has them, else the host's."""
    every = [x for r in ok for x in P.repeats_of(r)]
    for kind in ("device", "tensor"):
        if every and all(memory_figure(kind)(x) is not None for x in every):
            return kind
    return "host"


def _projected(r: RunResult) -> bool:
    return r.metrics.epoch_time_projected is True


def epoch_figure(r: RunResult) -> float | None:
    """Epoch time; where it is missing, seconds per sample (the same dataset either way, so
    their ratios between batch sizes agree)."""
    e = r.metrics.epoch_time_s
    if e is not None:
        return e
    sps = r.metrics.samples_per_s
    return 1.0 / sps if sps else None


def projected_epoch(r: RunResult) -> float | None:
    """Epoch time on the median step's basis: the record's own where it was projected, else
    its median step x steps per epoch (a measured epoch also holds the wait for each epoch's
    first batch, which the median step leaves out)."""
    if _projected(r):
        return r.metrics.epoch_time_s
    return projected_epoch_s(r.step_median_s, r.metrics.steps_per_epoch)


def window_epoch(r: RunResult) -> float | None:
    """Epoch time on the timed window's basis: samples per epoch / the window's samples/s,
    the basis the Samples/s column is on, so the two multiply out to the samples per epoch
    (``metrics.window_epoch_s``)."""
    return r.window_epoch_s


def seconds_per_sample(r: RunResult) -> float | None:
    sps = r.metrics.samples_per_s
    return 1.0 / sps if sps else None


def epoch_time_s(r: RunResult) -> float | None:
    return r.metrics.epoch_time_s


# "same samples": epochs of one number of samples for every batch size (``epoch_samples``),
# over the window's samples/s; their ratios are those of seconds per sample
EPOCH_BASES = {"window": window_epoch, "measured": epoch_figure, "projected": projected_epoch,
               "per sample": seconds_per_sample, SAME_SAMPLES: seconds_per_sample}


def measured_epoch(r: RunResult) -> bool:
    """A measured epoch time that compares like for like: not projected, and not a run's
    only complete epoch (its first, which holds the warm-up and the loader's start-up; with
    two or more the figure is the median of those after the first)."""
    if _projected(r) or r.metrics.epoch_time_s is None:
        return False
    walls = r.metrics.epoch_times_s
    return not (walls is not None and len(walls) == 1)


def _epoch_kind(r: RunResult) -> str:
    """like (epochs after the first measured), first (only a first epoch measured),
    projected, or none."""
    if measured_epoch(r):
        return "like"
    if r.metrics.epoch_time_s is None:
        return "none"
    return "projected" if _projected(r) else "first"


KIND_TEXT = {"like": "measured over epochs after the first",
             "first": "only a first epoch measured, which holds the warm-up",
             "projected": "projected from the median step", "none": "no epoch time"}


def epoch_basis(recs: list[RunResult]) -> str:
    """One basis for every epoch time a group compares, so that no comparison pairs a
    measured epoch (its first batch's wait included) with a projected one (median step x
    steps per epoch, no such wait): "measured" when every repeat of every point measured a
    like-for-like epoch (``measured_epoch``), else "projected" when each has a median step
    and steps per epoch, else seconds per sample. Before them all, "same samples" where the
    points' own epochs hold samples too far apart to compare (``epoch_samples``)."""
    every = [x for r in recs for x in P.repeats_of(r)]
    if epoch_samples(recs) is not None:
        return SAME_SAMPLES
    if every and all(window_epoch(x) is not None for x in every):
        # one basis for the row: the timed window, as its samples/s (a 56.4 s
        # epoch beside 30.4 samples/s that needed 46.3 s)
        return "window"
    if every and all(measured_epoch(x) for x in every):
        return "measured"
    if every and all(projected_epoch(x) is not None for x in every):
        return "projected"
    return "per sample"


def epoch_samples(recs: list[RunResult]) -> int | None:
    """The samples of one epoch that every batch size of a group is compared over, where
    their own epochs hold samples more than ``SAME_SAMPLES_REL`` apart (digits' 1,437
    training samples: 1,408 an epoch at batch 64, 1,280 at 256, whose epoch was 9% shorter
    than 128's at 2% fewer samples/s): the most any of them holds. None where they hold
    about the same, or any repeat lacks its samples per epoch or its samples/s."""
    every = [x for r in recs for x in P.repeats_of(r)]
    spe = [x.samples_per_epoch for x in every]
    if not every or any(not n for n in spe) or any(not P.sps_of(x) for x in every):
        return None
    most, least = max(n for n in spe if n), min(n for n in spe if n)
    return most if most > least * (1.0 + SAME_SAMPLES_REL) else None


def same_samples_note(rows: Sequence[BatchRow]) -> str | None:
    """Where a group's epochs are compared over the same samples (``epoch_samples``): how
    many, and what each batch size's own epoch holds where it holds fewer."""
    same = [r for r in rows if r["status"] == "ok" and r.get("epoch_samples")]
    if not same:
        return None
    parts = []
    groups = list(dict.fromkeys(r["group"] for r in same))
    for g in groups:
        mine = [r for r in same if r["group"] == g]
        n = mine[0]["epoch_samples"] or 0
        fewer = ", ".join(f"batch {r['batch_size']}'s {own:,}" for r in mine
                          if (own := r["record"].samples_per_epoch) and own < n)
        where = f" ({g})" if len(groups) > 1 and g else ""
        parts.append(f"{n:,} samples{where} (an epoch of its own holds fewer: {fewer})")
    return (f"Every epoch time here is the same {'; '.join(parts)} over the row's samples/s, "
            "so the two columns multiply out to them: each rank drops its last partial "
            "batch, and a larger batch's own epoch would look shorter by the samples it left "
            "out.")


def batch_table(records: list[Record]) -> list[BatchRow]:
    """One row per batch size (each figure its median over the point's repeats), sorted by
    batch size within each group, with growth rates between consecutive points that finished
    (the first row's growth is None). Epoch-time growth is the paired estimate over the repeats (``epoch_interval``)."""
    rows: list[BatchRow] = []
    for label, recs in point_groups(sweep_runs(records), BATCH_AXES).items():
        recs = sorted(recs, key=lambda r: (r.batch_size is None, r.batch_size or 0))
        ok = [r for r in recs if r.status == "ok"]
        mem_kind = memory_kind(ok)
        basis = epoch_basis(ok)
        fig = EPOCH_BASES[basis]
        same = epoch_samples(ok) if basis == SAME_SAMPLES else None
        kinds = {_epoch_kind(x) for r2 in ok for x in P.repeats_of(r2)}
        prev: BatchRow | None = None
        for r in recs:
            row = _batch_row(r, label, mem_kind)
            row["epoch_basis"] = basis
            row["epoch_samples"] = same
            row["epoch_kinds"] = kinds
            # some epoch times of the group were measured: the basis is not what they show
            row["epoch_basis_mixed"] = basis != "measured" and bool(kinds & {"like", "first"})
            row["epoch_compared_s"] = (compared_epoch(row) if row["status"] == "ok"
                                       and basis != "per sample" else None)
            if row["status"] == "ok":
                if prev is not None:
                    row["mem_growth"] = M.growth(row["peak_mem_bytes"], prev["peak_mem_bytes"])
                    row["mem_interval"] = _mem_interval(prev["record"], r, mem_kind)
                    iv = P.interval(prev["record"], r, fig)
                    row["epoch_interval"] = iv
                    row["epoch_growth"] = (iv.estimate - 1.0 if iv is not None else
                                           M.growth(fig(r), fig(prev["record"])))
                    # the ratio of the two epoch cells shown, as a reader divides them
                    row["epoch_shown_growth"] = M.growth(shown_epoch(row), shown_epoch(prev))
                prev = row
            rows.append(row)
    return rows


def _mem_interval(a: RunResult, b: RunResult, mem_kind: str) -> M.Interval | None:
    """The interval of B's peak memory / A's over their paired repeats (two or more pairs).
    Host memory moves between repeats of one point (a digits batch of 16: 52-70 MiB net over
    three repeats, 2026-11-25), so its growth is an estimate as the epoch time's is; with one
    repeat there is no spread to tell, and the point estimate stands alone."""
    av, bv, _, _ = P.paired(a, b, memory_figure(mem_kind))
    ratios = [y / x for x, y in zip(av, bv, strict=False) if x and y]
    if len(ratios) < 2 or max(ratios) - min(ratios) <= 1e-9 * max(ratios):
        return None  # one pair, or the same ratio in every repeat (tensor bytes): exact
    return M.ratio_interval(av, bv)


def _batch_row(r: RunResult, group: str, mem_kind: str) -> BatchRow:
    # every measured column the median over the point's repeats (an even count: the mean of
    # the middle two), as the growth beside it is taken over the repeats: a row that mixed
    # one repeat's samples/s with the median epoch did not add up (8.90 samples/s beside
    # 139.9 s for 1,437 samples)
    ok = r.status == "ok"
    mem = P.median_of(r, memory_figure(mem_kind)) if ok else None

    def med(fig: Any) -> Any:
        return P.median_of(r, fig) if ok else fig(r)

    return {
        "group": group, "run": r.label, "point": r.point, "batch_size": r.batch_size,
        "devices": r.world_size, "status": r.status, "error": r.error,
        "peak_mem_bytes": mem, "memory_kind": mem_kind, "mem_growth": None,
        "mem_interval": None,
        "peak_host_total_bytes": med(lambda x: x.metrics.peak_mem_bytes.host),
        "epoch_time_s": med(epoch_time_s),
        "epoch_projected": _projected(r), "epoch_growth": None, "epoch_interval": None,
        "samples_per_s": med(P.sps_of),
        "achieved_flops_per_s": med(lambda x: x.metrics.achieved_flops_per_s),
        "mfu": med(lambda x: x.metrics.mfu), "cpu_util_pct": med(lambda x: x.metrics.cpu_util_pct),
        "gpu_util_pct": med(lambda x: x.metrics.gpu_util_pct),
        "repeats": len(P.repeats_of(r)), "record": r,
        "b_noise": P.median_of(r, C.b_noise_path),  # gradient noise scale (report/tables/critical.py)
    }


def batch_table_parts(rows: list[BatchRow]) -> tuple[list[str], list[list[str]]]:
    """The batch table's headers and cells; with --target, each batch size's time to it over
    its seeds (median, fastest-slowest, k of n reached, samples) beside the usual columns."""
    shown: list[BatchRow] = [{**r, **T.point_figures(r["record"])}
                             if T.has_target(r["record"]) else r for r in rows]
    headers, cells = T.table_parts(BATCH_HEADERS, shown, batch_cells)
    if headers[-1] == T.TARGET_HEADERS[-1]:  # a speedup over processes: not a batch sweep's
        headers, cells = headers[:-1], [c[:-1] for c in cells]
    headers, cells = _one_unit_per_column(headers, cells, shown)
    if C.has_gns(rows):  # the gradient noise scale each batch size measured (report/tables/critical)
        headers += list(C.NOISE_HEADERS)
        cells = [c + [C.noise_cell(r), C.regime_cell(r)] for c, r in zip(cells, rows, strict=True)]
    return headers, cells


def _one_unit_per_column(headers: list[str], cells: list[list[str]],
                         rows: list[BatchRow]) -> tuple[list[str], list[list[str]]]:
    """Epoch times in one unit (fmt.durations) and FLOP/s in the unit that reads (GFLOP/s
    on a CPU, never '2.40e-04' TFLOP/s), for the rows that measured them."""
    ok = [r["status"] == "ok" for r in rows]
    e, f = headers.index("Epoch time"), headers.index("TFLOP/s")
    epochs = fmt.durations([shown_epoch(r) if k else None for r, k in zip(rows, ok, strict=True)],
                           [epoch_projected(r) for r in rows])
    unit, rates = fmt.flops_column([r["achieved_flops_per_s"] if k else None
                                    for r, k in zip(rows, ok, strict=True)])
    for row, k, ep, fl in zip(cells, ok, epochs, rates, strict=True):
        if k:
            row[e], row[f] = ep, fl
    return [unit if i == f else h for i, h in enumerate(headers)], cells


def batch_cells(row: BatchRow) -> list[str]:
    """The row as table cells, in BATCH_HEADERS order."""
    head = [fmt.num(row["batch_size"], "d"), fmt.num(row["devices"], "d")]
    if row["status"] == "oom":
        return head + ["out of memory"] + ["-"] * 8
    if row["status"] != "ok":
        err = f": {row['error']}" if row.get("error") else ""
        return head + [fmt.clipped(f"{row['status']}{err}")] + ["-"] * 8
    mem = fmt.bytes_(row["peak_mem_bytes"])
    total = row.get("peak_host_total_bytes")
    if row["memory_kind"] == "host" and total and total != row["peak_mem_bytes"]:
        mem += f" net ({fmt.bytes_(total)} total)"
    elif row["memory_kind"] == "tensor":
        mem += " tensors" + (f" ({fmt.bytes_(total)} host)" if total else "")
    return head + [
        mem, growth_cell(row["mem_growth"], row.get("mem_interval")),
        epoch_text(row),
        epoch_growth_cell(row),
        fmt.rate(row["samples_per_s"]), fmt.tflops(row["achieved_flops_per_s"]),
        fmt.mfu(row["mfu"]), fmt.pct_value(row["cpu_util_pct"]),
        fmt.pct_value(row["gpu_util_pct"]),
    ]


def epoch_growth_cell(row: BatchRow) -> str:
    """The epoch time's Growth: the ratio of this row's epoch cell to the previous one's,
    as a reader divides them; where the paired estimate over the repeats (the one the rule
    judges) prints otherwise, it follows under its own name: ``-44%; paired -41% [-48%,
    -33%]`` (bug caught: a paired figure under a column a reader checks by division)."""
    paired = growth_cell(row["epoch_growth"], row.get("epoch_interval"))
    shown = row.get("epoch_shown_growth")
    if shown is None or fmt.growth(shown) == fmt.growth(row["epoch_growth"]):
        return paired
    return f"{fmt.growth(shown)}; paired {paired}"


def growth_cell(growth: float | None, iv: M.Interval | None) -> str:
    """``+37%``, with the interval when the repeats gave one that is not a single value;
    where the interval's own estimate (the paired one) prints otherwise than the growth of
    the medians shown, it follows under its own name, ``+37%; paired +35% [+30%, +41%]``, so
    no figure stands outside the interval printed beside it."""
    text = fmt.growth(growth)
    if iv is not None and iv.lo < iv.hi:
        bounds = iv.bounds(lambda v: fmt.signed_pct(v - 1))
        paired = fmt.growth(iv.estimate - 1.0)
        text += f" {bounds}" if paired == text else f"; paired {paired} {bounds}"
    return text


def samples_per_s_per_gib(row: BatchRow) -> float | None:
    if not row["samples_per_s"] or not row["peak_mem_bytes"]:
        return None
    return row["samples_per_s"] / (row["peak_mem_bytes"] / fmt.GIB)


def epoch_projected(row: BatchRow) -> bool:
    return (row.get("epoch_basis") in ("projected", "window", SAME_SAMPLES)
            or bool(row.get("epoch_projected")))


def epoch_text(row: BatchRow) -> str:
    """``shown_epoch`` as the table writes it, ``~`` where projected."""
    return fmt.duration(shown_epoch(row), epoch_projected(row))


def shown_epoch(row: BatchRow) -> float | None:
    """The epoch time the table shows for the row, in seconds: the compared (projected)
    figure where the group's basis is the median step's; none where it is seconds per sample
    and the kinds were mixed (the growth beside it is from samples/s); else the row's own."""
    if row.get("epoch_basis") in ("window", "projected", SAME_SAMPLES):
        return compared_epoch(row)  # window: x Samples/s = the epoch's samples
    if row.get("epoch_basis") == "per sample" and row.get("epoch_basis_mixed"):
        return None
    return row["epoch_time_s"]


def shown_epoch_figure(row: BatchRow) -> Any:
    """The per-repeat figure behind ``shown_epoch``."""
    if row.get("epoch_basis") == "window":
        return window_epoch
    if row.get("epoch_basis") == SAME_SAMPLES:
        n = row.get("epoch_samples") or 0
        return lambda x: n * s if (s := seconds_per_sample(x)) is not None and n else None
    if row.get("epoch_basis") == "projected":
        return projected_epoch
    return epoch_time_s


def compared_epoch(row: BatchRow) -> float | None:
    """The row's epoch time on its group's basis (``epoch_basis``), over its repeats; on
    the window's, the samples per epoch / the row's samples/s, so the two multiply out."""
    if row["epoch_basis"] in ("window", SAME_SAMPLES):
        r = row.get("record")
        spe = (row.get("epoch_samples") if row["epoch_basis"] == SAME_SAMPLES
               else r.samples_per_epoch if r is not None else None)
        sps = row.get("samples_per_s")
        return spe / sps if spe and sps else None
    fig = EPOCH_BASES[row["epoch_basis"]]
    return P.median_of(row["record"], fig)


HALF_BATCH_NOTE = ("B_noise was measured on one process (--gns): each step ran as two "
                   "half-batches with accumulated gradients, so these rows' epoch time and "
                   "memory are those of that step, not of a plain one; under DDP the "
                   "measurement changes nothing.")


def half_batch_note(rows: Sequence[BatchRow]) -> str | None:
    """The note every batch table carries (the report, sweep.md, the terminal) when a row's
    B_noise was measured on one process as two half-batches (docs/CRITICAL_BATCH.md)."""
    halves = [r for r in rows if r["status"] == "ok" and r.get("record") is not None
              and r["record"].gns is not None and r["record"].gns.method == "micro_batches"]
    return HALF_BATCH_NOTE if halves else None
