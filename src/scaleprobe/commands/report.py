"""``scaleprobe report``: tables, plots and a diagnosis from a results folder.

    scaleprobe report scaleprobe-out                 writes report.md + report.html into it
    scaleprobe report scaleprobe-out --out reports/  writes them elsewhere
    scaleprobe report scaleprobe-out/results.jsonl --findings   also prints the diagnosis

DIR is a results folder (searched for results.jsonl files), a results.jsonl, a result.json or
a run folder. report.md holds Markdown tables ready to paste into a README (its plots are
written to report_files/ beside it); report.html is one self-contained file with the plots
embedded, readable offline. Needs no GPU and no torch: run it anywhere the results are.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from scaleprobe.config.sections import RunConfig
from scaleprobe.core.errors import ConfigError
from scaleprobe.report.reading.records import load_records
from scaleprobe.report.render import build_report as report_build
from scaleprobe.report.render.build_report import findings_text

NAME = "report"
HELP = "write report.md and report.html (tables, plots, diagnosis) from results"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("src", metavar="DIR", nargs="?", default=RunConfig.out,
                   help="results folder, results.jsonl, result.json or run folder (default: "
                        "%(default)s, where run, sweep and demo write)")
    p.add_argument("--out", default=None, metavar="DIR2",
                   help="folder for report.md and report.html (default: DIR itself)")
    p.add_argument("--findings", action="store_true",
                   help="also print the diagnosis (verdict, evidence, next step) here")


def run(args: argparse.Namespace) -> int:
    if args.src == RunConfig.out and not Path(args.src).exists():
        raise ConfigError(f"no {args.src} folder here (where run, sweep and demo write by "
                          "default): give the results folder, scaleprobe report DIR")
    md_path, html_path = report_build.build_report(args.src, args.out)
    if args.findings:
        print(findings_text(load_records(args.src)))
        print()
    print(f"report: {md_path}")
    print(f"report: {html_path}")
    return 0
