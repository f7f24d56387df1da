"""Run one configuration and record it: in this process (one device) or in N workers started
through PyTorch's elastic launcher, then one ``result.json`` and one results.jsonl line.

Whatever happens (an error, a lost rank, out of memory, Ctrl+C) the monitors stop, the
workers are gone, and a result with its status is written.
"""

from __future__ import annotations

import os
import re
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from scaleprobe import results as res
from scaleprobe.config import RunConfig, from_dict
from scaleprobe.errors import OutputError, ScaleprobeError, one_line
from scaleprobe.traits import traits_of

OOM_MARKERS = ("out of memory", "can't allocate memory", "cannot allocate memory",
               "defaultcpuallocator", "memoryerror", "outofmemoryerror")


# Under a CPU memory limit (RLIMIT_DATA), oneDNN reports a failed workspace allocation only as
# a primitive it could not create; without a limit the same words mean an unsupported shape or
# layout, so they count as out of memory only where a limit is in force.
LIMITED_OOM_MARKERS = ("could not create a primitive",)


def is_oom(exc: BaseException | str, memory_limited: bool = False) -> bool:
    """True for CUDA out-of-memory and CPU allocator failures; false for everything else,
    including unrecoverable CUDA faults that merely mention memory. ``memory_limited``: the
    process ran under ``--memory-limit``, where oneDNN's allocation failures are oom too."""
    if isinstance(exc, MemoryError):
        return True
    text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    low = text.lower()
    if "illegal memory access" in low or "misaligned address" in low:
        return False
    if memory_limited and any(m in low for m in LIMITED_OOM_MARKERS):
        return True
    return any(m in low for m in OOM_MARKERS)


def apply_memory_limit(limit: str | None) -> tuple[int, int] | None:
    """Cap this process's heap (the soft RLIMIT_DATA) so a too-large batch fails like a full
    GPU; returns the limits before, for ``lift_memory_limit``. A limit at or below what the
    process already holds (Python, torch, the loaded modules) could only fail wherever the
    next allocation happens: a ConfigError says so instead."""
    if not limit:
        return None
    import resource

    from scaleprobe.config import parse_size
    from scaleprobe.env import data_segment_bytes
    from scaleprobe.errors import ConfigError

    n = parse_size(limit)
    held = data_segment_bytes()
    if held is not None and n <= held:
        raise ConfigError(f"--memory-limit {limit} is below the {held >> 20} MiB this process "
                          "already holds (Python, torch and their modules, before any model "
                          f"or data); give it more than {held >> 20} MiB plus what the run needs")
    before = resource.getrlimit(resource.RLIMIT_DATA)
    hard = before[1]
    resource.setrlimit(resource.RLIMIT_DATA,
                       (n if hard == resource.RLIM_INFINITY else min(n, hard), hard))
    return before


def lift_memory_limit(before: tuple[int, int] | None) -> None:
    """Back to the limits before ``apply_memory_limit``: recording the result (environment,
    files) needs memory that a run which hit its limit no longer has."""
    if before is not None:
        import resource

        resource.setrlimit(resource.RLIMIT_DATA, before)


@contextmanager
def memory_limit(limit: str | None) -> Iterator[None]:
    before = apply_memory_limit(limit)
    try:
        yield
    finally:
        lift_memory_limit(before)


def default_name(cfg: RunConfig) -> str:
    d, t = cfg.dist, cfg.train
    b = f"gb{t.global_batch}" if t.global_batch else f"b{t.batch_size}"
    tr = traits_of(d.strategy)
    n = f"-{d.strategy}x{cfg.world_size}" if tr.launched or tr.towers else ""
    return f"{cfg.model.name.rsplit(':', 1)[-1]}-{cfg.data.dataset}-{b}{n}"


# ---------------------------------------------------------------------------------------------
# worker side


def _local_device_and_strategy(cfg: RunConfig):
    from scaleprobe import env as envmod
    from scaleprobe.strategies import build_strategy

    info = envmod.dist_info()
    tr = traits_of(cfg.dist.strategy)
    if tr.in_process:
        envmod.set_threads(1)
    else:
        # a parameter server talks over gloo (TCP), as classic ones do, also on CUDA hosts
        backend = cfg.dist.backend or ("gloo" if tr.needs_any_source_recv else None)
        envmod.init_distributed(backend, cfg.dist.timeout_s)
    device = envmod.pick_device(info.local_rank)
    return device, build_strategy(cfg.dist.strategy, cfg.dist, device)


def worker_main(cfg_dict: dict[str, Any], run_dir: str | None = None,
                progress: bool = True, beat: Any = None,
                stop: Any = None) -> list[dict[str, Any]] | None:
    """Train this rank and gather every rank's record to rank 0. Ctrl+C and SIGTERM are
    handled by ``stop`` (``interrupt.StopRequest``) until the records are gathered."""
    import time

    from scaleprobe import env as envmod
    from scaleprobe.engine import train
    from scaleprobe.interrupt import StopRequest
    from scaleprobe.measure.progress import StepProgress

    cfg = from_dict(cfg_dict)
    stop = stop if stop is not None else StopRequest()
    with stop.handling():
        device, strategy = _local_device_and_strategy(cfg)
        prog = StepProgress(progress and strategy.rank == strategy.progress_rank
                            and cfg.measure.progress)
        # the limit covers training, not the imports before it nor the recording after it
        with memory_limit(cfg.measure.memory_limit):
            raw = train(cfg, strategy, device, prog, clock=time.time, run_dir=run_dir,
                        beat=beat, stop=stop)
        gathered = strategy.gather(raw)
        # Only a rank that finished waits at the closing barrier: a failed rank exits at once
        # (the launcher then stops the others) instead of hiding its error behind a timeout.
        if strategy.distributed:
            envmod.shutdown_distributed()
    return gathered if strategy.rank == 0 else None


HANDOFF = ".ranks-interrupted.json"  # rank 0's gathered records when the launcher was stopped


def _own_process_group() -> None:
    """A launched rank leads its own process group, so its loader workers can be stopped with
    it (``launch.py``), and a terminal's Ctrl+C reaches only the launcher, which forwards it;
    and it dies with the launcher (Linux)."""
    import signal

    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    from scaleprobe.env import die_with_parent

    die_with_parent(signal.SIGKILL)


def launched_worker(cfg_dict: dict[str, Any], run_dir: str,
                    progress: bool = True) -> list[dict[str, Any]] | None:
    """Entry of each rank started by ``launch.run_workers``: a heartbeat for the launcher, a
    stop request that ends training at a step all ranks agree on, and, when the launcher was
    asked to stop (it then no longer collects return values), rank 0's records in a file."""
    from scaleprobe.interrupt import StopRequest
    from scaleprobe.measure.heartbeat import Heartbeat

    _own_process_group()
    from scaleprobe.env import use_platform_start_method

    use_platform_start_method()
    beat = Heartbeat(run_dir, int(os.environ.get("RANK", "0"))).start()
    stop = StopRequest(escape_on_second=False)  # the launcher ends a rank that does not stop
    try:
        out = worker_main(cfg_dict, run_dir, progress, beat=beat, stop=stop)
        if out is not None and (stop.requested or any(r.get("interrupted") for r in out)):
            res.write_json_atomic(Path(run_dir) / HANDOFF, out)
    except BaseException:
        from scaleprobe.launch import last_meaningful_line
        from scaleprobe.measure.heartbeat import write_error

        write_error(run_dir, beat.rank, last_meaningful_line(traceback.format_exc()))
        beat.finish("failed")
        raise
    beat.finish("done")
    if stop.requested:
        # the launcher forwarded a stop: it no longer reads return values, and a worker that
        # returns one waits for it to (torch.distributed.elastic) until it is killed
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return out


# ---------------------------------------------------------------------------------------------
# driver side


def _gpu_indices(cfg: RunConfig) -> list[int]:
    import torch

    if not torch.cuda.is_available():
        return []
    n = torch.cuda.device_count()
    used = n if traits_of(cfg.dist.strategy).towers else min(n, cfg.dist.nproc)
    return list(range(used))


def _check_devices(cfg: RunConfig) -> None:
    import torch

    from scaleprobe.errors import ConfigError

    if torch.cuda.is_available() and cfg.dist.nproc > torch.cuda.device_count():
        raise ConfigError(f"--nproc {cfg.dist.nproc} is more than the {torch.cuda.device_count()} "
                          "CUDA devices on this host (one process per device)")


def _launch(cfg: RunConfig, run_dir: Path) -> list[dict[str, Any]] | None:
    if traits_of(cfg.dist.strategy).in_process:
        return worker_main(cfg.to_dict(), str(run_dir))
    from scaleprobe.interrupt import Interrupted
    from scaleprobe.launch import run_workers

    try:
        out = run_workers(launched_worker, (cfg.to_dict(), str(run_dir)), nproc=cfg.dist.nproc,
                          nnodes=cfg.dist.nnodes, node_rank=cfg.dist.node_rank,
                          rdzv_endpoint=cfg.dist.rdzv_endpoint, timeout_s=cfg.dist.timeout_s,
                          log_dir=str(run_dir / "logs"), run_dir=str(run_dir),
                          master_port=cfg.dist.master_port)
    except Interrupted as e:
        e.raws = _read_handoff(run_dir)
        raise
    _read_handoff(run_dir)  # a stop that came after the records were returned
    return out.get(0)


def _read_handoff(run_dir: Path) -> list[dict[str, Any]] | None:
    import json

    path = run_dir / HANDOFF
    try:
        raws = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    finally:
        path.unlink(missing_ok=True)
    ok = isinstance(raws, list) and raws and all(isinstance(r, dict) for r in raws)
    return raws if ok else None


def _interrupted_from(raws: list[dict[str, Any]] | None) -> str | None:
    """The signal that stopped the ranks early ("peer": another rank's), or None."""
    seen = [r["interrupted"] for r in raws or [] if r.get("interrupted")]
    return next((s for s in seen if s != "peer"), seen[0] if seen else None)


def _mark_partial(rec: dict[str, Any], raws: list[dict[str, Any]] | None, signame: str) -> None:
    """An interrupted run keeps what it measured: the figures of the steps timed so far,
    flagged as partial; what runs after training (calibration, evaluation) was skipped."""
    from scaleprobe.interrupt import describe

    rec["status"], rec["error"] = "interrupted", describe(None if signame == "peer" else signame)
    if not raws:
        rec["null_reasons"]["partial"] = "interrupted before any rank returned its record"
        return
    timed = next((r["steps_timed"] for r in raws if r.get("step_times_s")), 0)
    rec["partial"] = True
    rec["null_reasons"]["partial"] = (
        f"interrupted after {timed} timed steps: the figures cover those steps only; "
        "communication calibration and evaluation were skipped")


def execute(cfg: RunConfig, experiment: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run ``cfg`` and return its result record (also written to disk). A config with
    ``script.path`` runs that script under ``wrap`` (a sweep over a script's own flags)."""
    if cfg.script.path is not None:
        from scaleprobe.wrap.driver import check_target, execute_wrap

        target = cfg.script.target()
        return execute_wrap(cfg, target, check_target(target), experiment=experiment)[0]
    from scaleprobe import env as envmod
    from scaleprobe.assemble import finalize
    from scaleprobe.interrupt import sigterm_interrupts
    from scaleprobe.measure.monitor import Monitor

    preflight(cfg)
    check_output(cfg)
    name = cfg.name or default_name(cfg)
    run_id = res.make_run_id(name)
    run_dir = _make_run_dir(Path(cfg.out) / run_id, cfg)
    rec = res.new_run_record(cfg.to_dict(), run_id, name, cfg.key())
    rec["experiment"] = experiment
    rec["paths"] = {"dir": str(run_dir), "steps_csv": str(run_dir / "steps.csv"),
                    "monitor_csv": str(run_dir / "monitor.csv")}
    launched = traits_of(cfg.dist.strategy).launched
    raws = None
    monitor = Monitor(cfg.measure.monitor_interval_s, run_dir / "monitor.csv",
                      cuda_indices=_gpu_indices(cfg), training_in_children=launched)
    try:
        with sigterm_interrupts(), monitor:
            raws = _launch(cfg, run_dir)
        rec["status"] = "ok"
        if _interrupted_from(raws):
            _mark_partial(rec, raws, _interrupted_from(raws) or "SIGINT")
    except KeyboardInterrupt as e:  # Ctrl+C, SIGTERM (interrupt.Interrupted), the launcher's
        raws = getattr(e, "raws", None)
        _mark_partial(rec, raws, getattr(e, "signame", "SIGINT"))
    except ScaleprobeError as e:
        _write_failure(rec, run_dir, cfg, e)
        raise
    except BaseException as e:  # noqa: BLE001  (recorded, never lost)
        msg = getattr(e, "message", None) or f"{type(e).__name__}: {e}"
        _reraise_user_error(msg, rec, run_dir, cfg)
        limited = bool(cfg.measure.memory_limit)
        rec["status"] = "oom" if is_oom(msg, limited) or is_oom(e, limited) else "failed"
        rank = getattr(e, "rank", None)
        line = failure_line(msg)
        rec["error"] = (f"rank {rank}: {line}" if rank is not None and rank >= 0 else line)[:1000]
        if rec["status"] == "failed":
            _save_traceback(run_dir)
    rec["env"] = envmod.collect_env()
    rec["env"]["world_size"] = cfg.world_size
    rec["env"]["nnodes"] = cfg.dist.nnodes
    finalize(rec, cfg, raws, monitor, run_dir)
    return rec


# What a run writes: a 4-step digits_cnn run wrote 12 KiB (config.json 1.5, result.json 6,
# its results.jsonl line 4.5, steps.csv and monitor.csv under 1 each; measured 2026-11-23);
# steps.csv (~70 B a step) and monitor.csv (~100 B a sample) grow with the run, and 1 MiB
# holds thousands of steps and an hour of samples at the default interval.
RUN_OUTPUT_BYTES = 1 << 20


def check_output(cfg: RunConfig) -> None:
    """The output folder can be written and has room for a run's files (OutputError, exit 2,
    naming the folder, before any run folder or worker exists)."""
    res.check_writable(cfg.out, RUN_OUTPUT_BYTES, "a run's files")


def _make_run_dir(run_dir: Path, cfg: RunConfig) -> Path:
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        res.write_json_atomic(run_dir / "config.json", cfg.to_dict())
    except OSError as e:  # the folder filled or turned read-only since the preflight
        _remove_empty(run_dir)
        raise res.output_error(run_dir, e, "cannot create the run folder") from None
    except OutputError:
        _remove_empty(run_dir)
        raise
    return run_dir


def _remove_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass


def _save_traceback(run_dir: Path) -> None:
    try:
        (run_dir / "traceback.txt").write_text(traceback.format_exc())
    except OSError:  # a full or read-only folder: the result write reports it
        pass


SHM_MARKERS = ("unable to allocate shared memory", "insufficient shared memory",
               "out of shared memory", "unable to write to file </torch_")
_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Failure)\b.*:")


def failure_line(msg: str) -> str:
    """What a failed run records: one line. A loader worker's error arrives with the worker's
    traceback folded into its message (torch's ``Caught X in DataLoader worker``) and its
    cause on the last line: keep the first line and that cause. A full /dev/shm gets its
    size and what to do about it."""
    lines = [ln.strip() for ln in msg.splitlines() if ln.strip()]
    if not lines:
        return msg
    shm = next((ln for ln in reversed(lines) if any(m in ln.lower() for m in SHM_MARKERS)), None)
    if len(lines) == 1 and shm is None:
        return lines[0]
    cause = next((ln for ln in reversed(lines[1:]) if _EXC_LINE.match(ln)), None)
    cause = shm or cause or lines[-1]
    head = lines[0].rstrip(".")
    text = head if cause in (lines[0], "") else f"{head}: {cause}"
    return f"{text}; {shm_advice()}" if shm else text


def shm_advice() -> str:
    from scaleprobe.env import shm_bytes

    size = shm_bytes()
    have = ("/dev/shm is missing" if size is None else
            f"/dev/shm has {size >> 10} KiB" if size < 16 << 20 else
            f"/dev/shm has {size >> 20} MiB")
    return f"{have}; use --loader naive, fewer --workers or a larger /dev/shm"


def _write_failure(rec: dict[str, Any], run_dir: Path, cfg: RunConfig,
                   err: BaseException) -> None:
    """A user error (bad data, bad option) met during the run: its line in result.json and in
    results.jsonl, like any other ending."""
    rec["status"] = "failed"
    rec["error"] = one_line(err)[:1000]
    rec["finished_at"] = res.utc_now()
    try:
        res.write_json_atomic(run_dir / "result.json", rec)
        res.append_jsonl(res.results_file(cfg.out), rec)
    except OutputError:  # the user's own error says more than a full disk would
        pass


def _reraise_user_error(msg: str, rec: dict[str, Any], run_dir: Path, cfg: RunConfig) -> None:
    """A worker's ConfigError / DataError is the user's mistake: one line, exit 2."""
    from scaleprobe.errors import ConfigError, DataError

    for cls in (ConfigError, DataError):
        prefix = f"{cls.__name__}: "
        if msg.startswith(prefix):
            err = cls(msg[len(prefix):])
            _write_failure(rec, run_dir, cfg, err)
            raise err from None


def preflight(cfg: RunConfig) -> None:
    """Cheap checks in the driver, so a typo fails in one line before any worker starts."""
    if cfg.script.path is not None:  # the script builds its own model and data
        from scaleprobe.wrap.driver import check_target

        check_target(cfg.script.target())
        return
    from scaleprobe.data.datasets import DATASETS, check_data_dir

    DATASETS.get(cfg.data.dataset)
    check_data_dir(cfg.data)
    from scaleprobe.tasks import check_model_name

    check_model_name(cfg.task.task, cfg.model.name)
    if cfg.task.task == "detection" and cfg.train.eval:
        from scaleprobe.tasks.detection import require_metric

        require_metric()  # the optional libraries of the mAP: before training, not after
    tr = traits_of(cfg.dist.strategy)
    if tr.towers:
        from scaleprobe.strategies.dp import check_devices

        check_devices()
    elif tr.launched:
        _check_devices(cfg)


def exit_code(rec: dict[str, Any]) -> int:
    return {"ok": 0, "oom": 3, "target_not_reached": 4, "interrupted": 130}.get(rec["status"], 1)


def running_under_launcher() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or "LOCAL_RANK" in os.environ


def run_under_launcher(cfg: RunConfig) -> dict[str, Any] | None:
    """This process is one worker of a job someone else launched (torchrun). Every rank
    trains; rank 0 monitors its own process tree and writes the result."""
    from scaleprobe import env as envmod
    from scaleprobe.assemble import finalize
    from scaleprobe.interrupt import StopRequest
    from scaleprobe.measure.monitor import Monitor

    preflight(cfg)
    info = envmod.dist_info()
    if info.rank == 0:
        check_output(cfg)
    name = cfg.name or default_name(cfg)
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "") or res.make_run_id(name)
    run_dir = Path(cfg.out) / res.make_run_id(name) if info.rank == 0 else None
    monitor = Monitor(cfg.measure.monitor_interval_s,
                      run_dir / "monitor.csv" if run_dir else None,
                      cuda_indices=[info.local_rank] if _gpu_indices(cfg) else [],
                      run_root_pid=os.getppid())  # the launcher's tree holds every local rank
    with monitor:  # ranks under a launcher stop together when it forwards a signal
        raws = worker_main(cfg.to_dict(), str(run_dir) if run_dir else None,
                           stop=StopRequest(escape_on_second=False))
    if run_dir is None:
        return None
    rec = res.new_run_record(cfg.to_dict(), run_dir.name, name, cfg.key())
    rec["status"] = "ok"
    if _interrupted_from(raws):
        _mark_partial(rec, raws, _interrupted_from(raws) or "SIGTERM")
    rec["launcher_run_id"] = run_id
    rec["paths"] = {"dir": str(run_dir), "steps_csv": str(run_dir / "steps.csv"),
                    "monitor_csv": str(run_dir / "monitor.csv")}
    res.write_json_atomic(run_dir / "config.json", cfg.to_dict())
    rec["env"] = envmod.collect_env()
    return finalize(rec, cfg, raws, monitor, run_dir)
