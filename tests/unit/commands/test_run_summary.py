"""The terminal summary of a run (commands/run_summary.py) on hand-made records."""

import io

import pytest
from rich.cells import cell_len
from rich.console import Console

from scaleprobe.commands.run_summary import print_run
from scaleprobe.core import fmt as report_fmt
from scaleprobe.core.result_model import RunResult
from tests.unit.run.test_assemble import MIB, assemble, raw


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


def _lm_text(metrics, width=80, tt=None, **cfg):
    r = raw(0, 0.1, batch=8)
    r["info"].update(tokens_per_sample=64, unigram_entropy_nats=3.231)
    r.update(loss_first=5.31, loss_last=3.29)
    rec = assemble([r], task="lm", dataset="tokens-synthetic", **cfg)
    rec["status"], rec["paths"] = "ok", {"dir": "out/r"}
    rec["metrics"].update(metrics)
    if tt is not None:
        rec["status"], rec["target"] = "interrupted", tt
    out = io.StringIO()
    print_run(RunResult.from_dict(rec), Console(file=out, width=width))
    text = out.getvalue()
    row = {line.strip("│ ").split("│")[0].strip(): line for line in text.splitlines()
           if "│" in line}
    return row, " ".join(text.split())


def test_an_lm_run_shows_tokens_per_s_and_its_loss_against_the_held_out_baseline():
    """The held-out loss is set against the context-free baseline on the same held-out
    tokens (never the training split's entropy), with the claim's interval."""
    row, text = _lm_text({"loss": 2.5, "perplexity": 12.18, "eval_tokens": 16384,
                          "baseline_loss": 3.0, "baseline_margin": 0.5,
                          "baseline_margin_lo": 0.4, "baseline_margin_hi": 0.6,
                          "baseline_windows": 256}, eval=True)
    assert "5120.0" in row["tokens/s"] and "2.500" in row["loss"]
    assert ("language model: training loss 5.310 -> 3.290 nats/token (first and last step); "
            "held-out loss 2.500 nats/token (perplexity 12.18) over 16,384 tokens, beats the "
            "context-free baseline 3.000 on the same tokens by +0.500 [+0.400, +0.600] "
            "nats/token over 256 windows") in text
    assert "unigram entropy" not in text


def test_an_lm_run_without_evaluation_shows_its_training_loss_not_na():
    row, text = _lm_text({})
    assert "3.290" in row["train loss"] and "loss n/a" not in text
    assert ("training loss 5.310 -> 3.290 nats/token (first and last step); held-out loss: "
            "add --eval (or --target)") in text


def test_an_lm_run_stopped_after_target_evaluations_gives_their_last_loss_not_add_eval():
    """An interrupted --target run evaluated twice: the summary says the last held-out loss
    and where, never "add --eval"."""
    from scaleprobe.core.rank_record import RankTarget, TargetPoint
    from scaleprobe.features.target import summarize

    tt = summarize(RankTarget(metric="loss", value=1.5, eval_every=25,
                              points=[TargetPoint(step=25, train_wall_s=10.0, eval_s=1.0,
                                                  value=3.3),
                                      TargetPoint(step=50, train_wall_s=20.0, eval_s=1.0,
                                                  value=3.1)]),
                   1000, 64, 20)
    _, text = _lm_text({}, width=300, tt=tt, target="loss=1.5")
    assert ("last held-out loss 3.100 nats/token at step 50 (evaluation 2 of --target; no "
            "evaluation after it)") in text
    assert "add --eval" not in text


def test_a_window_that_ended_at_max_seconds_says_the_median_was_not_stable():
    """--steps auto stopped by --max-seconds with the median's interval at 5.9% against the
    2% asked for. Bug caught: the summary said nothing of it, as if the headline were
    stable."""
    from scaleprobe.config import runconfig as C

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
    """Bug caught: gaps of 2.37x and 4.16x were blamed on the standalone ("it ran under
    load") without evidence; an independent `scaleprobe comm` then agreed with the standalone,
    not the model. Both figures stand; the gap is said, no side is called off."""
    from scaleprobe.commands.run_summary import agreement

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


def test_the_flops_line_says_the_padded_head_was_counted():
    r = raw(0, 0.1, batch=8)
    r["info"].update(tokens_per_sample=64, seq_len=64, vocab_size=50257,
                     unigram_entropy_nats=3.0,
                     model_shape={"layers": 2, "width": 32, "heads": 2, "context": 64,
                                  "vocab_padded": 50304})
    rec = assemble([r], task="lm", dataset="tokens-synthetic")
    rec["status"], rec["paths"] = "ok", {"dir": "out/r"}
    rec["metrics"]["flops_per_step"] = 1e9
    out = io.StringIO()
    print_run(RunResult.from_dict(rec), Console(file=out, width=300))
    assert "(the head's 50,304 rows counted: vocabulary 50,257 padded)" in out.getvalue()
    assert rec["resolved"]["model.vocab_padded"] == 50304


@pytest.mark.parametrize(("steps", "says"), [
    (2, "no interval for the median (it needs 3 timed steps or more)"),
    (20, "the median's 95% interval is ±4.0% of it")])
def test_a_window_too_short_for_an_interval_says_so(steps, says):
    """Bug: two timed steps printed "the median's 95% interval is n/a of it"."""
    rec = assemble([raw(0, 0.1102)])
    rec["status"], rec["paths"] = "ok", {"dir": "out/r"}
    rec["metrics"]["step_time_s"]["rel_ci"] = 0.04 if steps >= 3 else None
    rec["metrics"].update(stop_reason="steps", steps_timed=steps)
    out = io.StringIO()
    print_run(RunResult.from_dict(rec), Console(file=out, width=300))
    line = next(ln for ln in out.getvalue().splitlines() if ln.startswith("timed window"))
    assert line == f"timed window: {steps} steps, ended after the --steps count; {says}"
