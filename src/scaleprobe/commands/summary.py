"""The terminal summary printed at the end of a run."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from scaleprobe.commands import fmt


def print_run(rec: dict[str, Any], console: Console | None = None) -> None:
    con = console or _console()
    m, cfg = rec["metrics"], rec["config"]
    status = rec["status"]
    style = {"ok": "green", "oom": "yellow"}.get(status, "red")
    con.print(f"[bold]{rec['name']}[/bold]  status: [{style}]{status}[/{style}]"
              + (f"  ({rec['error']})" if rec.get("error") else "") + _load_tag(rec))
    if status != "ok" and not m.get("step_time_s"):
        con.print(f"result: {rec['paths'].get('dir')}/result.json")
        return
    t = Table(show_header=True, header_style="bold")
    for col in ("samples/s", "step median", "p95", "epoch time", "peak host mem",
                "peak device mem", "CPU util", "GPU util", _metric_name(m)):
        t.add_column(col, justify="right")
    st = m.get("step_time_s") or {}
    epoch = fmt.seconds(m.get("epoch_time_s")) + (" (proj.)" if m.get("epoch_time_projected") else "")
    mem = m["peak_mem_bytes"]
    t.add_row(fmt.num(m.get("samples_per_s")), fmt.ms(st.get("median")), fmt.ms(st.get("p95")),
              epoch, _host_mem(mem), fmt.bytes_(mem.get("device_allocated")),
              fmt.num(m.get("cpu_util_pct"), ".0f", "%"), fmt.num(m.get("gpu_util_pct"), ".0f", "%"),
              fmt.num(m.get(_metric_name(m)), ".3f"))
    con.print(t)
    _rates_line(con, rec)
    _breakdown(con, m)
    _comm_line(con, rec)
    if rec.get("straggler"):
        con.print("straggler: " + rec["straggler"]["line"])
    if rec.get("audit"):
        a = rec["audit"]
        tag = "[green]ok[/green]" if a["ok"] else "[bold red]FAILED[/bold red]"
        con.print(f"shard audit: {tag} - {escape(str(a['detail']))}")
        if m.get("unique_samples_per_s") is not None:
            con.print(f"unique samples/s: {fmt.num(m['unique_samples_per_s'])} of "
                      f"{fmt.num(m.get('samples_per_s'))} (the rest were samples read again)")
    for v in rec.get("invariants") or []:
        con.print(f"[bold yellow]invariant broken[/bold yellow] ({escape(v['name'])}): "
                  f"{escape(v['detail'])}")
    if m.get("bad_samples_skipped"):
        con.print(f"skipped {m['bad_samples_skipped']} unreadable samples")
    b = rec.get("batch") or {}
    con.print(f"batch: {b.get('per_device')} per device, {b.get('global')} global, "
              f"world size {b.get('world_size')}; {m.get('steps_timed')} steps timed "
              f"of {m.get('steps_done')}; {cfg['data']['dataset']} ({rec.get('dataset_source')})")
    con.print(f"result: {rec['paths'].get('dir')}/result.json")


def _rates_line(con: Console, rec: dict[str, Any]) -> None:
    """What samples/s adds up when several ranks train (their step medians may differ)."""
    from scaleprobe.report.records import rate_definition

    text = rate_definition(rec)
    if text:
        con.print(f"samples/s: {text}")


def _host_mem(mem: dict[str, Any]) -> str:
    """Total peak, and beside it the part above the baseline read before the model was built."""
    total = fmt.bytes_(mem.get("host"))
    net = mem.get("host_net")
    return total if net is None else f"{total} (net {fmt.bytes_(net)})"


def _load_tag(rec: dict[str, Any]) -> str:
    load = rec.get("load") or {}
    if load.get("flag") is not True:
        return ""
    return f"  [bold yellow]measured under load[/bold yellow]: {escape(str(load.get('reason')))}"


def _comm_line(con: Console, rec: dict[str, Any]) -> None:
    c = rec.get("comm") or {}
    if not c:
        return
    line = f"communication: exposed {fmt.ms(c.get('exposed_s'))} per step"
    if c.get("exposed_fraction") is not None:
        line += f" ({c['exposed_fraction']:.0%} of the step)"
    p = c.get("prediction")
    if p:
        line += (f"; model ({p['strategy']}, {p['link']}): {fmt.ms(p['comm_s'])}, efficiency "
                 f"{fmt.pct(p.get('efficiency'))}")
        if p.get("needed_gbit_s") is not None:
            line += f", needs >= {p['needed_gbit_s']:.2f} Gbit/s for 90%"
    con.print(line)


def _console() -> Console:
    c = Console()
    return c if c.is_terminal else Console(width=140, soft_wrap=True)  # lines stay whole


def _breakdown(con: Console, m: dict[str, Any]) -> None:
    bd = m.get("breakdown_s") or {}
    total = sum(v for v in bd.values() if v) or None
    if not total:
        return
    parts = [f"{k} {v * 1000:.1f} ms ({v / total:.0%})" for k, v in bd.items() if v is not None]
    # each phase's share of a typical step laid over the median step: they add up to it
    con.print("step breakdown (ms per phase of the median step): " + ", ".join(parts))


def _metric_name(m: dict[str, Any]) -> str:
    """The task's evaluation figure: accuracy, verification_accuracy (face) or map50."""
    from scaleprobe.report.records import TASK_METRICS

    return next((k for k, _ in TASK_METRICS if m.get(k) is not None), "accuracy")
