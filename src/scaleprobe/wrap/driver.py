"""``scaleprobe wrap``'s driver: start the user's script in N ranks through PyTorch's elastic
launcher (``launch.run_workers``, as torchrun), each rank under ``boot.py``; monitors around
it; then the ranks' records through ``assemble.finalize`` into the same run folder,
result.json and results.jsonl line as ``scaleprobe run``.

The script's stdout and stderr are the ranks' own (inherited); its exit code is returned.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from scaleprobe import config as C
from scaleprobe import results as res
from scaleprobe.errors import ConfigError
from scaleprobe.wrap.boot import RANKS_DIR, SETTINGS, traceback_path

# torch's samplers that walk the whole dataset in every process that holds one
WHOLE_DATASET_SAMPLERS = {"RandomSampler", "SequentialSampler"}
ACCURACY_REASON = "not read: the script's own evaluation is not visible to wrap"
# run options that apply to a script (the rest: the script builds its own model and data)
SCRIPT_KEYS = ("dist.nnodes", "dist.node_rank", "dist.rdzv_endpoint", "dist.master_port",
               "dist.timeout_s", "train.warmup_steps", "train.steps",
               "measure.monitor_interval_s", "measure.progress", "measure.summary_every",
               "measure.profile_every", "out", "name")
# and in an experiment spec: the script itself, its arguments and its process count
SPEC_KEYS = (*SCRIPT_KEYS, "script.path", "script.args", "dist.nproc")


def check_target(target: list[str]) -> str:
    """The script (or module) to run exists; returns a short name for it."""
    if not target:
        raise ConfigError("wrap needs a script: scaleprobe wrap [OPTIONS] -- SCRIPT.py [ARGS] "
                          "(or -- -m package.module [ARGS])")
    if target[0] == "-m":
        if len(target) < 2:
            raise ConfigError("-m needs a module name: -- -m package.module [ARGS]")
        try:
            found = importlib.util.find_spec(target[1]) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise ConfigError(f"no module named '{target[1]}' (looked on PYTHONPATH from "
                              f"{os.getcwd()})")
        return target[1].rsplit(".", 1)[-1]
    path = Path(target[0])
    if not path.is_file():
        raise ConfigError(f"script not found: {target[0]}")
    return path.stem


def script_name(target: list[str]) -> str:
    """A short name for a script or module: its file's stem, or the module's last part."""
    return target[1].rsplit(".", 1)[-1] if target[0] == "-m" else Path(target[0]).stem


def script_defaults(flat: dict[str, Any]) -> dict[str, Any]:
    """A script's run options (full keys, with ``script.path``) completed with what wrap sets
    for every script: the script named as the model, its data as the script's own, and the
    launched ranks given DDP's traits (one process per rank, shards audited)."""
    world = int(flat.get("dist.nproc", 1)) * int(flat.get("dist.nnodes", 1))
    name = script_name(C.ScriptConfig(flat["script.path"]).target())
    return {"model.name": f"script:{name}", "data.dataset": "script",
            "dist.strategy": "ddp" if world > 1 else "single", "dist.calibrate_comm": False,
            **flat}


def base_config(overrides: dict[str, Any], target: list[str]) -> C.RunConfig:
    """The run's config: the keys wrap sets (processes, warm-up, output), the command line
    as ``script.path`` and ``script.args`` (so runs of other arguments have other keys)."""
    merged = script_defaults({**overrides, **C.ScriptConfig.from_target(target)})
    if "train.steps" in merged and not isinstance(merged["train.steps"], int):
        raise ConfigError("wrap --steps takes a number of timed steps (the script decides how "
                          "long it trains; auto is not available)")
    return C.build(merged)


def _observed_config(cfg: C.RunConfig, raws: list[dict[str, Any]],
                     facts: list[dict[str, Any]]) -> C.RunConfig:
    """The config as the script ran it: its batch and loader as seen, the audit off when a
    rank's sample indices could not be seen."""
    head = next((r for r in raws if r.get("step_times_s")), raws[0])
    over: dict[str, Any] = {}
    if head.get("samples_per_step"):
        over["train.batch_size"] = int(head["samples_per_step"])
    loader = next((f["loader"] for f in facts if f.get("loader")), None)
    if loader:
        w = int(loader.get("workers") or 0)
        over.update({"data.loader": "pipelined" if w else "naive"}, **({"data.workers": w}
                                                                      if w else {}))
    if not all(f.get("indices_seen") for f in facts):
        over["dist.audit"] = False
    return C.build(over, base=cfg) if over else cfg


def _read_ranks(run_dir: Path, failed_rank: Any = None
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The ranks' records in rank order, and their script facts with the failed rank's
    (``failed_rank``: the launcher's first failure) first: its error and exit code are the
    job's. The others' may be the aftermath (a peer's "connection closed" when the failed
    rank's socket closed before the launcher stopped them, or 130 for that stop)."""
    files = sorted((run_dir / RANKS_DIR).glob("rank-*.json"),
                   key=lambda p: int(p.stem.split("-")[1]))
    outs = []
    for f in files:
        try:
            outs.append((int(f.stem.split("-")[1]), json.loads(f.read_text())))
        except (OSError, ValueError):
            continue
    facts = sorted(outs, key=lambda ro: ro[0] != failed_rank)  # stable: then rank order
    return [o["record"] for _, o in outs], [o["script"] for _, o in facts]


def _sampler_note(facts: list[dict[str, Any]], world: int) -> str | None:
    """Names the classic bug: ranks of one job whose loaders have no DistributedSampler."""
    samplers = {f["loader"]["sampler"] for f in facts if f.get("loader")}
    if world < 2 or not samplers or not samplers <= WHOLE_DATASET_SAMPLERS:
        return None
    return (f"the DataLoader uses {', '.join(sorted(samplers))}, not a DistributedSampler: "
            f"each of the {world} ranks reads the whole dataset")


def _exit_code(facts: list[dict[str, Any]], err: BaseException | None) -> int:
    codes = [f.get("exit_code") for f in facts if f.get("exit_code")]
    if codes:
        return int(codes[0])
    if err is None:
        return 0
    if isinstance(err, KeyboardInterrupt):
        return 130
    code = getattr(err, "exitcode", None)
    return code if isinstance(code, int) and code > 0 else 1


def _keep_traceback(run_dir: Path, facts: list[dict[str, Any]], err: BaseException) -> None:
    """The failing rank's traceback as the run folder's traceback.txt."""
    rank = getattr(err, "rank", None)
    ranks = [rank] if isinstance(rank, int) and rank >= 0 else []
    for r in ranks + list(range(len(facts) or 1)):
        src = traceback_path(run_dir, r)
        if src.is_file():
            shutil.copyfile(src, run_dir / "traceback.txt")
            return


def execute_wrap(cfg: C.RunConfig, target: list[str], name: str,
                 experiment: dict[str, Any] | None = None) -> tuple[dict[str, Any], int]:
    """Run ``target`` under ``cfg``; returns (the written result, the script's exit code).
    ``experiment``: the point this run is of (``scale -- SCRIPT.py``)."""
    from scaleprobe import env as envmod
    from scaleprobe.assemble import finalize
    from scaleprobe.interrupt import Interrupted, sigterm_interrupts
    from scaleprobe.launch import run_workers
    from scaleprobe.measure.monitor import Monitor
    from scaleprobe.runner import _gpu_indices, _mark_partial, check_output, failure_line

    check_output(cfg)
    run_id = res.make_run_id(cfg.name or name)
    run_dir = Path(cfg.out) / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    res.write_json_atomic(run_dir / SETTINGS, {
        "warmup_steps": cfg.train.warmup_steps, "target": target,
        "stop_after": cfg.train.steps if isinstance(cfg.train.steps, int) else None,
        "summary_every": cfg.measure.summary_every, "profile_every": cfg.measure.profile_every})
    d = cfg.dist
    monitor = Monitor(cfg.measure.monitor_interval_s, run_dir / "monitor.csv",
                      cuda_indices=_gpu_indices(cfg), training_in_children=True)
    err: BaseException | None = None
    entry = (sys.executable, "-m", "scaleprobe.wrap.boot", str(run_dir), "--", *target)
    try:
        with sigterm_interrupts(), monitor, _child_env(d.nproc):
            run_workers(entry[0], entry[1:], nproc=d.nproc, nnodes=d.nnodes,
                        node_rank=d.node_rank, rdzv_endpoint=d.rdzv_endpoint,
                        timeout_s=d.timeout_s, log_dir=str(run_dir / "logs"),
                        run_dir=str(run_dir), master_port=d.master_port)
    except ConfigError:
        raise
    except (Interrupted, KeyboardInterrupt, Exception) as e:  # noqa: BLE001  (recorded)
        err = e
    raws, facts = _read_ranks(run_dir, getattr(err, "rank", None))
    run_cfg = _observed_config(cfg, raws, facts) if raws else cfg
    # keyed by the config asked for (the command line), not as observed: a rerun of the same
    # command is the same point, whatever batch the script turned out to use
    rec = res.new_run_record(run_cfg.to_dict(), run_id, cfg.name or f"wrap-{name}", cfg.key())
    rec["paths"] = {"dir": str(run_dir), "steps_csv": str(run_dir / "steps.csv"),
                    "monitor_csv": str(run_dir / "monitor.csv")}
    rec["null_reasons"]["accuracy"] = ACCURACY_REASON
    rec["experiment"] = experiment
    code = _exit_code(facts, err)
    world = cfg.world_size
    rec["script"] = {"target": target, "exit_code": code,
                     "loader": next((f["loader"] for f in facts if f.get("loader")), None),
                     "stopped_after": next((f["stopped_after"] for f in facts
                                            if f.get("stopped_after")), None),
                     "sampler_note": _sampler_note(facts, world)}
    if isinstance(err, KeyboardInterrupt):
        _mark_partial(rec, raws or None, getattr(err, "signame", "SIGINT"))
    elif err is not None or code != 0:
        rec["status"] = "failed"
        line = next((f["error"] for f in facts if f.get("error")), None)
        rank = getattr(err, "rank", None)
        line = line or (failure_line(getattr(err, "message", str(err))) if err
                        else f"the script exited with code {code}")
        rec["error"] = (f"rank {rank}: {line}" if isinstance(rank, int) and rank >= 0
                        else line)[:1000]
        _keep_traceback(run_dir, facts, err or RuntimeError())
    else:
        rec["status"] = "ok"
    rec["env"] = envmod.collect_env()
    rec["env"]["world_size"], rec["env"]["nnodes"] = world, d.nnodes
    return finalize(rec, run_cfg, raws or None, monitor, run_dir), code


class _child_env:  # noqa: N801  (a context manager used like a function)
    """The ranks' environment: scaleprobe importable as in this process, wherever it was
    imported from; and, as torchrun does with several processes per host, one OpenMP thread
    per process unless OMP_NUM_THREADS is set."""

    def __init__(self, nproc: int) -> None:
        self.nproc = nproc

    def __enter__(self) -> None:
        import scaleprobe

        root = str(Path(scaleprobe.__file__).resolve().parent.parent)
        self.saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "OMP_NUM_THREADS")}
        parts = [p for p in (self.saved["PYTHONPATH"] or "").split(os.pathsep) if p]
        if root not in parts:
            os.environ["PYTHONPATH"] = os.pathsep.join([root, *parts])
        if self.nproc > 1 and self.saved["OMP_NUM_THREADS"] is None:
            os.environ["OMP_NUM_THREADS"] = "1"

    def __exit__(self, *exc: Any) -> None:
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
