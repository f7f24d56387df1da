"""What a new user reads in the terminal: listings and help that fit it, one convention for
repeats and times, names for what is measured, continuation lines under their text, and a
reason beside every n/a."""

from __future__ import annotations

import io
import re

import pytest
from rich.cells import cell_len
from rich.console import Console

from scaleprobe.cli import main
from scaleprobe.commands.run_summary import print_run, say
from scaleprobe.config import runconfig as C
from scaleprobe.core.result_model import RunResult
from scaleprobe.report.findings.diagnose import format_findings
from scaleprobe.report.findings.finding import Finding
from tests.unit.run.test_assemble import assemble, raw


@pytest.mark.parametrize("command", ["datasets", "models"])
def test_listings_fit_the_terminal_with_the_names_in_one_column(capsys, monkeypatch, command):
    """Bug: `scaleprobe datasets` printed lines of 132-138 columns, wrapped by the terminal
    under the names."""
    monkeypatch.setenv("COLUMNS", "80")
    assert main([command]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and max(map(len, lines)) <= 80, max(lines, key=len)
    starts = {len(ln) - len(ln.lstrip()) for ln in lines if ln.startswith(" ")}
    assert len(starts) == 1  # every continuation under the descriptions' column
    col = next(iter(starts))
    named = [ln for ln in lines if not ln.startswith(" ") and len(ln) > col]
    # each description starts in that column: two spaces or more before it, text at it
    assert all(ln[col - 1] == " " and ln[col] != " " for ln in named), named[:3]


def test_models_lists_the_detectors(capsys):
    """Bug: `scaleprobe models` listed no detection model, though --task detection takes
    nine."""
    assert main(["models", "--filter", "ssdlite"]) == 0
    out = capsys.readouterr().out
    assert "ssdlite320_mobilenet_v3_large" in out and "--task detection" in out
    assert main(["models", "--filter", "resnet18"]) == 0
    assert "torchvision classifier" in capsys.readouterr().out


def test_run_help_is_filled_to_the_terminal_without_backticks(capsys, monkeypatch):
    """Bug: `run --help` kept the module docstring's ~94-column lines and its literal
    backticks."""
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["run", "--help"]) == 0
    out = capsys.readouterr().out
    assert "`" not in out
    long = [ln for ln in out.splitlines() if len(ln) > 80 and not ln.startswith("    ")]
    assert not long, long


def test_a_face_run_is_not_named_like_a_classification_run():
    face = C.build({"task": "face", "dataset": "lfw", "loss": "triplet"})
    cls = C.build({"dataset": "lfw"})
    assert face.default_name() == "digits_cnn-lfw-b64-face-triplet"
    assert cls.default_name() == "digits_cnn-lfw-b64"


def _printed(width: int = 120, gpu: bool = False, **metrics) -> str:
    rec = assemble([raw(0, 0.1102)])
    rec["status"], rec["paths"] = "ok", {"dir": "out/r"}
    rec["metrics"].update(metrics)
    if gpu:
        rec["env"]["gpus"] = [{"index": 0, "name": "H100"}]
    out = io.StringIO()
    print_run(RunResult.from_dict(rec), Console(file=out, width=width))
    return out.getvalue()


def test_the_summary_keeps_the_face_metric_s_spread_and_explains_each_na():
    """Bugs: a face run's summary dropped verification_accuracy_std, and `accuracy n/a`
    stood without a reason."""
    text = _printed(verification_accuracy=0.912, verification_accuracy_std=0.021)
    assert "0.912 +/- 0.021" in text and "verification accuracy" in text
    plain = _printed()
    assert re.search(r"n/a: .*accuracy: not evaluated \(add --eval\)", plain.replace("\n", " ")
                     .replace("  ", " ")), plain


def test_h2d_is_named_for_what_it_is():
    """Bug: "h2d" on a CPU run where nothing is copied to a device."""
    assert "batch prep" in _printed() and "h2d" not in _printed()
    assert "to device" in _printed(gpu=True)


def test_wrapped_lines_keep_their_indent():
    out = io.StringIO()
    con = Console(file=out, width=40)
    say(con, "  transfer: " + "word " * 20, markup=False)
    lines = out.getvalue().splitlines()
    assert len(lines) > 1 and all(ln.startswith("    ") for ln in lines[1:]), lines
    assert max(cell_len(ln) for ln in lines) <= 40
    text = format_findings([Finding("slow", "x " * 80 + "took 11.7 s", "do y " * 30, "info")],
                           width=60)
    rest = [ln for ln in text.splitlines()[1:] if not ln.startswith(("    evidence:",
                                                                     "    next:"))]
    assert rest and all(ln.startswith(" " * 14) for ln in rest)
    assert max(map(len, text.splitlines())) <= 60 and "11.7\n" not in text
