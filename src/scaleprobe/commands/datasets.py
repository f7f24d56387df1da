"""``scaleprobe datasets``: the dataset names ``--dataset`` accepts."""

from __future__ import annotations

import argparse

NAME = "datasets"
HELP = "list the datasets --dataset accepts"


def add_arguments(p: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    from scaleprobe.catalog import DATASETS  # torch-free: listed without importing torch
    from scaleprobe.commands.listing import columns

    print(columns(sorted(DATASETS.items())))
    return 0
