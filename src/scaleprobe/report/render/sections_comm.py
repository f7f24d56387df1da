"""The report's communication section: each ``scaleprobe comm`` benchmark (measured against
its alpha-beta fit) and each multi-process run's exposed communication beside the network
model for the link it was measured on."""

from __future__ import annotations

from scaleprobe.core import fmt
from scaleprobe.core import metrics as M
from scaleprobe.core.experiment_records import CommBenchRecord
from scaleprobe.core.record import Record
from scaleprobe.core.result_model import RunResult, dict_of, dicts, num
from scaleprobe.measure.comm.exposed import same_link_prediction
from scaleprobe.measure.comm.instep import text as instep_text
from scaleprobe.report.reading import records as R
from scaleprobe.report.render import plots
from scaleprobe.report.render.doc import Section, Sub, Table, Text


def comm_section(records: list[Record]) -> Section | None:
    s = Section("Communication", anchor="communication")
    for i, rec in enumerate(R.of_type(records, CommBenchRecord)):
        _comm_bench_blocks(s, rec, i)
    _prediction_blocks(s, R.runs(records))
    return s if s.blocks else None


def _comm_bench_blocks(s: Section, rec: CommBenchRecord, i: int) -> None:
    fits = {op: dict_of(f) for op, f in rec.fit.items()}
    s.add(Sub(f"Benchmark {rec.exp_id or i + 1}: {rec.backend or '?'}, "
              f"{rec.world_size or '?'} processes"))
    rows = []
    for r in dicts(rec.rows):
        fit = fits.get(str(r.get("op"))) or {}
        pred = None
        alpha, beta = num(fit.get("alpha_s")), num(fit.get("beta_s_per_byte"))
        if alpha is not None and beta is not None:
            pred = alpha + beta * (num(r.get("size_bytes")) or 0)
        err = M.growth(pred, r.get("time_s"))
        rows.append([str(r.get("op")), fmt.size(r.get("size_bytes")), fmt.us(r.get("time_s")),
                     fmt.num(r.get("algbw_gbyte_s"), ".2f"), fmt.num(r.get("busbw_gbyte_s"), ".2f"),
                     fmt.us(pred), fmt.signed_pct(err, 0)])
    if rows:
        s.add(Table(["Op", "Size", "Time (us)", "algbw (GB/s)", "busbw (GB/s)",
                     "Predicted (us)", "Error"], rows, right=[False] + [True] * 6))
    if fits:
        frows = [[op, fmt.us(f.get("alpha_s")),
                  fmt.num((num(f.get("beta_s_per_byte")) or 0) * 1e9 or None, ".3f"),
                  fmt.num(f.get("bandwidth_gbit_s"), ".2f"), fmt.num(f.get("busbw_gbit_s"), ".2f")]
                 for op, f in fits.items()]
        s.add(Table(["Op", "alpha (us)", "beta (ns/byte)", "Bandwidth (Gbit/s)",
                     "Bus bandwidth (Gbit/s)"], frows, caption="Fit: time = alpha + beta * size"))
    s.add(plots.image(f"comm-{i}", plots.comm_fit_plot(rec),
                      "measured vs predicted communication time per size"))


def _prediction_blocks(s: Section, runs: list[RunResult]) -> None:
    """Each multi-process run's exposed communication as transfer + sync overhead, and the
    network model for the link the run was measured on (never another one) next to the
    transfer: like with like. Predictions for a link the run did not cross are listed apart."""
    runs = [r for r in runs if r.comm is not None and (r.world_size or 0) >= 2]
    if not runs:
        return
    rows, labels, pv, mv, what_if = [], [], [], [], []
    for r in runs:
        c = r.comm
        assert c is not None
        same = same_link_prediction(c, dict_of(r.cfg("dist")))
        named = dict_of(c.prediction)
        link = dict_of(c.measured_link).get("name") or (
            "loopback" if (r.cfg_number("dist.nnodes") or 1) <= 1 else None)
        transfer = num(dict_of(c.transfer_standalone).get("per_step_s"))
        pred = num(same.get("comm_s")) if same else None
        rows.append([r.label, str(r.cfg("dist.strategy") or fmt.NA),
                     fmt.num(r.world_size, "d"), str(link or "unknown"),
                     instep_text(c.exposed_per_step, fmt.duration), fmt.duration(c.exposed_s),
                     fmt.duration(c.transfer_s),
                     fmt.duration(c.sync_overhead_s), fmt.duration(transfer),
                     fmt.duration(pred), fmt.ratio(transfer / pred if transfer and pred else None),
                     fmt.num(same.get("needed_gbit_s"), ".1f") if same else fmt.NA])
        if transfer is not None and pred:
            labels.append(r.label)
            pv.append(pred)
            mv.append(transfer)
        if named and named is not same and num(named.get("comm_s")) is not None:
            where = f"measured on {link}" if link else "the link between its hosts is unknown"
            what_if.append(f"{r.label}: the model for {named.get('link')} says "
                           f"{fmt.duration(named['comm_s'])} per step (a what-if, not compared: "
                           f"{where})")
    s.add(Sub("Network model vs measurement"))
    s.add(Table(["Run", "Strategy", "World", "Measured on", "Exposed, in-step median",
                 "Exposed, breakdown", "Transfer", "Sync overhead", "Standalone collective",
                 "Predicted (same link)", "Standalone / predicted", "Needed (Gbit/s)"], rows,
                right=[False, False, True, False] + [True] * 8))
    s.add(Text("Exposed, in-step median = the communication each timed step waited on (DDP's "
               "comm hook, FSDP's timed collectives, the comm phase of ps and local SGD): the "
               "median over the steps with its 95% interval, the headline figure. Exposed, "
               "breakdown = the same on the breakdown's basis (the typical steps laid over the "
               "median step) = transfer + sync overhead; sync minus no_sync is only a "
               "cross-check, never in these columns. Standalone "
               "collective = the strategy's own collective for the bytes of one "
               "synchronisation, timed in the run's process group after training; transfer = "
               "the part of it that showed in the step; sync overhead = the rest, which no "
               "link speeds up (not split further: hooks, bucketing and waiting for the "
               "slowest rank are not measured apart). Predicted = "
               "the network model for the link the run was measured on (loopback on one host), "
               "compared with the standalone collective only. Needed = the slowest link that "
               "still reaches the target efficiency.", note=True))
    if what_if:
        s.add(Text("Predictions for a link the run did not cross: " + "; ".join(what_if) + ".",
                   note=True))
    s.add(plots.image("comm-prediction", plots.comm_prediction_plot(labels, pv, mv),
                      "predicted vs measured standalone collective per step, same link"))
