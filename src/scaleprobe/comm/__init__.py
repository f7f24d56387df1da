"""Collective benchmark, alpha-beta fits and the network cost model.

    bench    time all_reduce / broadcast / reduce / all_gather / ps_push_pull per message size
    fit      time = alpha + beta * bytes, per operation
    links    a link = bandwidth + per-hop latency: presets, rates, measured comm results
    model    communication per step for allreduce / ps / localsgd, efficiency, needed link
    netns    two network namespaces joined by a shaped veth pair (tests of several hosts)

The engine attaches ``predict_for_run(...)`` to every ddp / ps / localsgd result.
"""

from scaleprobe.comm.model import (
    comm_time_s,
    modelled_efficiency,
    needed_bandwidth_gbit_s,
    pattern,
    predict_for_run,
)
from scaleprobe.core.links import PRESETS, Link, resolve_link

__all__ = ["PRESETS", "Link", "comm_time_s", "modelled_efficiency",
           "needed_bandwidth_gbit_s", "pattern", "predict_for_run", "resolve_link"]
