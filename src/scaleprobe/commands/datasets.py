"""``scaleprobe datasets``: the dataset names ``--dataset`` accepts."""

from __future__ import annotations

import argparse

from scaleprobe.commands.listing import columns
from scaleprobe.config.catalog import DATASETS

NAME = "datasets"
HELP = "list the datasets --dataset accepts"


def add_arguments(p: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    print(columns(sorted(DATASETS.items())))
    return 0
