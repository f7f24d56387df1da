"""Where an experiment's points run: here, each in its own process (``local``, the default), or
each as one job of a Slurm cluster (``slurm``), submitted through submitit.

Both give the sweep the same three calls (``start``, ``wait``, ``stop_all``) and the same
records. Under Slurm a job runs the point exactly as a local point process does
(``experiments/point.py``) but writes its record to a file of its own
(``SCALEPROBE_RESULTS_FILE``); the submitting process, and only it, appends the record to the
experiment's results.jsonl, so jobs ending together never write one file at once. A job the
scheduler ended (``scancel``, time limit, pre-emption, node failure) becomes a point with status
``interrupted`` or ``failed`` and the scheduler's state and reason in its error; the state is read
with ``scontrol``/``squeue``, which need no accounting database (``sacct`` often has none).
Ctrl+C in the submitting process cancels every job it submitted.

A point over several nodes (``nnodes > 1``) is one job of ``nnodes`` tasks, one per node; each
task starts its node's ranks through PyTorch's elastic launcher, the rendezvous on the job's
first node (``launcher_env``).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from scaleprobe.config.runconfig import build
from scaleprobe.core import results as res
from scaleprobe.core.errors import ConfigError, ScaleprobeError
from scaleprobe.experiments import point
from scaleprobe.experiments.point import PointPayload, failed_record, find_attempt
from scaleprobe.experiments.procs import ProcessSet, write_payload

EXECUTORS = ("local", "slurm")
RDZV_PORT = 29400  # the rendezvous port on a multi-node job's first node
# a multi-node point's endpoint before it runs: the job's first node, known once Slurm has
# placed it (job_main puts the real one in; the config key ignores where ranks meet)
FIRST_NODE = f"slurm-first-node:{RDZV_PORT}"

# Slurm job states (squeue/scontrol) that end a job, and the status its point gets
ENDED = {
    "COMPLETED": None,  # the job's own record says how the run ended
    "CANCELLED": "interrupted", "PREEMPTED": "interrupted", "TIMEOUT": "interrupted",
    "DEADLINE": "interrupted",
    "FAILED": "failed", "NODE_FAIL": "failed", "BOOT_FAIL": "failed", "OUT_OF_MEMORY": "oom",
    "REVOKED": "failed",
}


class JobFailed(ScaleprobeError):
    """A job the scheduler ended, or whose function raised: one line, exit code 1."""

    exit_code = 1


@dataclass(frozen=True)
class SlurmOptions:
    """What each job asks the scheduler for (``--partition`` ... ``--slurm-arg``)."""

    partition: str | None = None
    time_min: int = 60
    gpus_per_node: int = 0
    cpus_per_task: int | None = None
    account: str | None = None
    extra: dict[str, str] = field(default_factory=dict)  # --slurm-arg KEY=VALUE, passed through


@dataclass(frozen=True)
class Executor:
    kind: str = "local"
    slurm: SlurmOptions = field(default_factory=SlurmOptions)


LOCAL = Executor()


def parse_time(text: str) -> int:
    """Slurm's time forms as minutes: ``90``, ``1:30:00``, ``2-00:00:00``, ``30:00``."""
    s = str(text).strip()
    try:
        days = 0
        if "-" in s:
            d, s = s.split("-", 1)
            days = int(d)
        parts = [int(p) for p in s.split(":")]
    except ValueError:
        raise ConfigError(f"--time {text!r}: expected minutes or [D-]H:MM:SS, e.g. 30 or 1:30:00"
                          ) from None
    if len(parts) == 1:
        minutes = parts[0]
    elif len(parts) == 2:  # MM:SS
        minutes = parts[0] + (1 if parts[1] else 0)
    elif len(parts) == 3:
        minutes = parts[0] * 60 + parts[1] + (1 if parts[2] else 0)
    else:
        raise ConfigError(f"--time {text!r}: expected minutes or [D-]H:MM:SS")
    minutes += days * 24 * 60
    if minutes <= 0:
        raise ConfigError(f"--time {text!r}: must be at least one minute")
    return minutes


def parse_slurm_args(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--slurm-arg {item!r}: expected KEY=VALUE, e.g. qos=high")
        out[key.strip().lstrip("-").replace("-", "_")] = value
    return out


def from_args(args: Any) -> Executor:
    kind = getattr(args, "executor", None) or "local"
    if kind == "local":
        given = [f for f in ("partition", "time", "account", "slurm_arg", "gpus_per_node",
                             "cpus_per_task") if getattr(args, f, None)]
        if given:
            raise ConfigError(f"--{given[0].replace('_', '-')} is a Slurm option: add "
                              "--executor slurm")
        return LOCAL
    for name in ("gpus_per_node", "cpus_per_task"):
        v = getattr(args, name, None)
        if v is not None and v < (0 if name == "gpus_per_node" else 1):
            raise ConfigError(f"--{name.replace('_', '-')} {v}: must be "
                              f"{'0 or more' if name == 'gpus_per_node' else '1 or more'}")
    opts = SlurmOptions(partition=getattr(args, "partition", None),
                        time_min=parse_time(getattr(args, "time", None) or "60"),
                        gpus_per_node=getattr(args, "gpus_per_node", None) or 0,
                        cpus_per_task=getattr(args, "cpus_per_task", None),
                        account=getattr(args, "account", None),
                        extra=parse_slurm_args(getattr(args, "slurm_arg", None)))
    return Executor("slurm", opts)


def add_executor_options(p: Any) -> None:
    g = p.add_argument_group("where the points run")
    g.add_argument("--executor", choices=EXECUTORS, default="local",
                   help="local: each point a process here (default); slurm: each point one "
                        "Slurm job, submitted with submitit (docs/CLUSTER.md)")
    g.add_argument("--partition", metavar="NAME", help="Slurm partition (default: the "
                   "cluster's default)")
    g.add_argument("--time", metavar="TIME", help="Slurm time limit per job, minutes or "
                   "[D-]H:MM:SS (default: 60)")
    g.add_argument("--gpus-per-node", type=int, metavar="N", help="GPUs per node of each job "
                   "(default: 0)")
    g.add_argument("--cpus-per-task", type=int, metavar="N", help="CPUs of each job's task "
                   "(default: the point's process count)")
    g.add_argument("--account", metavar="NAME", help="Slurm account to charge")
    g.add_argument("--slurm-arg", action="append", metavar="KEY=VALUE",
                   help="any other sbatch option, passed through (repeatable), e.g. qos=high")


# --- the cluster ------------------------------------------------------------------------------

def check_slurm(opts: SlurmOptions) -> None:
    """Before anything is submitted: submitit importable, Slurm's commands on PATH, the
    partition known. One line each (ConfigError, exit 2)."""
    try:
        # optional: submitit (the cluster extra)
        import submitit  # noqa: F401
    except ImportError:
        raise ConfigError("--executor slurm needs submitit: pip install 'scaleprobe[cluster]'"
                          ) from None
    for cmd in ("sbatch", "squeue", "scancel", "scontrol"):
        if shutil.which(cmd) is None:
            raise ConfigError(f"--executor slurm: {cmd} is not on PATH (is this a Slurm "
                              "login node? scripts/slurm-local.sh starts a one-node cluster)")
    if opts.partition:
        names = _partitions()
        if names is not None and opts.partition not in names:
            raise ConfigError(f"--partition {opts.partition}: no such partition (the "
                              f"cluster has: {', '.join(sorted(names)) or 'none'})")


def _partitions() -> set[str] | None:
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%R"], capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return {ln.strip() for ln in out.stdout.splitlines() if ln.strip()}


def _job_fields(job_id: str) -> dict[str, str] | None:
    """``scontrol show job`` as ``{field: value}`` (kept for MinJobAge after the job ends);
    None when scontrol does not know the job."""
    try:
        out = subprocess.run(["scontrol", "show", "job", "-o", str(job_id)],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode == 0 and "JobState=" in out.stdout:
        return dict(f.split("=", 1) for f in out.stdout.split() if "=" in f)
    return None


def job_nodes(job_id: str) -> list[str] | None:
    """The nodes the job ran on (its NodeList expanded), or None when not known."""
    fields = _job_fields(job_id)
    nodes = (fields or {}).get("NodeList")
    return expand_nodelist(nodes) if nodes and nodes != "(null)" else None


def job_state(job_id: str) -> tuple[str | None, str]:
    """(state, reason) of a job from ``scontrol show job`` (kept for MinJobAge after it
    ends), else ``squeue``; (None, "") while unknown."""
    fields = _job_fields(job_id)
    if fields is not None:
        return fields.get("JobState"), fields.get("Reason", "")
    try:
        q = subprocess.run(["squeue", "-h", "-j", str(job_id), "-o", "%T|%r"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None, ""
    line = q.stdout.strip().splitlines()[:1]
    if q.returncode == 0 and line:
        state, _, reason = line[0].partition("|")
        return state, reason
    return None, ""


def launcher_env(environ: dict[str, str], nodelist: list[str] | None = None) -> dict[str, str]:
    """The elastic launcher's settings for this Slurm task of a multi-node job: its node rank
    (SLURM_NODEID), the node count (SLURM_JOB_NUM_NODES / SLURM_NNODES) and the rendezvous
    endpoint on the job's first node (SLURM_JOB_NODELIST expanded by ``scontrol show
    hostnames``, or ``nodelist``), as ``{"node_rank", "nnodes", "rdzv_endpoint"}``."""
    try:
        node_rank = int(environ["SLURM_NODEID"])
        nnodes = int(environ.get("SLURM_JOB_NUM_NODES") or environ["SLURM_NNODES"])
    except (KeyError, ValueError) as e:
        raise ConfigError(f"not inside a Slurm job step (missing {e})") from None
    hosts = nodelist if nodelist is not None else expand_nodelist(
        environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST") or "")
    if not hosts:
        raise ConfigError("not inside a Slurm job: SLURM_JOB_NODELIST is empty")
    if not 0 <= node_rank < nnodes or len(hosts) < nnodes:
        raise ConfigError(f"SLURM_NODEID {node_rank} / {nnodes} nodes / {len(hosts)} hosts "
                          "do not agree")
    return {"node_rank": str(node_rank), "nnodes": str(nnodes),
            "rdzv_endpoint": f"{hosts[0]}:{RDZV_PORT}"}


def expand_nodelist(text: str) -> list[str]:
    if not text:
        return []
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", text], capture_output=True,
                             text=True, timeout=30)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return [text] if "[" not in text and "," not in text else text.split(",")


# --- the job ----------------------------------------------------------------------------------

def job_main(spec_path: str, results_file: str, env: dict[str, str] | None = None) -> int:
    """What a Slurm job runs (pickled by submitit: a module-level function): the point, its
    record going to ``results_file``, with the point's own variables ``env`` (its progress
    file, in the experiment's folder beside the record). In a multi-node job each task runs
    its node's ranks."""
    os.environ.update(env or {})
    os.environ["SCALEPROBE_RESULTS_FILE"] = results_file

    payload = point.PointPayload.from_dict(json.loads(Path(spec_path).read_text()))
    cfg = payload.config
    if cfg.dist.nnodes > 1:
        env = launcher_env(dict(os.environ))
        rank = int(env["node_rank"])
        cfg = build({"dist.node_rank": rank, "dist.rdzv_endpoint": env["rdzv_endpoint"]}, cfg)
        if rank > 0:  # the point's record and run folder are node 0's; another node's go
            # aside (its run folder holds its ranks' logs)
            os.environ["SCALEPROBE_RESULTS_FILE"] = f"{results_file}.node{rank}"
            cfg = build({"out": str(Path(cfg.out) / "slurm" / f"node{rank}")}, cfg)
    elif cfg.dist.rdzv_endpoint == FIRST_NODE:  # a 1-node point of the grid
        cfg = build({"dist.rdzv_endpoint": None}, cfg)
    return point.run_point(replace(payload, config=cfg))


@dataclass
class SlurmPoint:
    job: Any  # submitit.Job
    attempt: str
    log_path: Path  # the job's stderr (what a failure record quotes)
    started_s: float
    payload: PointPayload
    results_file: Path
    ended: tuple[str, str] | None = None  # the scheduler's (state, reason) when it ended it

    @property
    def pid(self) -> str:  # the key the sweep keeps its live points by
        return str(self.job.job_id)


class SlurmProcessSet:
    """Points as Slurm jobs, with ``ProcessSet``'s calls."""

    POLL_S = 1.0

    def __init__(self, opts: SlurmOptions, folder: Path) -> None:
        check_slurm(opts)
        import submitit  # optional: submitit (the cluster extra)

        # submitit asks sacct for job states and warns on every poll where the cluster keeps
        # no accounting; the states come from scontrol/squeue here (job_state)
        logging.getLogger("submitit").setLevel(logging.ERROR)
        self.opts = opts
        self.folder = folder
        self.live: dict[str, SlurmPoint] = {}
        self._submitit = submitit

    def _executor(self, payload: PointPayload) -> Any:
        return self._executor_for(payload.config.dist.nnodes, payload.config.dist.nproc)

    def _executor_for(self, nnodes: int, nproc: int) -> Any:
        ex = self._submitit.AutoExecutor(folder=str(self.folder / "%j"), cluster="slurm")
        params: dict[str, Any] = {"timeout_min": self.opts.time_min, "nodes": nnodes,
                                  "tasks_per_node": 1,
                                  "cpus_per_task": self.opts.cpus_per_task or max(nproc, 1),
                                  "name": "scaleprobe"}
        if self.opts.partition:
            params["slurm_partition"] = self.opts.partition
        if self.opts.gpus_per_node:
            params["gpus_per_node"] = self.opts.gpus_per_node
        if self.opts.account:
            params["slurm_account"] = self.opts.account
        if self.opts.extra:
            params["slurm_additional_parameters"] = dict(self.opts.extra)
        ex.update_parameters(**params)
        return ex

    def start(self, payload: PointPayload, work_dir: Path, label: str,
              env: dict[str, str] | None = None) -> SlurmPoint:
        attempt = payload.attempt
        spec_path = write_payload(payload, work_dir, label)
        results_file = work_dir / f"{label}-{attempt}.jsonl"
        try:
            job = self._executor(payload).submit(job_main, str(spec_path), str(results_file),
                                                 dict(env or {}))
        except Exception as e:  # noqa: BLE001  (sbatch said no: the user's options, one line)
            lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
            raise ConfigError(f"Slurm refused the job: {lines[-1] if lines else type(e).__name__}"
                              ) from None
        point = SlurmPoint(job, attempt, Path(job.paths.stderr), time.monotonic(), payload,
                           results_file)
        self.live[point.pid] = point
        return point

    def wait(self, proc: SlurmPoint, poll_s: float | None = None) -> int:
        """Until the job ends: its exit status (the point's: 0 ok, 3 oom, 130 interrupted, 1
        failed, 2 user error), or, for a job the scheduler ended, 130 / 1 with the state kept
        in ``proc.ended``. The job's record is appended to the experiment's results.jsonl
        here."""
        while True:
            if _returned(proc.job):  # the job's function returned (or raised)
                rc = self._result(proc)
                if rc != 0:  # scancel'ed: it returned 130, and the scheduler says why
                    base, reason = _final_state(proc.pid)
                    if base in ENDED and base != "COMPLETED":
                        proc.ended = (base, reason)
                break
            state, reason = job_state(proc.pid)
            base = _base(state)
            if base in ENDED and base != "COMPLETED":
                proc.ended = (base, reason)
                rc = 1 if ENDED[base] == "failed" else 3 if ENDED[base] == "oom" else 130
                break
            if base == "COMPLETED":
                time.sleep(2)  # the result file is written as the job ends
                if not _returned(proc.job):
                    rc = 1
                    break
                continue
            time.sleep(poll_s if poll_s is not None else self.POLL_S)
        self.live.pop(proc.pid, None)  # not on Ctrl+C: stop_all cancels it
        self._hand_over(proc)
        return rc

    def _result(self, proc: SlurmPoint) -> int:
        nnodes = proc.payload.config.dist.nnodes
        try:  # a job of several tasks (nodes) has one result per task
            out = proc.job.results() if nnodes > 1 else proc.job.result()
        except Exception:  # noqa: BLE001  (the job raised: its traceback is in the log)
            return 1
        if isinstance(out, (list, tuple)):  # a job of several tasks: the first node's
            out = out[0] if out else 1
        return int(out)

    def _hand_over(self, proc: SlurmPoint) -> None:
        """The job's record, with the scheduler's verdict on it when the scheduler ended the
        job, appended to the experiment's results.jsonl by this process."""
        rec = find_attempt(proc.results_file, proc.attempt)
        if proc.ended is not None:
            state, reason = proc.ended
            said, status = _ended_text(proc.pid, state, reason), ENDED[state] or "interrupted"
            if rec is None:
                rec = failed_record(proc.payload.config, proc.payload.experiment, said, status)
            else:
                rec.error = f"{said}; {rec.error or ''}".rstrip("; ")[:1000]
                rec.status = status if rec.status == "ok" else rec.status
        if rec is None:
            return  # collect_record writes the failure with the log's last line
        rec.slurm = {"job_id": proc.pid, "state": proc.ended[0] if proc.ended else "COMPLETED",
                     "nodes": job_nodes(proc.pid)}
        out = Path(proc.payload.config.out or ".")
        res.append_jsonl(res.results_file(out), rec.to_dict())

    def call(self, fn: Any, *args: Any, nnodes: int = 1, nproc: int = 1,
             poll_s: float | None = None) -> tuple[Any, str]:
        """``fn(*args)`` as one job of ``nnodes`` tasks (one per node), waited for: the first
        task's return value and the job's id. A job the scheduler ends, or whose function
        raises, is a one-line ``JobFailed``; Ctrl+C cancels the job."""
        try:
            job = self._executor_for(nnodes, nproc).submit(fn, *args)
        except Exception as e:  # noqa: BLE001  (sbatch said no: the user's options, one line)
            lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
            raise ConfigError(f"Slurm refused the job: {lines[-1] if lines else type(e).__name__}"
                              ) from None
        job_id = str(job.job_id)
        try:
            while not _returned(job):
                state, reason = job_state(job_id)
                base = _base(state)
                if base in ENDED and base != "COMPLETED":
                    raise JobFailed(_ended_text(job_id, base, reason))
                time.sleep(poll_s if poll_s is not None else self.POLL_S)
        except KeyboardInterrupt:
            subprocess.run(["scancel", job_id], capture_output=True, timeout=60)
            raise
        try:
            out = job.results() if nnodes > 1 else job.result()
        except Exception as e:  # noqa: BLE001  (the function raised in the job: its last line)
            lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
            raise JobFailed(f"Slurm job {job_id} failed: {lines[-1] if lines else e!r}; its "
                            f"log: {job.paths.stderr}") from None
        return (out[0] if isinstance(out, (list, tuple)) and out else out), job_id

    STOP_WAIT_S = 30.0  # after scancel: how long the cancelled jobs get to leave their records

    def close(self) -> None:
        """Nothing to end: the jobs are the scheduler's (``ProcessSet.close``'s call)."""

    def stop_all(self, grace_s: float | None = None) -> None:
        """Cancel every job this process submitted (Ctrl+C); each becomes an interrupted
        point, run again on resume. scancel sends the job's processes SIGTERM, on which the run
        stops after its step and writes its record with the steps timed so far: that record is
        waited for (``grace_s``, default ``STOP_WAIT_S``) and handed over, else the
        scheduler's alone."""
        points = list(self.live.values())
        self.live.clear()
        if not points:
            return
        subprocess.run(["scancel", *[p.pid for p in points]], capture_output=True, timeout=60)

        def settled(p: SlurmPoint) -> bool:
            return _returned(p.job) or find_attempt(p.results_file, p.attempt) is not None

        deadline = time.monotonic() + (self.STOP_WAIT_S if grace_s is None else grace_s)
        waiting = points
        while waiting and time.monotonic() < deadline:
            time.sleep(0.5)
            waiting = [p for p in waiting if not settled(p)]
        for p in points:
            p.ended = ("CANCELLED", "cancelled by scaleprobe (Ctrl+C in the submitting process)")
            self._hand_over(p)


def _returned(job: Any) -> bool:
    """The job's function returned or raised: submitit's result file exists (checked
    directly: ``job.done()`` asks sacct, which clusters without accounting refuse)."""
    return Path(job.paths.result_pickle).exists()


def _final_state(job_id: str, within_s: float = 15.0) -> tuple[str | None, str]:
    """The state the job ends in, once the scheduler has it (RUNNING / COMPLETING just after
    the function returned); None when it is not known within ``within_s``."""
    deadline = time.monotonic() + within_s
    while True:
        state, reason = job_state(job_id)
        base = _base(state)
        if base in ENDED or time.monotonic() > deadline:
            return base, reason
        time.sleep(0.5)


def _base(state: str | None) -> str | None:
    """``CANCELLED by 0`` -> ``CANCELLED``."""
    return state.split()[0].rstrip("+") if state else None


def _ended_text(job_id: str, state: str, reason: str) -> str:
    why = f" ({reason})" if reason and reason not in ("None", "(null)") else ""
    return f"Slurm job {job_id} ended {state}{why}"


def process_set(executor: Executor | None, out: Path) -> Any:
    """The sweep's point runner for ``executor``."""
    if executor is None or executor.kind == "local":
        return ProcessSet()
    return SlurmProcessSet(executor.slurm, out / "slurm")
