"""The runs table as a reader meets it: constant columns above it, one unit per column, the
FLOP/s unit that reads, long evidence cut, no internal names (a 20-column table was cut off
at 1300 px in report.html)."""

from __future__ import annotations

import re

from scaleprobe.core import fmt
from scaleprobe.core.fmt import md_table
from scaleprobe.report import build_report
from scaleprobe.report.render.doc import Long, Section, Table, to_html
from tests.unit.report.factory import run, write_results


def _sweep(step_s: list[float]) -> list[dict]:
    return [run(f"b{i}", batch=16 * 2 ** i, step_s=s, model="digits_cnn", dataset="digits",
                experiment={"id": "bs", "kind": "sweep", "point": {"batch_size": 16 * 2 ** i},
                            "repeat": 0})
            for i, s in enumerate(step_s)]


def _runs_block(md: str) -> tuple[str, list[str]]:
    blocks = md.split("## Runs", 1)[1].split("\n\n")
    table = next(b for b in blocks if b.startswith("| Run"))
    above = [b for b in blocks[:blocks.index(table)] if b.strip()]
    return table, above


def test_constant_columns_go_above_the_table_and_times_keep_one_unit(tmp_path):
    md, _ = build_report(write_results(tmp_path, _sweep([0.0651, 0.4, 1.25])), tmp_path / "o")
    table, above = _runs_block(md.read_text())
    header = table.splitlines()[0]
    for gone in ("Model", "Dataset", "Strategy", "World"):
        assert f"| {gone} |" not in header, header
    assert above and above[0].startswith("All runs: model digits_cnn, dataset digits, "
                                         "strategy single, world 1"), above
    col = [c.strip() for c in header.split("|")].index("Step median")
    cells = [[c.strip() for c in row.split("|")][col] for row in table.splitlines()[2:]]
    assert cells == ["65.1 ms ±1.0%", "400 ms ±1.0%", "1,250 ms ±1.0%"], cells  # was 65.1 ms, 400.0 ms, 1.25 s
    assert "Thresholds." not in md.read_text()


def test_one_run_keeps_every_column():
    from scaleprobe.report.render.sections_runs import split_constant

    headers, rows, common = split_constant(["Run", "Model"], [["a", "x"]])
    assert headers == ["Run", "Model"] and common == []


def test_one_time_formatter_and_one_unit_per_column():
    from scaleprobe.commands import terminal as terminal

    assert terminal.duration is fmt.duration  # the terminal prints times as the report does
    assert fmt.duration(1.5) == "1.50 s"  # was 1500.0 ms and 1.50s
    assert fmt.duration(4.2135) == "4.21 s" and fmt.duration(95.82) == "95.8 s"
    assert fmt.durations([0.0651, 0.4, 1.25]) == ["65.1 ms", "400 ms", "1,250 ms"]
    assert fmt.durations([0.0651, 1.25, None]) == ["0.065 s", "1.25 s", "n/a"]
    assert fmt.durations([2.0, 0.5, 14.0], [True, False, False]) == ["~2.00 s", "0.500 s",
                                                                      "14.0 s"]


def test_flops_in_the_unit_that_reads():
    assert fmt.flops_column([2.4e8, 3.49e9]) == ("GFLOP/s", ["0.24", "3.49"])
    assert fmt.flops_column([3.12e14, None]) == ("TFLOP/s", ["312", "n/a"])
    assert not any("e-0" in c for c in fmt.flops_column([2.4e8, 1e9])[1])


def test_long_evidence_is_cut_after_a_clause_with_the_whole_in_html():
    text = "; ".join(f"batch_size={i}: 9.3% of the measured peak (7.29 of 78.1 GFLOP/s)"
                     for i in range(20))
    cell = Long(text)
    shown = str(cell)
    assert len(shown) < 400 and shown.endswith("... (the whole text: report.html)")
    assert shown.startswith("batch_size=0: 9.3%") and ")" in shown.split(" ...")[0][-2:]
    html = to_html("t", [], [Section("s").add(Table(["Evidence"], [[cell]]))])
    # the whole text, with the break opportunities a narrow column may wrap at
    assert "<details><summary>" in html and "batch_<wbr>size=<wbr>19" in html
    assert str(Long("short")) == "short"


def test_cells_wrap_at_safe_places_and_numbers_keep_their_units():
    """A 20-column runs table was 1696 px wide in a 1200 px column (its last five columns out
    of sight): words may break after _ / = and a comma not inside a number; a number keeps
    its short unit; a next step's column keeps its room. Markdown is untouched."""
    rows = [["mobilenet_v3_small-b256", "exp (batch_size=16, repeat 2)", "1,007 ms ±5.9%",
             "under load (1.66 cores)"]]
    table = Table(["Run", "Point", "Step median", "Outside load"], rows,
                  [False, False, True, True], min_width={1: "25em", 3: "1;x"})
    html = to_html("t", [], [Section("s").add(table)])
    assert "mobilenet_<wbr>v3_<wbr>small-b256" in html
    assert "(batch_<wbr>size=<wbr>16, repeat 2)" in html
    assert "1,007\u00a0ms ±5.9%" in html and "1,<wbr>007" not in html
    assert "under load (1.66 cores)" in html  # a long unit may wrap from its number
    assert '<th style="min-width:25em">Point</th>' in html
    assert "1;x" not in html  # only a plain CSS length is written
    assert "<wbr>" not in md_table(["Run"], [["mobilenet_v3_small"]])


def test_repeats_are_counted_from_one_in_the_report(tmp_path):
    recs = [run(f"r{i}", experiment={"id": "bs", "kind": "sweep", "point": {"batch_size": 16},
                                     "repeat": i}) for i in range(2)]
    md = build_report(write_results(tmp_path, recs), tmp_path / "o")[0].read_text()
    assert "batch_size=16, repeat 1" in md and "batch_size=16, repeat 2" in md
    assert not re.search(r"#\d\b", md)
