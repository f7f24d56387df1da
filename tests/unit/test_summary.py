"""The terminal summary of a run (commands/summary.py) on hand-made records."""

import io

from rich.cells import cell_len
from rich.console import Console

from scaleprobe.commands.summary import print_run
from scaleprobe.core import fmt as report_fmt
from scaleprobe.core.results import RunResult
from tests.unit.test_assemble import MIB, assemble, raw


def _printed(width: int, **raw_kw) -> str:
    rec = assemble([raw(0, 0.1102, **raw_kw)])
    rec["status"], rec["paths"] = "ok", {"dir": "out/r"}
    rec["metrics"]["accuracy"] = 0.931
    out = io.StringIO()
    print_run(RunResult.from_dict(rec), Console(file=out, width=width))
    return out.getvalue()


def test_narrow_console_lists_the_figures_one_per_row():
    """Bug: at 80 columns the nine-column table cut its headers ("sampl...", "accu...") and
    wrapped values ("1102.0 / ms")."""
    text = _printed(80)
    lines = text.splitlines()
    assert max(cell_len(line) for line in lines) <= 80
    assert "…" not in text
    row = {line.strip("│ ").split("│")[0].strip(): line for line in lines if "│" in line}
    assert "110.2 ms" in row["step median"] and "0.931" in row["accuracy"]
    assert "900 MiB (net 150 MiB)" in row["peak host mem"]  # whole, on one line


def test_wide_console_keeps_the_one_row_table():
    """The one-row table stays where it fits: the headers in one line, the values below."""
    lines = _printed(200).splitlines()
    header = next(line for line in lines if "samples/s" in line)
    assert "step median" in header and "accuracy" in header and "peak host mem" in header


def test_terminal_and_report_write_a_size_alike():
    """Bug: the same peak read "1.19 GiB" in the terminal and "1.2 GiB" in the report (two
    byte formatters)."""
    peak = int(1.19 * 1024) * MIB
    text = _printed(200, peak=peak, baseline=None)
    assert report_fmt.bytes_(peak) in text and "1.19 GiB" not in text


def test_the_wait_at_epoch_starts_is_printed_under_the_breakdown():
    """The median step leaves out the wait for each epoch's first batch; the terminal says so
    where the report's verdict would (bug caught: an H200 run printed 687 samples/s and only
    "step times vary widely" while 54% of each epoch was that wait)."""
    rec = assemble([raw(0, 0.1102)])
    rec["status"], rec["paths"] = "ok", {"dir": "out/r"}
    m = rec["metrics"]
    m.update(epoch_starts_timed=3, epoch_start_data_s=1.31, epoch_start_data_share=1.0,
             epoch_start_window_share=0.51, epoch_start_other_data_s=0.0, steps_per_epoch=3,
             steps_timed=10)
    out = io.StringIO()
    print_run(RunResult.from_dict(rec), Console(file=out, width=300))
    text = out.getvalue()
    assert "data wait at epoch starts: 100% of the data wait fell on the 3 timed steps" in text
    m["epoch_start_data_share"] = 0.3  # spread over the steps: no such line
    out = io.StringIO()
    print_run(RunResult.from_dict(rec), Console(file=out, width=300))
    assert "epoch starts" not in out.getvalue()


def test_an_lm_run_shows_tokens_per_s_and_its_loss_beside_the_unigram_entropy():
    r = raw(0, 0.1, batch=8)
    r["info"].update(tokens_per_sample=64, unigram_entropy_nats=3.231)
    rec = assemble([r], task="lm", dataset="tokens-synthetic")
    rec["status"], rec["paths"] = "ok", {"dir": "out/r"}
    rec["metrics"].update(loss=2.5, perplexity=12.18, eval_tokens=16384)
    out = io.StringIO()
    print_run(RunResult.from_dict(rec), Console(file=out, width=80))
    text = out.getvalue()
    row = {line.strip("│ ").split("│")[0].strip(): line for line in text.splitlines()
           if "│" in line}
    assert "5120.0" in row["tokens/s"] and "2.500" in row["loss"]
    assert ("held-out loss 2.500 nats/token (perplexity 12.18) over 16,384 tokens, below the "
            "training split's unigram entropy 3.231 nats/token") in " ".join(text.split())


def test_a_window_that_ended_at_max_seconds_says_the_median_was_not_stable():
    """--steps auto stopped by --max-seconds with the median's interval at 5.9% against the
    2% asked for. Bug caught: the summary said nothing of it, as if the headline were
    stable."""
    from scaleprobe.core import config as C

    rec = assemble([raw(0, 0.1102)])
    rec["status"], rec["paths"] = "ok", {"dir": "out/r"}
    rec["config"] = C.build({"steps": "auto", "max_seconds": 30.0}).to_dict()
    rec["metrics"]["step_time_s"]["rel_ci"] = 0.059
    rec["metrics"].update(stop_reason="max-seconds", steps_timed=57)
    out = io.StringIO()
    print_run(RunResult.from_dict(rec), Console(file=out, width=300))
    line = next(ln for ln in out.getvalue().splitlines() if ln.startswith("timed window"))
    assert line == ("timed window: 57 steps, ended at --max-seconds (30 s) before the median "
                    "step was stable; the median's 95% interval is ±5.9% of it (stable at "
                    "±2%)")
    rec["metrics"].update(stop_reason="stable")
    rec["metrics"]["step_time_s"]["rel_ci"] = 0.018
    out = io.StringIO()
    print_run(RunResult.from_dict(rec), Console(file=out, width=300))
    assert "ended when the median step was stable; the median's 95% interval is ±1.8%" \
        in out.getvalue()


def test_the_standalone_collective_and_the_model_are_shown_and_neither_blamed():
    """Issue 38 item 5: gaps of 2.37x and 4.16x were blamed on the standalone ("it ran under
    load") without evidence; an independent `scaleprobe comm` then agreed with the standalone,
    not the model. Both figures stand; the gap is said, no side is called off."""
    from scaleprobe.commands.summary import agreement

    assert agreement(1.1e-3, 1.0e-3, False) == ": they agree (1.10x)"
    loaded = agreement(3.1e-3, 0.68e-3, True)
    # 3.1 / 0.68 = 4.559: "4.56x apart"
    assert loaded.startswith(": 4.56x apart; the standalone collective and the model disagree, "
                             "and neither is taken as the right one without a third measurement")
    assert "measured under load: this run" in loaded
    calm = agreement(0.5e-3, 1.0e-3, False)
    assert calm.startswith(": 2.00x apart; ") and "under load" not in calm
    for text in (loaded, calm, agreement(3.1e-3, 0.68e-3, False)):
        assert " is off" not in text and "faster than its fit" not in text
    assert agreement(None, 1.0e-3, False) == ""
