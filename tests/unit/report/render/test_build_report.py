"""build_report end to end on hand-made records: sections, robustness, self-contained HTML."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import pytest

from scaleprobe.commands import report as cmd
from scaleprobe.core.errors import ConfigError
from scaleprobe.report import build_report
from tests.unit.report.factory import run, write_results


def test_markdown_sections_and_tables(mixed_report):
    md, _, folder = mixed_report
    for title in ("## Findings", "## Runs", "## Sweeps", "## Scaling", "## Step-time breakdown",
                  "## Utilisation over time", "## Co-location", "## Communication",
                  "## Accuracy parity", "## Top operators"):
        assert title in md
    assert ("| Batch size | Devices | Peak memory | Growth | Epoch time | Growth | Samples/s | "
            "TFLOP/s | MFU | CPU util | GPU util |") in md
    assert "| 32 | 1 | 1.4 GiB | +37% | 52.0 s | -48% [-52.7%, -42.8%] |" in md
    assert "| 128 | 1 | out of memory |" in md
    assert "failed: boom \\| pipe" in md
    assert ("2 processes x 2 threads: 1.50x [1.36, 1.65], 1 repeat: inconclusive (1 repeat), "
            "leaning faster than 1 process; efficiency 75% [68%, 82%]; lost to: communication "
            "18%") in md
    assert "n/a in GPU: no NVML reading" in md
    assert "loader workers compete with compute" in md
    assert "could not be built" not in md
    assert (folder / "report_files" / "breakdown.png").is_file()
    assert re.search(r"!\[[^]]*\]\(report_files/batch-[\w-]+\.png\)", md)


def test_network_table_compares_like_with_like(mixed_report):
    """Catches the network table that set a run measured on loopback against a 1gbit
    prediction ("0.13x"): a run's measurement meets only the prediction for its own link,
    and a prediction for another link is shown as a what-if, uncompared."""
    md, _, _ = mixed_report
    net = md.split("Network model vs measurement", 1)[1].splitlines()
    row = next(ln for ln in net if ln.startswith("| n2 |"))
    assert "| loopback |" in row and "| 23.4 ms | 18.0 ms | 5.4 ms | 18.0 ms | 15.0 ms |" in row
    assert "1.20x" in row
    what_if = next(ln for ln in net if ln.startswith("| what-if |"))
    assert "x |" not in what_if  # no ratio against the 1gbit prediction
    assert "the model for 1gbit says 100.0 ms per step (a what-if, not compared: measured on " \
           "loopback)" in md


def test_every_markdown_table_is_a_table(mixed_report):
    """Bug caught: a column added to a table's headers but not to its alignment row (the runs
    table's MFU): GitHub renders such a block as plain text, not a table. Every table of the
    mixed report has a delimiter row as wide as its header, and rows as wide as both."""
    md, _, _ = mixed_report
    lines = md.splitlines()
    tables = 0
    for i, line in enumerate(lines[:-1]):
        nxt = lines[i + 1]
        if line.startswith("| ") and re.fullmatch(r"\|(-{3}:?\|)+", nxt):
            tables += 1
            width = len(re.findall(r"(?<!\\)\|", line))
            assert len(re.findall(r"\|", nxt)) == width, (line, nxt)
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                assert len(re.findall(r"(?<!\\)\|", row)) == width, (line, row)
    assert tables >= 8


def test_html_is_self_contained(mixed_report):
    _, html, _ = mixed_report
    assert "<script" not in html.lower()
    refs = re.findall(r"""(?:src|href)\s*=\s*["']([^"']*)["']""", html, flags=re.I)
    assert refs, "expected images and in-page links"
    for ref in refs:
        assert ref.startswith(("data:", "#")), ref
    assert "http" not in re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", html)
    imgs = re.findall(r"<img\b[^>]*>", html)
    assert len(imgs) >= 8
    assert all('src="data:image/png;base64,' in i for i in imgs)
    assert "@import" not in html and "url(" not in html


def test_single_run_report_says_what_is_missing(tmp_path):
    write_results(tmp_path, [run("only")])
    md, html = build_report(tmp_path / "results.jsonl", tmp_path / "out")
    text = md.read_text()
    assert "## Runs" in text and "## Sweeps" not in text
    assert "## Not in these results" in text
    assert "scaling runs (`scaleprobe scale`)" in text
    assert "GPU figures" in text
    assert html.is_file()


def test_failed_oom_and_all_null_records_render(tmp_path):
    null_gpu = run("nulls", cpu=None, gpu=None, host_mem=None, rel_ci=None)
    null_gpu["metrics"]["breakdown_s"] = dict.fromkeys(null_gpu["metrics"]["breakdown_s"])
    null_gpu["metrics"]["data_wait_fraction"] = None
    recs = [run("f", status="failed", error="boom"), run("o", status="oom"), null_gpu,
            {"kind": "run", "status": "interrupted"}, {"kind": "mystery", "x": 1}]
    write_results(tmp_path, recs)
    md, html = build_report(tmp_path)
    text = md.read_text()
    assert "out of memory" in text and "failed: boom" in text and "interrupted" in text
    assert "figures of 3 run(s) that did not finish" in text
    # the one finished run measured nothing: no plot is drawn from its nulls (a null drawn
    # as a zero bar would be a figure that was never measured)
    assert "<img" not in html.read_text()


def test_torn_last_line_is_skipped(tmp_path, capsys):
    path = write_results(tmp_path, [run("a"), run("b")])
    with path.open("a") as fh:
        fh.write('{"kind": "run", "name": "torn", "metr')
    md, _ = build_report(tmp_path)
    assert "skipping a torn or corrupt line" in capsys.readouterr().err
    text = md.read_text()
    assert "| a |" in text and "| b |" in text and "| torn |" not in text
    assert "Contents: 2 runs (2 ok)" in text


@pytest.mark.parametrize("cut", ["half", "empty", "binary"])
def test_a_truncated_result_json_is_named_not_no_records(tmp_path, cut):
    """Bug caught: a run folder whose only result.json was cut short said "no result records
    in DIR". The file is named, and why."""
    import json

    folder = tmp_path / "run1"
    folder.mkdir()
    text = json.dumps(run("a"))
    body = {"half": text[: len(text) // 2].encode(), "empty": b"", "binary": b"\xff\xfe\x00"}
    (folder / "result.json").write_bytes(body[cut])
    with pytest.raises(ConfigError, match=r"cannot read .*run1/result.json: ") as e:
        build_report(tmp_path)
    if cut == "half":
        assert "the record ends early (truncated at byte" in str(e.value)
    with pytest.raises(ConfigError, match=r"cannot read .*result.json: "):
        build_report(folder / "result.json")
    (tmp_path / "run2").mkdir()  # beside a readable one: read, with a warning for the other
    (tmp_path / "run2" / "result.json").write_text(text)
    from scaleprobe.report.reading.records import load_records

    assert len(load_records(tmp_path)) == 1


def test_a_newer_schema_is_read_with_a_warning_and_non_objects_are_warned(tmp_path, capsys):
    """Bug caught: records of an unknown schema version were shown without a word; lines that
    are JSON but not objects were dropped silently while a torn line was warned about."""
    from scaleprobe.report.reading.records import load_records

    path = write_results(tmp_path, [run("a"), {**run("b"), "schema": 99}])
    with path.open("a") as fh:
        fh.write('[1, 2]\n"text"\n')
    assert len(load_records(tmp_path)) == 2
    err = capsys.readouterr().err
    assert "1 record(s) of schema 99, which this scaleprobe does not know" in err, err
    assert ":3: skipping a line that is not a record (a JSON array" in err, err
    assert ":4: skipping a line that is not a record (a JSON string" in err, err
    write_results(tmp_path / "old", [run("c")])
    load_records(tmp_path / "old")
    assert capsys.readouterr().err == ""  # a record of this schema: no warning


def test_missing_or_empty_source_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="no such file or folder"):
        build_report(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no result records"):
        build_report(tmp_path / "empty")
    (tmp_path / "blank.jsonl").write_text("\n")
    with pytest.raises(ConfigError, match="no result records"):
        build_report(tmp_path / "blank.jsonl")


def test_monitor_csv_found_after_the_folder_moved(tmp_path):
    from tests.unit.report.factory import write_monitor_csv

    rec = run("moved")
    rec["paths"] = {"monitor_csv": "/elsewhere/id-moved/monitor.csv"}
    write_monitor_csv(tmp_path / "id-moved" / "monitor.csv")
    write_results(tmp_path, [rec])
    md, _ = build_report(tmp_path)
    assert "## Utilisation over time" in md.read_text()


def test_command_writes_and_prints_paths(tmp_path, capsys):
    write_results(tmp_path / "res", [run("a")])
    parser = argparse.ArgumentParser()
    cmd.add_arguments(parser)
    args = parser.parse_args([str(tmp_path / "res"), "--out", str(tmp_path / "o"), "--findings"])
    assert cmd.run(args) == 0
    out = capsys.readouterr().out
    assert str(tmp_path / "o" / "report.md") in out and "report.html" in out
    assert "compute-bound" in out
    with pytest.raises(ConfigError):
        cmd.run(parser.parse_args([str(tmp_path / "missing")]))


def test_report_package_does_not_import_torch(tmp_path):
    write_results(tmp_path, [run("a")])
    code = ("import sys; from scaleprobe.report import build_report; "
            f"build_report({str(tmp_path)!r}); "
            "from scaleprobe.report import compare; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_run_found_twice_is_listed_once(tmp_path):
    rec = run("twice")
    write_results(tmp_path, [rec])
    write_results(tmp_path / "copy", [rec])
    md, _ = build_report(tmp_path)
    assert md.read_text().count("| twice | - | resnet18 |") == 1
