"""One run, whatever trains: the built-in loop (``run/builtin.py``) or the user's own script
(``run/script.py``), each a ``Workload`` (``scaleprobe/protocols.py``). The driver is the skeleton both share:

    preflight -> output checks -> run folder -> the record -> monitors -> launch
      -> how it ended (ok, interrupted, out of memory, failed) -> environment -> finalize

Whatever happens (an error, a lost rank, out of memory, Ctrl+C) the monitors stop, the
workers are gone, and a ``RunResult`` with its status is written: result.json in the run
folder and one line in results.jsonl (``run/finalize.py``). The record is typed from the
moment the run starts: nothing here builds it as a dict.
"""

from __future__ import annotations

import contextlib
import traceback
from pathlib import Path

from scaleprobe.config.sections import RunConfig
from scaleprobe.core import results as res
from scaleprobe.core.errors import ConfigError, DataError, OutputError, ScaleprobeError, one_line
from scaleprobe.core.rank_record import RankRecord
from scaleprobe.core.result_model import Experiment, RunResult
from scaleprobe.core.run_blocks import RunEnv
from scaleprobe.features.interrupt import Interrupted, describe, sigterm_interrupts
from scaleprobe.launch.failures import WorkerFailure
from scaleprobe.measure import env as envmod
from scaleprobe.measure.monitor import Monitor
from scaleprobe.measure.steplog import discard as discard_step_logs
from scaleprobe.protocols import Concludes, Ending, NamesItsErrors, PreparesFiles, Workload
from scaleprobe.run.failure import failure_line, is_oom
from scaleprobe.run.finalize import finalize
from scaleprobe.run.partial import mark_logged, recover_steps

# What a run writes: a 4-step digits_cnn run wrote 12 KiB (config.json 1.5, result.json 6,
# its results.jsonl line 4.5, steps.csv and monitor.csv under 1 each; measured 2026-11-23);
# steps.csv (~70 B a step) and monitor.csv (~100 B a sample) grow with the run, and 1 MiB
# holds thousands of steps and an hour of samples at the default interval.
RUN_OUTPUT_BYTES = 1 << 20
USER_ERRORS: dict[str, type[ScaleprobeError]] = {c.__name__: c for c in (ConfigError, DataError)}


def execute(work: Workload, experiment: Experiment | None = None) -> RunResult:
    """Run ``work`` and return its result (also written to disk). ``experiment``: the
    point this run is of."""
    cfg = work.cfg
    work.preflight()
    check_output(cfg)
    name = cfg.name or work.label
    run_id = res.make_run_id(name)
    run_dir = make_run_dir(Path(cfg.out) / run_id, cfg)
    result = RunResult(run_id=run_id, name=name, key=cfg.key(), started_at=res.utc_now(),
                       config=cfg,
                       experiment=experiment,
                       paths={"dir": str(run_dir), "steps_csv": str(run_dir / "steps.csv"),
                              "monitor_csv": str(run_dir / "monitor.csv")})
    if isinstance(work, PreparesFiles):
        work.prepare(run_dir)
    monitor = Monitor(cfg.measure.monitor_interval_s, run_dir / "monitor.csv",
                      **work.monitor_args())
    end = Ending()
    try:
        with sigterm_interrupts(), monitor, work.environment():
            launched = work.launch(run_dir)
            end.ranks = launched.ranks if launched else None
    except KeyboardInterrupt as e:  # Ctrl+C, SIGTERM (interrupt.Interrupted), the launcher's
        end.signame = getattr(e, "signame", None) or "SIGINT"
        end.ranks = e.raws if isinstance(e, Interrupted) else None
    except ScaleprobeError as e:  # the user's mistake, met while running: recorded, then raised
        write_failure(result, run_dir, cfg, e)
        raise
    except BaseException as e:  # noqa: BLE001  (recorded, never lost)
        end.error, end.tb = e, traceback.format_exc()
    run_cfg = work.conclude(result, end, run_dir) if isinstance(work, Concludes) else cfg
    if end.error is not None or end.signame:
        recover_steps(end, run_dir)  # ranks that died or hung keep the steps they timed
    _ending(result, work, end, run_dir)
    result.env = RunEnv.from_dict(envmod.collect_env())
    result.env.world_size, result.env.nnodes = cfg.world_size, cfg.dist.nnodes
    done = finalize(result, run_cfg, end.ranks, monitor, run_dir)
    if not end.logged:
        discard_step_logs(run_dir)  # every rank handed its record over
    return done


def _ending(result: RunResult, work: Workload, end: Ending, run_dir: Path) -> None:
    """The run's status and error line from how the launch ended."""
    signame = end.signame or (interrupted_from(end.ranks) if end.error is None else None)
    if signame:
        mark_partial(result, end.ranks, signame)
        if end.logged:
            mark_logged(result, end)
        return
    line = work.error_line(end) if isinstance(work, NamesItsErrors) else None
    if end.error is None and line is None:
        result.status = "ok"
        if end.logged:  # a rank ended well but wrote no record: its logged steps
            mark_logged(result, end)
        return
    e = end.error
    msg = (getattr(e, "message", None) or f"{type(e).__name__}: {e}") if e is not None else ""
    if line is None:  # the built-in loop's ranks raise scaleprobe's own errors
        _reraise_user_error(e, result, run_dir, work.cfg)
    limited = bool(work.cfg.measure.memory_limit)
    oom = e is not None and (is_oom(msg, limited) or is_oom(e, limited))
    result.status = "oom" if oom else "failed"
    line = line or failure_line(msg)
    rank = getattr(e, "rank", None)
    result.error = (f"rank {rank}: {line}" if isinstance(rank, int) and rank >= 0
                    else line)[:1000]
    if end.logged:
        mark_logged(result, end)
    if result.status == "failed":
        work.keep_traceback(run_dir, end)


def interrupted_from(ranks: list[RankRecord] | None) -> str | None:
    """The signal that stopped the ranks early ("peer": another rank's), or None. A signal
    that reached some ranks only (``kill`` of one rank's pid; the others stopped with it) is
    named with them: "SIGTERM to rank 1"."""
    asked = [(r.rank, r.interrupted) for r in ranks or [] if r.interrupted]
    own = [(rank, sig) for rank, sig in asked if sig != "peer"]
    if not own:
        return asked[0][1] if asked else None
    sig = own[0][1]
    if len(own) == len(ranks or []) or len(own) > 1:
        return sig
    return f"{sig} to rank {own[0][0]}"


def mark_partial(result: RunResult, ranks: list[RankRecord] | None, signame: str) -> None:
    """An interrupted run keeps what it measured: the figures of the steps timed so far,
    flagged as partial; what runs after training (calibration, evaluation) was skipped."""
    result.status, result.error = "interrupted", describe(None if signame == "peer" else signame)
    if not ranks:
        result.null_reasons["partial"] = "interrupted before any rank returned its record"
        return
    timed = next((r.steps_timed for r in ranks if r.step_times_s), 0)
    result.partial = True
    result.null_reasons["partial"] = (
        f"interrupted after {timed} timed steps: the figures cover those steps only; "
        "communication calibration and evaluation were skipped")


def check_output(cfg: RunConfig) -> None:
    """The output folder can be written and has room for a run's files (OutputError, exit 2,
    naming the folder, before any run folder or worker exists)."""
    res.check_writable(cfg.out, RUN_OUTPUT_BYTES, "a run's files")


def make_run_dir(run_dir: Path, cfg: RunConfig) -> Path:
    """The run's folder, with the configuration asked for in config.json."""
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
    with contextlib.suppress(OSError):
        folder.rmdir()


def write_failure(result: RunResult, run_dir: Path, cfg: RunConfig,
                  err: BaseException) -> None:
    """A user error (bad data, bad option) met during the run: its line in result.json and in
    results.jsonl, like any other ending."""
    result.status = "failed"
    result.error = one_line(err)[:1000]
    result.finished_at = res.utc_now()
    try:
        res.write_json_atomic(run_dir / "result.json", result.to_dict())
        res.append_jsonl(res.results_file(cfg.out), result.to_dict())
    except OutputError:  # the user's own error says more than a full disk would
        pass


def _reraise_user_error(e: BaseException | None, result: RunResult, run_dir: Path,
                        cfg: RunConfig) -> None:
    """A launched rank's ConfigError / DataError is the user's mistake: one line, exit 2. The
    rank says so in its error record (``measure.heartbeat.RankError``), which the launcher's
    ``WorkerFailure`` carries here."""
    own = e.error if isinstance(e, WorkerFailure) else None
    cls = USER_ERRORS.get(own.user_error or "") if own is not None else None
    if cls is not None and own is not None:
        err = cls(own.message or own.line)
        write_failure(result, run_dir, cfg, err)
        raise err from None


def save_traceback(run_dir: Path, text: str | None) -> None:
    if not text:
        return
    with contextlib.suppress(OSError):  # a full or read-only folder: the result write says so
        (run_dir / "traceback.txt").write_text(text)

