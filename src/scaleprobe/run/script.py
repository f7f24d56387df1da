"""The user's own training script as a run's workload (``scaleprobe wrap``): N ranks started
through PyTorch's elastic launcher (as torchrun starts a script), each running the script
under ``wrap/boot.py``, which leaves the rank's record in the run folder; the driver then
records the run as it records the built-in loop's.

The script's stdout and stderr are the ranks' own (inherited); its exit code is kept in the
record (``script.exit_code``); ``scaleprobe wrap`` exits with scaleprobe's code for the run's
status (run/failure.py), so a script's ``sys.exit(3)`` is a failed run (1), never read as
scaleprobe's out-of-memory code.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import scaleprobe
from scaleprobe.config import runconfig as C
from scaleprobe.config.runconfig import script_defaults, script_name
from scaleprobe.config.sections import RunConfig, ScriptConfig
from scaleprobe.core.errors import ConfigError
from scaleprobe.core.rank_record import RankRecord
from scaleprobe.core.result_model import Experiment, RunResult
from scaleprobe.core.run_blocks import ScriptRun
from scaleprobe.launch import Job, run_workers
from scaleprobe.measure.env import cuda_indices
from scaleprobe.protocols import Ending, Launched
from scaleprobe.run.driver import execute, write_failure
from scaleprobe.run.failure import failure_line
from scaleprobe.run.partial import recover_steps
from scaleprobe.run.resources import check_config
from scaleprobe.wrap.boot import forked_rank, forks_scripts, traceback_path
from scaleprobe.wrap.handoff import RankOutcome, ScriptFacts, Settings

# torch's samplers that walk the whole dataset in every process that holds one
WHOLE_DATASET_SAMPLERS = {"RandomSampler", "SequentialSampler"}
ACCURACY_REASON = "not read: the script's own evaluation is not visible to wrap"
TORCH_BOILERPLATE = "To enable traceback see"  # torch.distributed.elastic's ChildFailedError
NO_OPTIMIZER_STEP = ("no step was timed: wrap counts steps at optimizer.step() (a torch.optim "
                     "optimizer's), and the script called none")


def _module_found(name: str) -> bool:
    """Whether ``python -m NAME`` would find the module here: the working directory first on
    the path, as ``python -m`` puts it (and a rank's start does; the ``scaleprobe`` command's
    own path starts at its script's folder instead). The parent packages imported to look
    are dropped again: a rank forked from this process imports them itself."""
    before, cwd = set(sys.modules), os.getcwd()
    sys.path.insert(0, cwd)
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
    finally:
        sys.path.remove(cwd)
        for new in set(sys.modules) - before:
            del sys.modules[new]


def check_target(target: list[str]) -> str:
    """The script (or module) to run exists; returns a short name for it."""
    if not target:
        raise ConfigError("wrap needs a script: scaleprobe wrap [OPTIONS] -- SCRIPT.py [ARGS] "
                          "(or -- -m package.module [ARGS])")
    if target[0] == "-m":
        if len(target) < 2:
            raise ConfigError("-m needs a module name: -- -m package.module [ARGS]")
        found = _module_found(target[1])
        if not found:
            raise ConfigError(f"no module named '{target[1]}' (looked on PYTHONPATH from "
                              f"{os.getcwd()})")
        return target[1].rsplit(".", 1)[-1]
    path = Path(target[0])
    if not path.is_file():
        raise ConfigError(f"script not found: {target[0]}")
    return path.stem


def base_config(overrides: dict[str, Any], target: list[str]) -> RunConfig:
    """The run's config: the keys wrap sets (processes, warm-up, output), the command line
    as ``script.path`` and ``script.args`` (so runs of other arguments have other keys)."""
    merged = script_defaults({**overrides, **ScriptConfig.from_target(target)})
    if "train.steps" in merged and not isinstance(merged["train.steps"], int):
        raise ConfigError("wrap --steps takes a number of timed steps (the script decides how "
                          "long it trains; auto is not available)")
    return C.build(merged)


class UserScript:
    """``cfg.script``'s command line in ``cfg.dist.nproc`` ranks under ``wrap/boot.py``."""

    training_in_children = True

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.target = cfg.script.target()
        self.label = f"wrap-{script_name(self.target)}"
        self.facts: list[ScriptFacts] = []
        self.code = 0

    def preflight(self) -> None:
        check_target(self.target)
        check_config(self.cfg, launched=True)

    def prepare(self, run_dir: Path) -> None:
        t, m = self.cfg.train, self.cfg.measure
        Settings(t.warmup_steps, self.target, t.steps if isinstance(t.steps, int) else None,
                 m.summary_every, m.profile_every, self.cfg.dist.gloo_io).write(run_dir)

    def monitor_args(self) -> dict[str, Any]:
        return {"cuda_indices": cuda_indices(self.cfg.dist.nproc), "training_in_children": True}

    def environment(self) -> _ChildEnv:
        return _ChildEnv(self.cfg.dist.nproc, self.cfg.dist.threads_per_rank)

    def launch(self, run_dir: Path) -> Launched | None:
        d = self.cfg.dist
        run_dir = run_dir.resolve()  # the script may os.chdir: its rank writes here still
        entry: Any = forked_rank  # a rank forked from here starts without importing torch
        args: tuple[str, ...] = (str(run_dir), *self.target)
        if not forks_scripts():  # a fresh interpreter: a binary's path as the entry
            entry, args = sys.executable, ("-m", "scaleprobe.wrap.boot", args[0], "--", *args[1:])
        run_workers(entry, args, Job.of(d), log_dir=str(run_dir / "logs"),
                    run_dir=str(run_dir), stall_after_s=d.timeout_s)
        return None  # the ranks leave their records in files (``conclude``)

    def conclude(self, result: RunResult, end: Ending, run_dir: Path) -> RunConfig:
        """The ranks' records from their files, the script's facts, and the config as the
        script ran it (its batch and loader as seen). The record keeps the key of the config
        asked for: a rerun of the same command is the same point, whatever batch the script
        turned out to use."""
        ranks, self.facts = read_ranks(run_dir, getattr(end.error, "rank", None))
        refused = next((f.refused for f in self.facts if f.refused), None)
        if refused:  # the script does what wrap cannot run (its own ranks): the user's to fix
            err = ConfigError(refused)
            write_failure(result, run_dir, self.cfg, err)
            raise err
        end.ranks = ranks or None
        if len(ranks) < self.cfg.world_size and end.error is None and end.signame is None:
            recover_steps(end, run_dir)  # a rank ended without its record: its logged steps
            ranks = end.ranks or []
        run_cfg = observed_config(self.cfg, ranks, self.facts) if ranks else self.cfg
        result.config = run_cfg
        result.null_reasons["accuracy"] = ACCURACY_REASON
        self.code = script_exit_code(failed_facts(self.facts, end.error),
                                     end.error if end.signame is None else KeyboardInterrupt())
        facts = self.facts
        if ranks and not any(f.optimizer_steps for f in facts) and all(
                f.optimizer_steps is not None for f in facts):
            result.null_reasons["step_time_s"] = NO_OPTIMIZER_STEP
        result.script = ScriptRun(
            target=self.target, exit_code=self.code,
            loader=next((f.loader for f in facts if f.loader), None),
            stopped_after=next((f.stopped_after for f in facts if f.stopped_after), None),
            sampler_note=sampler_note(facts, self.cfg.world_size))
        return run_cfg

    def error_line(self, end: Ending) -> str | None:
        if end.error is None and self.code == 0:
            return None
        line = next((f.error for f in failed_facts(self.facts, end.error) if f.error), None)
        if line:
            return line
        if end.error is not None:
            line = failure_line(getattr(end.error, "message", None) or str(end.error))
            if TORCH_BOILERPLATE in line and 0 < self.code < 128:
                # the launcher's words for a rank that exited with a code and left no line of
                # its own: the script's exit code says it in scaleprobe's
                return f"the script exited with code {self.code}"
            return line
        return f"the script exited with code {self.code}"

    def keep_traceback(self, run_dir: Path, end: Ending) -> None:
        """The failing rank's traceback as the run folder's traceback.txt."""
        rank = getattr(end.error, "rank", None)
        ranks = [rank] if isinstance(rank, int) and rank >= 0 else []
        for r in ranks + list(range(len(self.facts) or 1)):
            src = traceback_path(run_dir, r)
            if src.is_file():
                shutil.copyfile(src, run_dir / "traceback.txt")
                return


def run_script(cfg: RunConfig, experiment: Experiment | None = None
               ) -> tuple[RunResult, int]:
    """Run ``cfg``'s script; returns (its written result, the script's exit code)."""
    work = UserScript(cfg)
    return execute(work, experiment), work.code


def observed_config(cfg: RunConfig, ranks: list[RankRecord],
                    facts: list[ScriptFacts]) -> RunConfig:
    """The config as the script ran it: its batch and loader as seen, the audit off when a
    rank's sample indices could not be seen."""
    head = next((r for r in ranks if r.step_times_s), ranks[0])
    over: dict[str, Any] = {}
    if head.samples_per_step:
        over["train.batch_size"] = head.samples_per_step
    loader = next((f.loader for f in facts if f.loader), None)
    if loader:
        w = int(loader.get("workers") or 0)
        over.update({"data.loader": "pipelined" if w else "naive"}, **({"data.workers": w}
                                                                      if w else {}))
    if not all(f.indices_seen for f in facts):
        over["dist.audit"] = False
    return C.build(over, base=cfg) if over else cfg


def read_ranks(run_dir: Path, failed_rank: Any = None
               ) -> tuple[list[RankRecord], list[ScriptFacts]]:
    """The ranks' records in rank order, and their script facts with the failed rank's
    (``failed_rank``: the launcher's first failure) first: its error and exit code are the
    job's. The others' may be the aftermath (a peer's "connection closed" when the failed
    rank's socket closed before the launcher stopped them, or 130 for that stop)."""
    outs = RankOutcome.read_all(run_dir)
    facts = sorted((o.script for o in outs), key=lambda f: f.rank != failed_rank)  # stable
    return [o.record for o in outs], facts


def failed_facts(facts: list[ScriptFacts], err: BaseException | None) -> list[ScriptFacts]:
    """The facts whose error and exit code are the job's: the failed rank's alone when the
    launcher named one (a rank killed or stalled leaves none: another rank's error is the
    aftermath, a "connection reset" or a traceback of the collective it waited in); every
    rank's otherwise."""
    rank = getattr(err, "rank", None)
    if isinstance(rank, int) and rank >= 0:
        return [f for f in facts if f.rank == rank]
    return facts


def sampler_note(facts: list[ScriptFacts], world: int) -> str | None:
    """Names the classic bug: ranks of one job whose loaders have no DistributedSampler."""
    samplers = {f.loader["sampler"] for f in facts if f.loader}
    if world < 2 or not samplers or not samplers <= WHOLE_DATASET_SAMPLERS:
        return None
    return (f"the DataLoader uses {', '.join(sorted(samplers))}, not a DistributedSampler: "
            f"each of the {world} ranks reads the whole dataset")


def script_exit_code(facts: list[ScriptFacts], err: BaseException | None) -> int:
    """The script's exit code: the failed rank's own, else what the launch's error implies."""
    codes = [f.exit_code for f in facts if f.exit_code]
    if codes:
        return codes[0]
    if err is None:
        return 0
    if isinstance(err, KeyboardInterrupt):
        return 130
    code = getattr(err, "exitcode", None)
    if isinstance(code, int) and code < 0:
        return 128 - code  # killed by a signal: as a shell reports it (SIGKILL: 137)
    return code if isinstance(code, int) and code > 0 else 1


class _ChildEnv:
    """The ranks' environment: scaleprobe importable as in this process, wherever it was
    imported from; and the ranks' OpenMP threads: ``threads_per_rank`` when set, else, as
    torchrun does with several processes per host, one per process unless OMP_NUM_THREADS
    is set."""

    def __init__(self, nproc: int, threads_per_rank: int | None = None) -> None:
        self.nproc = nproc
        self.threads = threads_per_rank

    def __enter__(self) -> None:
        root = str(Path(scaleprobe.__file__).resolve().parent.parent)
        self.saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "OMP_NUM_THREADS")}
        parts = [p for p in (self.saved["PYTHONPATH"] or "").split(os.pathsep) if p]
        if root not in parts:
            os.environ["PYTHONPATH"] = os.pathsep.join([root, *parts])
        if self.threads is not None:
            os.environ["OMP_NUM_THREADS"] = str(self.threads)
        elif self.nproc > 1 and self.saved["OMP_NUM_THREADS"] is None:
            os.environ["OMP_NUM_THREADS"] = "1"

    def __exit__(self, *exc: Any) -> None:
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
