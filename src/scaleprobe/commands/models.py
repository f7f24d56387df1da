"""``scaleprobe models``: the model names ``--model`` accepts."""

from __future__ import annotations

import argparse

from scaleprobe.commands.listing import columns
from scaleprobe.config.catalog import list_models

NAME = "models"
HELP = "list the models --model accepts"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--filter", help="only names containing this text")


def run(args: argparse.Namespace) -> int:
    rows = [(n, d) for n, d in list_models() if not args.filter or args.filter in n]
    if rows:
        print(columns(rows))
    return 0
