"""The terminal summary printed at the end of a run."""

from __future__ import annotations

import math
import os
from typing import Any

from rich.console import Console
from rich.table import Table

from scaleprobe.commands import terminal
from scaleprobe.commands.terminal import esc
from scaleprobe.core import claim as CL
from scaleprobe.core.fmt import flops, mfu, phase_name
from scaleprobe.core.invariants import uneven_steps
from scaleprobe.core.result_model import RunResult, num
from scaleprobe.core.run_metrics import Peak, PeakMem, StepTime
from scaleprobe.core.run_parts import Comm
from scaleprobe.core.traits import known
from scaleprobe.features.gns import summary_line as gns_line
from scaleprobe.features.lmspec import baseline_claim
from scaleprobe.features.target import summary_line
from scaleprobe.measure.comm.exposed import same_link_prediction
from scaleprobe.measure.comm.instep import text
from scaleprobe.measure.compiled import summary_line as compile_line
from scaleprobe.measure.compiled import vs_eager_line
from scaleprobe.report.findings.advice import sync_words, unsplit
from scaleprobe.report.findings.diagnose import epoch_start_wait
from scaleprobe.report.reading.window import window_line


def print_run(result: RunResult, con: Console | None = None) -> None:
    con = con or console()
    r, m = result, result.metrics
    status = r.status
    style = {"ok": "green", "oom": "yellow", "target_not_reached": "yellow"}.get(status, "red")
    say(con, f"[bold]{esc(r.name)}[/bold]  status: [{style}]{esc(status)}[/{style}]"
              + (f"  ({esc(r.error)})" if r.error else "") + _load_tag(r))
    if status != "ok" and m.step_time_s is None:
        say(con, f"result: {esc(r.paths.get('dir'))}/result.json")
        return
    con.print(_figures_table(con, _figures(r)))
    _na_line(con, r)
    _rates_line(con, r)
    _uneven_line(con, r)
    _lm_line(con, r)
    _breakdown(con, r)
    _epoch_starts(con, r)
    if r.target is not None:
        say(con, esc(summary_line(r.target.to_dict())))
    _gns_line(con, r)
    _flops_line(con, r)
    _energy_line(con, r)
    _compile_line(con, r)
    _state_line(con, r)
    _comm_line(con, r)
    if r.straggler is not None:
        say(con, "straggler: " + esc(r.straggler.line))
    if r.audit is not None:
        a = r.audit
        tag = "[green]ok[/green]" if a.ok else "[bold red]FAILED[/bold red]"
        say(con, f"shard audit: {tag} - {esc(a.detail)}")
        if m.unique_samples_per_s is not None:
            say(con, f"unique samples/s: {terminal.num(m.unique_samples_per_s)} of "
                      f"{terminal.num(m.samples_per_s)} (the rest were samples read again)")
    for v in r.invariants or []:
        say(con, f"[bold yellow]invariant broken[/bold yellow] ({esc(v['name'])}): "
                  f"{esc(v['detail'])}")
    if m.bad_samples_skipped:
        say(con, f"skipped {m.bad_samples_skipped} unreadable samples")
    if (window := window_line(r)) is not None:
        say(con, esc(window))
    b = r.batch
    say(con, f"batch: {b.per_device} per device, {b.global_} global, "
              f"world size {b.world_size}; {m.steps_timed} steps timed "
              f"of {m.steps_done}; {esc(r.cfg('data.dataset'))} "
              f"({esc(r.dataset_source)})")
    say(con, f"result: {esc(r.paths.get('dir'))}/result.json")


def _figures(r: RunResult) -> list[tuple[str, str]]:
    """(name, value) of the run's headline figures, in the order they are shown."""
    m = r.metrics
    st = m.step_time_s or StepTime()
    # on the samples/s' basis (the timed window), so the two multiply out to the samples per
    # epoch; an epoch measured over whole epochs is its own figure, named so
    sec, proj = r.shown_epoch()
    epoch = terminal.duration(sec) + (" (projected)" if proj else "")
    if proj and r.measured_epoch_s() is not None and r.window_epoch_s is not None:
        epoch += f"; measured over whole epochs {terminal.duration(r.measured_epoch_s())}"
    mem = m.peak_mem_bytes
    found = r.task_metric()
    lm = m.unigram_entropy_nats is not None
    name, value = found if found is not None else ("accuracy", None)
    if found is None and (lm or m.tokens_per_s is not None):  # token batches (lm, a wrapped
        # LM script), not evaluated: the last step's training loss, never an accuracy column
        name, value = "train_loss", m.loss_last
    tokens = ([("tokens/s", terminal.num(m.tokens_per_s))] if m.tokens_per_s is not None
              else [])  # token tasks (lm)
    shown = terminal.num(value, ".3f")
    std = num(m.extra.get(f"{name}_std"))  # face: the spread over the verification folds
    if value is not None and std is not None:
        shown += f" +/- {std:.3f}"
    return [("samples/s", terminal.num(m.samples_per_s)), *tokens,
            ("step median", terminal.duration(st.median)), ("p95", terminal.duration(st.p95)),
            ("epoch time", epoch), ("peak host mem", _host_mem(mem)),
            ("peak device mem", terminal.bytes_(mem.device_allocated)),
            ("CPU util", terminal.num(m.cpu_util_pct, ".0f", "%")),
            ("GPU util", terminal.num(m.gpu_util_pct, ".0f", "%")),
            (name.replace("_", " "), shown)]


def _lm_line(con: Console, r: RunResult) -> None:
    """--task lm: the training loss (first and last step), the held-out loss against the
    context-free baseline on the same held-out tokens (lmspec.baseline_claim), or the last
    held-out loss of the --target evaluations when no final one ran."""
    m = r.metrics
    if m.unigram_entropy_nats is None:
        return
    first, last = m.loss_first, m.loss_last
    train = (f"training loss {first:.3f} -> {last:.3f} nats/token (first and last step)"
             if first is not None and last is not None else "training loss n/a")
    loss = num(m.extra.get("loss"))
    if loss is None:
        say(con, f"language model: {train}; {_no_final_eval(r)}")
        return
    ppl = num(m.extra.get("perplexity"))
    head = (f"language model: {train}; held-out loss {loss:.3f} nats/token (perplexity "
            f"{terminal.num(ppl, '.2f')}) over {terminal.num(num(m.extra.get('eval_tokens')), ',.0f')} "
            "tokens")
    base = num(m.extra.get("baseline_loss"))
    if base is None:
        say(con, head)
        return
    claim = baseline_claim(loss, base, num(m.extra.get("baseline_margin_lo")),
                           num(m.extra.get("baseline_margin_hi")),
                           int(num(m.extra.get("baseline_windows")) or 0))
    say(con, f"{head}, {claim}")


def _no_final_eval(r: RunResult) -> str:
    """Why there is no final held-out loss, with the --target evaluations' last one if any."""
    tt = r.target
    curve = [c for c in (tt.curve if tt else []) if c.get("value") is not None]
    if tt is not None and curve and tt.metric in ("loss", "perplexity"):
        c = curve[-1]
        v = float(c["value"]) if tt.metric == "loss" else math.log(float(c["value"]))
        return (f"last held-out loss {v:.3f} nats/token at step {c.get('step')} (evaluation "
                f"{c.get('evaluation')} of --target; no evaluation after it)")
    if r.cfg("train.eval") or r.cfg("train.target"):
        return "no held-out loss: the run ended before its evaluation"
    return "held-out loss: add --eval (or --target) to score it against the context-free baseline"


def _gns_line(con: Console, r: RunResult) -> None:
    """The gradient noise scale (gns.py), or why it was not measured when it was asked for."""
    line = gns_line(r.gns, r.null_reasons)
    if line:
        say(con, esc(line))


def _energy_line(con: Console, r: RunResult) -> None:
    """Joules per sample (and token, and to the target) over the timed window, GPU runs."""
    m = r.metrics
    if m.joules_per_sample is None:
        return
    line = f"energy: {m.joules_per_sample:.3g} J per sample"
    if m.joules_per_token is not None:
        line += f", {m.joules_per_token:.3g} J per token"
    if m.joules_to_target is not None:
        line += f", {m.joules_to_target / 1000:.3g} kJ to the target"
    say(con, esc(line + f" ({m.energy_method}, over the timed window)"))


def _flops_line(con: Console, r: RunResult) -> None:
    """FLOPs per step, achieved TFLOP/s and MFU against the peak and where the peak came from."""
    m, why = r.metrics, r.null_reasons
    if not m.flops_per_step:
        if why.get("flops_per_step"):
            say(con, f"FLOPs: {esc(why['flops_per_step'])}")
        return
    line = (f"FLOPs: {flops(m.flops_per_step)} per step, "
            f"{flops(m.achieved_flops_per_s, per_s=True)} achieved")
    res = r.resolved or {}
    vocab, rows = res.get("data.vocab_size"), res.get("model.vocab_padded")
    if vocab and rows and rows != vocab:  # the GPT's head: the FLOPs and parameters count it
        line += f" (the head's {rows:,} rows counted: vocabulary {vocab:,} padded)"
    p = m.peak or Peak()
    if m.mfu is not None and p.flops_per_s is not None:
        peak = flops(p.flops_per_s * (p.devices or 1), per_s=True)
        line += f", MFU {mfu(m.mfu)} of {peak} {p.dtype} ({p.source})"
    else:
        line += f"; MFU: {why.get('mfu') or 'n/a'}"
    say(con, esc(line))


def _compile_line(con: Console, r: RunResult) -> None:
    """torch.compile's time, apart from the timed window (measure/compiled.py)."""
    why = r.null_reasons or {}
    line = compile_line(r.metrics.to_dict(), r.compile, why)
    if line is None and r.cfg("model.compile"):
        line = f"compile: {why.get('compile_time_s') or 'not measured'}"
    if line:
        say(con, esc(line))
    vs = vs_eager_line(r.compile, why)
    if vs:
        say(con, esc(vs))


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
    from rich.measure import Measurement  # heavy: rich

    return Measurement.get(con, con.options.update(width=10_000), table).maximum


def _rates_line(con: Console, r: RunResult) -> None:
    """What samples/s adds up when several ranks train (their step medians may differ)."""
    text = r.rate_definition()
    if text:
        say(con, f"samples/s: {esc(text)}")


def _uneven_line(con: Console, r: RunResult) -> None:
    """samples/s is the window's throughput; where the median step says another figure by
    more than the noise, name it and why (the breakdown above is the median step's)."""
    gap = uneven_steps(r)
    if gap is None:
        return
    step, window = gap
    con.print(f"[bold yellow]steps vary widely[/bold yellow]: {terminal.num(window)} samples/s over "
              f"the timed window, {terminal.num(step)} from the median step ({step / window:.2f}x); "
              "see steps.csv for the slow steps")


def _host_mem(mem: PeakMem) -> str:
    """Total peak, and beside it the part above the baseline read before the model was built."""
    total = terminal.bytes_(mem.host)
    return total if mem.host_net is None else f"{total} (net {terminal.bytes_(mem.host_net)})"


def _load_tag(r: RunResult) -> str:
    if r.load is None or r.load.flag is not True:
        return ""
    return f"  [bold yellow]measured under load[/bold yellow]: {esc(r.load.reason)}"


def _comm_line(con: Console, r: RunResult) -> None:
    """Exposed communication as transfer + sync overhead, each said what it is; none at
    world size 1; the network model only for the link the run was measured on. Printed
    without markup: link names can be a user's file path."""
    c = r.comm
    if c is None:
        if r.null_reasons.get("comm"):  # a script whose ranks never communicated
            con.print(f"communication: {r.null_reasons['comm']}", markup=False)
        return
    world = r.batch.world_size
    if world is not None and world < 2:
        line = "communication: none (world size 1)"
        if c.wrapper_overhead_s is not None:
            line += "; " + CL.resolved_time("wrapper overhead", c.extra.get("wrapper_overhead"),
                                            _ms, " per step")
            line += (" (sync minus no_sync with one process: hooks and bucket copies, not "
                     "communication; left in backward)")
        say(con, line, markup=False)
        return
    per = c.exposed_per_step or {}
    share = f" ({c.exposed_fraction:.0%} of the step)" if c.exposed_fraction is not None else ""
    split = (f" = transfer {_ms(c.transfer_s)} + sync overhead {_ms(c.sync_overhead_s)}"
             if c.transfer_s is not None and c.sync_overhead_s is not None else "")
    if per.get("median_s") is not None:
        # the headline is the in-step figure, median and interval (bug caught: a 23.9 ms
        # mean-share figure without an interval above the in-step median of 11.4 ms)
        calls = c.calls_per_step or {}
        what = (f" (blocked in {calls.get('all_gather', 0)} all-gathers and "
                f"{calls.get('reduce_scatter', 0)} reduce-scatters per step)" if calls else "")
        say(con, f"communication: exposed, measured in the step: median "
                 f"{text(per, _ms)} per step{what}", markup=False)
        if c.exposed_s is not None:
            say(con, f"  in the breakdown (the typical steps laid over the median step): "
                     f"{_ms(c.exposed_s)}{share}{split}", markup=False)
    else:
        line = f"communication: exposed {_ms(c.exposed_s)} per step"
        if c.exposed_s is None and c.exposed_reason:
            line += f" ({c.exposed_reason})"
        say(con, line + share + split, markup=False)
    if c.cross_check:
        say(con, "  cross-check, sync minus no_sync (not in the breakdown): "
                  + text(c.cross_check, _ms), markup=False)
    std = c.transfer_standalone or {}
    if std:
        every = f", once every {std['every']} steps" if (std.get("every") or 1) > 1 else ""
        hidden = c.transfer_hidden_s or 0.0
        hid = f"; {_ms(hidden)} of it hidden under compute" if hidden > 0 else ""
        say(con, f"  transfer: standalone {std.get('op')} of {terminal.bytes_(std.get('bytes'))} on "
                  f"this run's process group, median {_ms(std.get('median_s'))}{every}{hid}",
                  markup=False)
        tr = known(r.cfg("dist.strategy"))
        parts = (sync_words(r)[1] if tr is not None and tr.shards_state else
                 "hooks, bucket copies, a server's work, waiting for the slowest rank")
        # its parts are not measured apart: named as what it may hold, never as a split
        say(con, f"  sync overhead: the rest, not the network ({unsplit(parts)})",
            markup=False)
    _prediction_lines(con, c, r)


def _state_line(con: Console, r: RunResult) -> None:
    """Parameters + gradients + optimizer state each rank holds, with its own peak beside."""
    sb = r.metrics.state_bytes
    rows = sb.by_rank if sb is not None else []
    if sb is None or not rows:
        return
    shown = rows if len(rows) <= 4 else [x for x in rows if x.rank == sb.rank]
    parts = []
    for x in shown:
        peak = (f"peak device allocated {terminal.bytes_(x.device_allocated)}"
                if x.device_allocated is not None else
                f"peak RSS {terminal.bytes_(x.host_peak_rss)}")
        parts.append(f"rank {x.rank} {terminal.bytes_(x.params_bytes)} + "
                     f"{terminal.bytes_(x.grads_bytes)} + "
                     f"{terminal.bytes_(x.optimizer_bytes)} = "
                     f"{terminal.bytes_(x.total_bytes)} ({peak})")
    tail = f" (the largest of {len(rows)} ranks)" if len(shown) < len(rows) else ""
    say(con, "state per rank, params + grads + optimizer: " + "; ".join(parts) + tail,
              markup=False)


def _prediction_lines(con: Console, c: Comm, r: RunResult) -> None:
    same = same_link_prediction(c, r.cfg("dist"))
    named = c.prediction
    link = (c.measured_link or {}).get("name")
    if same:
        line = (f"  model on the link measured ({same['strategy']}, {same['link']}): "
                f"{_ms(same['comm_s'])} per step")
        standalone = (c.transfer_standalone or {}).get("per_step_s")
        if c.transfer_s is not None and same.get("comm_s"):
            line += f" vs the standalone collective's {_ms(standalone)} measured"
            line += agreement(standalone, same["comm_s"], bool(r.load and r.load.flag))
        say(con, line, markup=False)
    if named and named is not same:
        why = (f"what-if: measured on {link}, not compared" if link else
               "the link between the hosts is not known (no --link): not compared")
        line = (f"  model for {named['link']} ({why}): {_ms(named['comm_s'])} per step, "
                f"efficiency {terminal.pct(named.get('efficiency'))}")
        if named.get("needed_gbit_s") is not None:
            line += f", needs >= {named['needed_gbit_s']:.2f} Gbit/s for 90%"
        say(con, line, markup=False)
    elif same and same.get("needed_gbit_s") is not None:
        say(con, f"  needs >= {same['needed_gbit_s']:.2f} Gbit/s for 90% efficiency",
                  markup=False)


AGREE_REL = 0.2  # the standalone collective and the network model agree within 20%


def agreement(standalone: float | None, model: float | None, loaded: bool) -> str:
    """Whether the run's own standalone collective and the network model (`scaleprobe
    comm`'s fit of the link) agree within 20%; if not, both are shown (the line holds them)
    and neither is blamed (core/claim.py): a load on the machine, a stale fit or the run's
    own threads could each explain the gap, and only a third measurement tells which."""
    if not standalone or not model:
        return ""
    ratio = standalone / model
    if abs(ratio - 1.0) <= AGREE_REL:
        return f": they agree ({ratio:.2f}x)"
    text = (": " + CL.disagreement(standalone, model, "the standalone collective",
                                   "the model")
            + " (`scaleprobe comm` on an idle machine is one)")
    if loaded:
        text += "; " + CL.load_caveat((CL.Source("this run", True),))
    return text


def _ms(v: Any) -> str:
    """Milliseconds with two decimals below 1 ms (a small all_reduce is 0.3 ms, not 0.0)."""
    if v is None:
        return "n/a"
    return f"{v * 1000:.2f} ms" if abs(v) < 1e-3 else terminal.duration(v)


def say(con: Console, text: str, markup: bool = True) -> None:
    """One line of the summary, wrapped to the console with its continuation lines indented
    two spaces under the line's own start (a terminal's own wrap puts them at column 0)."""
    from rich.text import Text  # heavy: rich: rich.text is more than `import rich` loads

    t = Text.from_markup(text) if markup else Text(text)
    if con.soft_wrap or len(t.plain) <= con.width:
        con.print(t)
        return
    indent = len(t.plain) - len(t.plain.lstrip(" ")) + 2
    for i, line in enumerate(t.wrap(con, max(20, con.width - indent))):
        line.rstrip()
        con.print(Text(" " * indent) + line if i else line)


# the figures of the summary's table, and the record's key whose reason explains an n/a
NA_KEYS = {"samples/s": "samples_per_s", "step median": "step_time_s",
           "epoch time": "epoch_time_s", "peak device mem": "peak_mem_bytes.device_allocated",
           "CPU util": "cpu_util_pct", "GPU util": "gpu_util_pct", "accuracy": "accuracy",
           "tokens/s": "tokens_per_s", "train loss": "loss_last"}


def _na_line(con: Console, r: RunResult) -> None:
    """Why each n/a in the table is n/a: 'n/a: accuracy: not evaluated (add --eval); peak
    device mem, GPU util: no CUDA device'."""
    by_reason: dict[str, list[str]] = {}
    for name, value in _figures(r):
        key = NA_KEYS.get(name)
        why = r.null_reason(key) if key and value == "n/a" else None
        if why:
            by_reason.setdefault(why, []).append(name)
    if by_reason:
        say(con, "n/a: " + "; ".join(f"{', '.join(n)}: {w}" for w, n in by_reason.items()),
            markup=False)


def console(stderr: bool = False) -> Console:
    """A terminal's width (or ``COLUMNS`` where it is set); piped without ``COLUMNS``, lines
    stay whole for the log that reads them."""
    c = Console(stderr=stderr)
    if c.is_terminal or os.environ.get("COLUMNS", "").isdigit():
        return c
    return Console(stderr=stderr, width=140, soft_wrap=True)


def _breakdown(con: Console, r: RunResult) -> None:
    bd = r.metrics.breakdown_s.phases()
    total = sum(v for v in bd.values() if v) or None
    if not total:
        return
    gpu = bool(r.env.get("gpus")) or r.metrics.peak_mem_bytes.device_peak() is not None
    parts = [f"{phase_name(k, gpu)} {terminal.duration(v)} ({v / total:.0%})" for k, v in bd.items()
             if v is not None]
    # each phase's share of a typical step laid over the median step: they add up to it
    say(con, "step breakdown (each phase of the median step): " + ", ".join(parts))


def _epoch_starts(con: Console, r: RunResult) -> None:
    """The report's "input-bound at epoch starts" evidence, where it holds: the median step
    above leaves that wait out."""
    line = epoch_start_wait(r)
    if line:
        say(con, f"[bold yellow]data wait at epoch starts[/bold yellow]: {esc(line)}")
