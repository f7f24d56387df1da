"""Hostile text: run names, sweep ids, paths and error messages that look like rich markup or
like Markdown/HTML are printed and written as the characters they are, and never crash the
summary, the progress lines or the report."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from scaleprobe.commands.run_summary import print_run
from scaleprobe.core import results as res
from scaleprobe.core.result_model import RunResult
from scaleprobe.experiments.spec import Point
from scaleprobe.experiments.sweep_bar import SweepProgress
from scaleprobe.report.compare import compare_paths, print_comparison
from scaleprobe.report.render.build_report import build_report
from tests.unit.report.factory import run, sweep_point, write_results

pytestmark = pytest.mark.timeout(120)

# rich reads "[...]" as markup: a closing tag that opens nothing raises MarkupError, an
# opening one styles the text; the third is the error text that crashed the summary of a
# hung DDP rank (a C++ source path from the PyTorch build machine)
MARKUP = ["[/oops]", "[bold red]x[/]",
          "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534]"
          " Read error [127.0.0.1]:29500: Connection reset by peer"]
RED_X = re.compile(r"\x1b\[[0-9;]*31mx")  # what "[bold red]x" read as markup would print


def _console() -> Console:
    return Console(file=io.StringIO(), force_terminal=True, color_system="standard",
                   width=400)


def _printed(con: Console) -> str:
    return con.file.getvalue()


def _plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


@pytest.mark.parametrize("text", MARKUP)
def test_summary_prints_names_and_errors_literally(text):
    """Catches the summary crashing with MarkupError (exit 1 after the run was recorded) or
    styling a name, when a run name or an error text looks like rich markup."""
    failed = run(text, status="failed", error=text)
    failed["paths"] = {"dir": f"/tmp/{text}"}
    ok = run(text, straggler={"line": f"rank 1 {text}"}, dataset_source=text)
    ok["paths"] = {"dir": f"/tmp/{text}"}
    for rec in (failed, ok):
        con = _console()
        print_run(RunResult.from_dict(rec), con)
        out = _printed(con)
        assert text in _plain(out)
        assert not RED_X.search(out)  # our own colours go to status words, never to "x"
    con = _console()
    print_run(RunResult.from_dict(failed), con)
    assert f"({text})" in _plain(_printed(con).splitlines()[0])


def test_sweep_progress_takes_any_sweep_id_and_point_text():
    """Catches a sweep whose id or point values look like markup crashing the progress bar
    (its description is rendered as markup) or the per-point lines."""
    con = _console()
    bar = SweepProgress(True, con, "[/oops]")
    bar.start(1)
    point = Point({"name": "[bold red]x[/]"}, {})
    bar.point_started(point)
    bar.point_done(point, RunResult(status="failed", error=MARKUP[2]))
    bar.note("[/note]")
    bar.stop()
    out = _plain(_printed(con))
    assert "[bold red]x[/]" in out and "[/__w/pytorch" in out and "[/note]" in out


def test_compare_prints_hostile_names_and_points(tmp_path):
    """Catches `scaleprobe compare` crashing on run names, paths or sweep points that look
    like markup (table cells and the A/B lines are rendered as markup)."""
    a, b = tmp_path / "[/a]", tmp_path / "[bold red]b[/]"
    write_results(a, [run("[/x]")])
    write_results(b, [run("[bold red]y[/]")])
    con = _console()
    print_comparison(compare_paths(a, b), con)
    assert str(b) in _plain(_printed(con))
    pa = [run(f"p{i}", experiment=sweep_point("s", tag=v)) for i, v in enumerate(MARKUP)]
    write_results(tmp_path / "sa", pa)
    write_results(tmp_path / "sb", [{**r, "run_id": r["run_id"] + "b"} for r in pa])
    con = _console()
    print_comparison(compare_paths(tmp_path / "sa", tmp_path / "sb"), con)
    assert "tag=[/oops]" in _plain(_printed(con))


def test_cli_run_named_like_markup_prints_its_name(cli, out_dir):
    """Catches `run --name '[/oops]'` recording the run and then exiting 1 with a MarkupError
    traceback from the summary."""
    p = cli("run", "--model", "linear", "--steps", 2, "--warmup-steps", 1, "--loader", "naive",
            "--name", "[/oops]", "--out", out_dir, "--no-progress", timeout=180)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.startswith("[/oops]  status: ok"), p.stdout[:300]
    assert "Traceback" not in p.stderr
    (rec,) = res.read_jsonl(out_dir / res.RESULTS_FILE)
    assert rec["name"] == "[/oops]"


HOSTILE = ["<script>alert(1)</script>", "a|b", "![pixel](http://example.invalid/p.png)",
           "[click](javascript:alert(1))", "<!-- hide", "x\ny"]


def test_report_md_carries_no_html_or_links_from_run_names(tmp_path):
    """Catches report.md copying a run name's raw <script>, an image or link that loads a
    remote resource, or a '|' / line break that splits a table row (report.html escaped these
    already; Markdown viewers render raw HTML and links)."""
    recs = [run(name, status="failed" if i % 2 else "ok", error=f"bad {name}")
            for i, name in enumerate(HOSTILE)]
    write_results(tmp_path / "r", recs)
    md_path, html_path = build_report(tmp_path / "r")
    md = md_path.read_text()
    assert "<script" not in md and "<!--" not in md
    assert "](http://example.invalid" not in md and "](javascript:" not in md
    assert "&lt;script>alert(1)&lt;/script>" in md  # still readable as the name
    table = next(b for b in md.split("## Runs", 1)[1].split("\n\n")
                 if b.startswith("| Run")).splitlines()
    cols = [len(re.findall(r"(?<!\\)\|", row)) for row in table]
    assert len(set(cols)) == 1, table  # every row as many cells as the header
    assert len(table) == 2 + len(HOSTILE)
    html = html_path.read_text()
    assert "<script>" not in html and "&lt;script&gt;" in html
