"""The terminal summary printed at the end of a run."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from scaleprobe.commands import fmt
from scaleprobe.commands.fmt import esc


def print_run(rec: dict[str, Any], console: Console | None = None) -> None:
    con = console or _console()
    m, cfg = rec["metrics"], rec["config"]
    status = rec["status"]
    style = {"ok": "green", "oom": "yellow", "target_not_reached": "yellow"}.get(status, "red")
    con.print(f"[bold]{esc(rec['name'])}[/bold]  status: [{style}]{esc(status)}[/{style}]"
              + (f"  ({esc(rec['error'])})" if rec.get("error") else "") + _load_tag(rec))
    if status != "ok" and not m.get("step_time_s"):
        con.print(f"result: {esc(rec['paths'].get('dir'))}/result.json")
        return
    con.print(_figures_table(con, _figures(m)))
    _rates_line(con, rec)
    _breakdown(con, m)
    _epoch_starts(con, rec)
    if rec.get("target"):
        from scaleprobe.target import summary_line

        con.print(esc(summary_line(rec["target"])))
    _flops_line(con, rec)
    _state_line(con, m)
    _comm_line(con, rec)
    if rec.get("straggler"):
        con.print("straggler: " + esc(rec["straggler"]["line"]))
    if rec.get("audit"):
        a = rec["audit"]
        tag = "[green]ok[/green]" if a["ok"] else "[bold red]FAILED[/bold red]"
        con.print(f"shard audit: {tag} - {esc(a['detail'])}")
        if m.get("unique_samples_per_s") is not None:
            con.print(f"unique samples/s: {fmt.num(m['unique_samples_per_s'])} of "
                      f"{fmt.num(m.get('samples_per_s'))} (the rest were samples read again)")
    for v in rec.get("invariants") or []:
        con.print(f"[bold yellow]invariant broken[/bold yellow] ({esc(v['name'])}): "
                  f"{esc(v['detail'])}")
    if m.get("bad_samples_skipped"):
        con.print(f"skipped {m['bad_samples_skipped']} unreadable samples")
    b = rec.get("batch") or {}
    con.print(f"batch: {b.get('per_device')} per device, {b.get('global')} global, "
              f"world size {b.get('world_size')}; {m.get('steps_timed')} steps timed "
              f"of {m.get('steps_done')}; {esc(cfg['data']['dataset'])} "
              f"({esc(rec.get('dataset_source'))})")
    con.print(f"result: {esc(rec['paths'].get('dir'))}/result.json")


def _figures(m: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, value) of the run's headline figures, in the order they are shown."""
    st = m.get("step_time_s") or {}
    epoch = fmt.seconds(m.get("epoch_time_s")) + (" (proj.)" if m.get("epoch_time_projected") else "")
    mem = m["peak_mem_bytes"]
    name = _metric_name(m)
    return [("samples/s", fmt.num(m.get("samples_per_s"))),
            ("step median", fmt.ms(st.get("median"))), ("p95", fmt.ms(st.get("p95"))),
            ("epoch time", epoch), ("peak host mem", _host_mem(mem)),
            ("peak device mem", fmt.bytes_(mem.get("device_allocated"))),
            ("CPU util", fmt.num(m.get("cpu_util_pct"), ".0f", "%")),
            ("GPU util", fmt.num(m.get("gpu_util_pct"), ".0f", "%")),
            (name, fmt.num(m.get(name), ".3f"))]


def _flops_line(con: Console, rec: dict[str, Any]) -> None:
    """FLOPs per step, achieved TFLOP/s and MFU against the peak and where the peak came from."""
    from scaleprobe.report.fmt import flops, mfu

    m, why = rec["metrics"], rec.get("null_reasons") or {}
    if not m.get("flops_per_step"):
        if why.get("flops_per_step"):
            con.print(f"FLOPs: {esc(why['flops_per_step'])}")
        return
    line = (f"FLOPs: {flops(m['flops_per_step'])} per step, "
            f"{flops(m.get('achieved_flops_per_s'), per_s=True)} achieved")
    p = m.get("peak") or {}
    if m.get("mfu") is not None:
        peak = flops(p['flops_per_s'] * (p.get('devices') or 1), per_s=True)
        line += f", MFU {mfu(m['mfu'])} of {peak} {p.get('dtype')} ({p.get('source')})"
    else:
        line += f"; MFU: {why.get('mfu') or 'n/a'}"
    con.print(esc(line))


def _figures_table(con: Console, figures: list[tuple[str, str]]) -> Table:
    """One row of figures under their names where that fits the console whole; else one
    figure per row (name, value), so that no header is cut and no value wrapped."""
    wide = Table(show_header=True, header_style="bold")
    for name, _ in figures:
        wide.add_column(name, justify="right", no_wrap=True)
    wide.add_row(*(v for _, v in figures))
    if _natural_width(con, wide) <= con.width:
        return wide
    tall = Table(show_header=False)
    tall.add_column(style="bold", no_wrap=True)
    tall.add_column(justify="right", no_wrap=True)
    for name, value in figures:
        tall.add_row(name, value)
    return tall


def _natural_width(con: Console, table: Table) -> int:
    """The width ``table`` takes with nothing cut or wrapped."""
    from rich.measure import Measurement

    return Measurement.get(con, con.options.update(width=10_000), table).maximum


def _rates_line(con: Console, rec: dict[str, Any]) -> None:
    """What samples/s adds up when several ranks train (their step medians may differ)."""
    from scaleprobe.report.records import rate_definition

    text = rate_definition(rec)
    if text:
        con.print(f"samples/s: {esc(text)}")


def _host_mem(mem: dict[str, Any]) -> str:
    """Total peak, and beside it the part above the baseline read before the model was built."""
    total = fmt.bytes_(mem.get("host"))
    net = mem.get("host_net")
    return total if net is None else f"{total} (net {fmt.bytes_(net)})"


def _load_tag(rec: dict[str, Any]) -> str:
    load = rec.get("load") or {}
    if load.get("flag") is not True:
        return ""
    return f"  [bold yellow]measured under load[/bold yellow]: {esc(load.get('reason'))}"


def _comm_line(con: Console, rec: dict[str, Any]) -> None:
    """Exposed communication as transfer + sync overhead, each said what it is; none at
    world size 1; the network model only for the link the run was measured on. Printed
    without markup: link names can be a user's file path."""
    c = rec.get("comm") or {}
    if not c:
        return
    world = (rec.get("batch") or {}).get("world_size")
    if world is not None and world < 2:
        line = "communication: none (world size 1)"
        if c.get("wrapper_overhead_s") is not None:
            line += (f"; wrapper overhead {_ms(c['wrapper_overhead_s'])} per step (sync minus "
                     "no_sync with one process: hooks and bucket copies, not communication; "
                     "left in backward)")
        con.print(line, markup=False)
        return
    line = f"communication: exposed {_ms(c.get('exposed_s'))} per step"
    if c.get("exposed_s") is None and c.get("exposed_reason"):
        line += f" ({c['exposed_reason']})"
    if c.get("exposed_fraction") is not None:
        line += f" ({c['exposed_fraction']:.0%} of the step)"
    if c.get("transfer_s") is not None and c.get("sync_overhead_s") is not None:
        line += (f" = transfer {_ms(c['transfer_s'])} + sync overhead "
                 f"{_ms(c['sync_overhead_s'])}")
    con.print(line, markup=False)
    _in_step_lines(con, c)
    std = c.get("transfer_standalone") or {}
    if std:
        every = f", once every {std['every']} steps" if (std.get("every") or 1) > 1 else ""
        hidden = c.get("transfer_hidden_s") or 0.0
        hid = f"; {_ms(hidden)} of it hidden under compute" if hidden > 0 else ""
        con.print(f"  transfer: standalone {std.get('op')} of {fmt.bytes_(std.get('bytes'))} on "
                  f"this run's process group, median {_ms(std.get('median_s'))}{every}{hid}",
                  markup=False)
        from scaleprobe.report.advice import sync_words
        from scaleprobe.traits import known

        tr = known(((rec.get("config") or {}).get("dist") or {}).get("strategy"))
        parts = (sync_words(rec)[1] if tr is not None and tr.shards_state else
                 "hooks, bucket copies, a server's work, waiting for the slowest rank")
        con.print(f"  sync overhead: the rest ({parts}): not the network", markup=False)
    _prediction_lines(con, c, rec)


def _in_step_lines(con: Console, c: dict[str, Any]) -> None:
    """Communication measured in the step (fsdp): the per-step figure's median and interval,
    what was timed, and the no_sync cross-check beside it."""
    from scaleprobe.comm.instep import text

    if c.get("exposed_per_step"):
        calls = c.get("calls_per_step") or {}
        what = (f" (blocked in {calls.get('all_gather', 0)} all-gathers and "
                f"{calls.get('reduce_scatter', 0)} reduce-scatters per step)" if calls else "")
        con.print(f"  measured in the step: median {text(c['exposed_per_step'], _ms)}{what}",
                  markup=False)
    if c.get("cross_check"):
        con.print("  cross-check, sync minus no_sync (not in the breakdown): "
                  + text(c["cross_check"], _ms), markup=False)


def _state_line(con: Console, m: dict[str, Any]) -> None:
    """Parameters + gradients + optimizer state each rank holds, with its own peak beside."""
    sb = m.get("state_bytes") or {}
    rows = sb.get("by_rank") or []
    if not rows:
        return
    shown = rows if len(rows) <= 4 else [r for r in rows if r.get("rank") == sb.get("rank")]
    parts = []
    for r in shown:
        peak = (f"peak device allocated {fmt.bytes_(r['device_allocated'])}"
                if r.get("device_allocated") is not None else
                f"peak RSS {fmt.bytes_(r.get('host_peak_rss'))}")
        parts.append(f"rank {r.get('rank')} {fmt.bytes_(r.get('params_bytes'))} + "
                     f"{fmt.bytes_(r.get('grads_bytes'))} + "
                     f"{fmt.bytes_(r.get('optimizer_bytes'))} = "
                     f"{fmt.bytes_(r.get('total_bytes'))} ({peak})")
    tail = f" (the largest of {len(rows)} ranks)" if len(shown) < len(rows) else ""
    con.print("state per rank, params + grads + optimizer: " + "; ".join(parts) + tail,
              markup=False)


def _prediction_lines(con: Console, c: dict[str, Any], rec: dict[str, Any]) -> None:
    from scaleprobe.comm.exposed import same_link_prediction

    same = same_link_prediction(c, (rec.get("config") or {}).get("dist"))
    named = c.get("prediction")
    link = (c.get("measured_link") or {}).get("name")
    if same:
        line = (f"  model on the link measured ({same['strategy']}, {same['link']}): "
                f"{_ms(same['comm_s'])} per step")
        if c.get("transfer_s") is not None and same.get("comm_s"):
            line += (" vs the standalone collective's "
                     f"{_ms((c.get('transfer_standalone') or {}).get('per_step_s'))} measured")
        con.print(line, markup=False)
    if named and named is not same:
        why = (f"what-if: measured on {link}, not compared" if link else
               "the link between the hosts is not known (no --link): not compared")
        line = (f"  model for {named['link']} ({why}): {_ms(named['comm_s'])} per step, "
                f"efficiency {fmt.pct(named.get('efficiency'))}")
        if named.get("needed_gbit_s") is not None:
            line += f", needs >= {named['needed_gbit_s']:.2f} Gbit/s for 90%"
        con.print(line, markup=False)
    elif same and same.get("needed_gbit_s") is not None:
        con.print(f"  needs >= {same['needed_gbit_s']:.2f} Gbit/s for 90% efficiency",
                  markup=False)


def _ms(v: Any) -> str:
    """Milliseconds with two decimals below 1 ms (a small all_reduce is 0.3 ms, not 0.0)."""
    if v is None:
        return "n/a"
    return f"{v * 1000:.2f} ms" if abs(v) < 1e-3 else fmt.ms(v)


def _console(stderr: bool = False) -> Console:
    """A terminal's width (or ``COLUMNS`` where it is set); piped without ``COLUMNS``, lines
    stay whole for the log that reads them."""
    import os

    c = Console(stderr=stderr)
    if c.is_terminal or os.environ.get("COLUMNS", "").isdigit():
        return c
    return Console(stderr=stderr, width=140, soft_wrap=True)


def _breakdown(con: Console, m: dict[str, Any]) -> None:
    bd = m.get("breakdown_s") or {}
    total = sum(v for v in bd.values() if v) or None
    if not total:
        return
    parts = [f"{k} {v * 1000:.1f} ms ({v / total:.0%})" for k, v in bd.items() if v is not None]
    # each phase's share of a typical step laid over the median step: they add up to it
    con.print("step breakdown (ms per phase of the median step): " + ", ".join(parts))


def _epoch_starts(con: Console, rec: dict[str, Any]) -> None:
    """The report's "input-bound at epoch starts" evidence, where it holds: the median step
    above leaves that wait out."""
    from scaleprobe.report.diagnose import epoch_start_wait

    line = epoch_start_wait(rec)
    if line:
        con.print(f"[bold yellow]data wait at epoch starts[/bold yellow]: {esc(line)}")


def _metric_name(m: dict[str, Any]) -> str:
    """The task's evaluation figure: accuracy, verification_accuracy (face) or map50."""
    from scaleprobe.report.records import TASK_METRICS

    return next((k for k, _ in TASK_METRICS if m.get(k) is not None), "accuracy")
