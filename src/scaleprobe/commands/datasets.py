"""``scaleprobe datasets``: the dataset names ``--dataset`` accepts."""

from __future__ import annotations

import argparse

NAME = "datasets"
HELP = "list the datasets --dataset accepts"


def add_arguments(p: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    from scaleprobe.data.datasets import DATASETS

    for name, desc in DATASETS.describe():
        print(f"{name:17s} {desc}")
    return 0
