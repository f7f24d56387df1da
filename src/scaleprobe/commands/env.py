"""``scaleprobe env``: versions, devices, cores, NVML, /dev/shm, threads."""

from __future__ import annotations

import argparse
import json

from scaleprobe.measure.env import collect_env

NAME = "env"
HELP = "show versions, devices, cores, NVML status, /dev/shm size, threads"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")


def run(args: argparse.Namespace) -> int:
    from scaleprobe.commands.terminal import bytes_  # heavy: rich

    e = collect_env()
    if args.json:
        print(json.dumps(e, indent=2))
        return 0
    gpus = ", ".join(f"{g['name']} ({bytes_(g['memory_total_bytes'])})" for g in e["gpus"])
    rows = [
        ("host", e["host"]), ("cpu", f"{e['cpu_model']} ({e['cores']} cores usable)"),
        ("memory", bytes_(e["mem_total_bytes"])), ("python", e["python"]),
        ("torch", f"{e['torch']} (CUDA build {e['cuda_build'] or 'none'})"),
        ("torchvision", e["torchvision"]),
        ("cuda available", str(e["cuda_available"])), ("gpus", gpus or "none"),
        ("driver", e["driver"] or "n/a"), ("nvml", e["nvml"]),
        ("cudnn", str(e["cudnn"] or "n/a")), ("torch threads", str(e["threads"])),
        ("/dev/shm", bytes_(e["shm_bytes"])),
    ]
    for k, v in rows:
        print(f"{k:15s} {v}")
    return 0
