"""Experiments: many runs, each in its own process.

- ``sweep``: the cartesian product of a grid of run options (batch size up to out of memory,
  loader settings, models, process counts), resumable; its tables and recommendation are
  the report's (``tables=scaleprobe.report.render.sweep_tables.write_tables``).
- ``colocate``: several jobs alone and then together on one host; slowdown and why.
- ``parity``: the same training on 1 process and on N; does the accuracy hold.

Python API::

    from scaleprobe.experiments import run_sweep, run_colocate
    from scaleprobe.report.render.sweep_tables import write_tables
    records = run_sweep("examples/sweep_batch_mobilenet_v2.toml", "out", tables=write_tables)
"""

from __future__ import annotations

from typing import Any

__all__ = ["run_colocate", "run_sweep"]


def __getattr__(name: str) -> Any:  # imported on first use: the package import stays light
    if name == "run_sweep":
        from scaleprobe.experiments.sweep import run_sweep  # heavy: rich

        return run_sweep
    if name == "run_colocate":
        from scaleprobe.experiments.colocate import run_colocate  # heavy: rich

        return run_colocate
    raise AttributeError(name)
