"""``scaleprobe models``: the model names ``--model`` accepts."""

from __future__ import annotations

import argparse

NAME = "models"
HELP = "list the models --model accepts"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--filter", help="only names containing this text")


def run(args: argparse.Namespace) -> int:
    from scaleprobe.models import list_models

    for name, desc in list_models():
        if not args.filter or args.filter in name:
            print(f"{name:34s} {desc}")
    return 0
