"""``scaleprobe compare``: two runs, or two sweeps point by point, side by side.

    scaleprobe compare out-a/20261122-101500-00042-base out-b/20261122-103000-00077-new
    scaleprobe compare before/results.jsonl after/results.jsonl --md compare.md

A and B are each a result.json, a run folder, a results.jsonl or a results folder. One run
on each side is compared metric by metric; sweeps are matched by sweep id and point. B is
faster or slower only when the 95% interval of samples/s B / A excludes 1 (Welch over each
side's repeats; one run a side: its within-run spread, at least +/-10%), and every comparison
names what else differs between A and B (docs/REPORTS.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from scaleprobe.core.errors import OutputError
from scaleprobe.core.results import check_writable, write_text_atomic
from scaleprobe.report.compare import compare_paths, print_comparison, to_markdown

NAME = "compare"
HELP = "compare two runs or two sweeps: B against A with an interval, and what else differs"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", metavar="A", help="baseline: result.json, run folder, results.jsonl "
                   "or folder")
    p.add_argument("b", metavar="B", help="candidate, same forms as A")
    p.add_argument("--md", default=None, metavar="FILE", help="also write the comparison as "
                   "Markdown to FILE")


def run(args: argparse.Namespace) -> int:
    md = _md_path(args.md) if args.md else None  # checked before anything is compared
    cmp = compare_paths(args.a, args.b)
    print_comparison(cmp)
    if md is not None:
        write_text_atomic(md, to_markdown(cmp))  # whole or not at all
        print(f"markdown: {md}")
    return 0


def _md_path(text: str) -> Path:
    """``--md FILE`` that can be written: its folder made and writable, FILE not a folder;
    otherwise one line naming it (OutputError, exit 2), never a traceback."""
    path = Path(text)
    if path.is_dir():
        raise OutputError(f"--md {path} is a folder; give a file name, e.g. {path / 'compare.md'}")
    check_writable(path.parent, what="the comparison")
    return path
