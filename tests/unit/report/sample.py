"""A results folder with every kind of record, for report tests and the browser check."""

from __future__ import annotations

from pathlib import Path

from tests.unit.report.factory import (
    GIB,
    breakdown,
    colocate_record,
    comm_record,
    parity_record,
    run,
    scale_point,
    sweep_point,
    write_monitor_csv,
    write_results,
)


def mixed_records(folder: Path) -> list[dict]:
    recs = []
    for i, (bs, mem, epoch) in enumerate([(16, 1.0, 100.0), (32, 1.37, 52.0), (64, 2.0, 50.0)]):
        r = run(f"bs{bs}", batch=bs, epoch_s=epoch, sps=bs / 0.1 * (1 + i / 10),
                host_mem=int(mem * GIB), experiment=sweep_point("batch", batch_size=bs))
        csv = write_monitor_csv(folder / r["run_id"] / "monitor.csv", gpu=(i == 0))
        r["paths"] = {"dir": str(folder / r["run_id"]), "monitor_csv": str(csv)}
        recs.append(r)
    recs.append(run("bs128", status="oom", batch=128, error="out of memory: 12.0 GiB asked",
                    experiment=sweep_point("batch", batch_size=128)))
    for rep, k in enumerate((1.0, 1.01)):  # two repeats: a verdict needs two
        for w, data, comp in ((0, 0.3, 0.11), (1, 0.05, 0.13), (2, 0.01, 0.154)):
            bd = breakdown(0.1, data=data)
            scale = comp * (k if w else 1.0) / (bd["forward"] + bd["backward"])
            bd["forward"] *= scale
            bd["backward"] *= scale
            recs.append(run(f"w{w}" + (f"r{rep}" if rep else ""), workers=w,
                            loader="naive" if w == 0 else "pipelined", transform="heavy",
                            dataset="jpeg-synth", bd=bd, cores=2, threads=2,
                            sps=(120.0 + w) / (k if w else 1.0),
                            experiment=sweep_point("loader", rep, workers=w)))
    recs.append(run("n1", strategy="ddp", nproc=1, sps=100.0, experiment=scale_point("scale", 1)))
    recs.append(run("n2", strategy="ddp", nproc=2, sps=150.0,
                    bd=breakdown(0.13, data=0.03, comm=0.18), experiment=scale_point("scale", 2),
                    comm={"exposed_s": 0.0234, "transfer_s": 0.018, "sync_overhead_s": 0.0054,
                          "transfer_standalone": {"op": "all_reduce", "bytes": 44_700_000,
                                                  "per_step_s": 0.018},
                          "measured_link": {"name": "loopback"}, "prediction": {
                        "strategy": "allreduce", "comm_s": 0.015, "world_size": 2,
                        "link": "loopback", "bandwidth_gbit_s": 12.8, "needed_gbit_s": 6.1,
                        "target_efficiency": 0.9}}))
    recs.append(run("what-if", strategy="ddp", nproc=2, bd=breakdown(0.13, comm=0.1),
                    comm={"exposed_s": 0.013, "measured_link": {"name": "loopback"},
                          "prediction": {"strategy": "allreduce", "comm_s": 0.1,
                                         "world_size": 2, "link": "1gbit"}}))
    recs.append(run("gpu-null", gpu=None, cpu=None, host_mem=None, accuracy=None))
    recs.append(run("failed-one", status="failed", error="boom | pipe"))
    recs.append(run("gpu-run", device_mem=3 * GIB, gpu_total=16 * GIB, gpu=85.0, accuracy=0.91,
                    paths={"top_ops": [{"name": "aten::conv2d", "self_time_ms": 12.5,
                                        "calls": 40},
                                       {"name": "aten::addmm", "self_time_ms": 3.0,
                                        "calls": 10}]}))
    recs += [comm_record(), colocate_record("shared"), colocate_record("pinned"), parity_record()]
    return recs


def write_mixed(folder: Path) -> Path:
    return write_results(folder, mixed_records(folder))
