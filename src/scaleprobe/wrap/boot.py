"""Each rank's entry under ``scaleprobe wrap``: ``python -m scaleprobe.wrap.boot RUN_DIR -- SCRIPT
[ARGS]`` (or ``-- -m MODULE [ARGS]``), started by PyTorch's elastic launcher as torchrun starts
a script (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT set); where the launcher forks its
ranks (a CPU host), ``forked_rank`` is the same entry in a rank forked from it.

It installs the hooks (``hooks.py``) and a heartbeat, runs the script as ``__main__`` with its
own ``sys.argv`` and ``sys.path[0]``, and whatever happens writes this rank's record to
``RUN_DIR/wrap-ranks/rank-R.json`` (and the traceback of a script that raised to
``RUN_DIR/traceback-rank-R.txt``), then exits with the script's exit code.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import runpy
import signal
import socket
import sys
import traceback
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NoReturn

from scaleprobe.core.rank_record import (
    RankComm,
    RankCompile,
    RankFlops,
    RankInfo,
    RankMem,
    RankObserved,
    RankRecord,
)
from scaleprobe.core.run_metrics import Peak
from scaleprobe.launch import rank_start_method
from scaleprobe.launch.lines import last_meaningful_line, loader_worker_exits, name_signal
from scaleprobe.measure.comm.hook import CommTimer
from scaleprobe.measure.compiled import CompileWatch
from scaleprobe.measure.env import own_process_group, shutdown_distributed
from scaleprobe.measure.heartbeat import Heartbeat, RankError, write_error
from scaleprobe.measure.monitor import host_mem_baseline, host_mem_record
from scaleprobe.measure.observers import build_observers
from scaleprobe.wrap.handoff import RankOutcome, ScriptFacts, Settings
from scaleprobe.wrap.hooks import Recorder, StopScript


def traceback_path(run_dir: str | Path, rank: int) -> Path:
    return Path(run_dir) / f"traceback-rank-{rank}.txt"


def _phases(rec: Any, w: int, world: int, comm: RankComm | None,
            talks: bool | None) -> tuple[dict[str, list[float]], dict[str, str]]:
    """The timed steps' phases from what the hooks saw, and why a phase was not seen (its
    time stays in another phase, never a 0 for "not measured")."""
    timed = rec.step_times[w:]
    phases = {p: v[w:] for p, v in rec.phases.items()}
    unseen: dict[str, str] = {}
    if world < 2 or talks is False:  # one process, or no process group: nothing to send
        phases["comm"] = [0.0] * len(timed)
    elif comm is not None:
        phases["comm"] = [e or 0.0 for e in rec.comm_exposed[w:]]
    else:
        timer = rec.comm
        unseen["comm"] = (timer.reason if timer is not None and timer.reason else
                          "inside backward: no DistributedDataParallel all-reduce was seen "
                          "(a DDP model on the CPU gets wrap's comm hook)")
    if not rec.forward_seen:
        del phases["forward"]
        unseen["forward"] = ("no call of an nn.Module was seen in a step: the forward pass is "
                             "counted in backward")
        if rec.watch is not None and rec.watch.compiled:
            unseen["forward"] += (" (the script's modules run inside compiled code, a compiled "
                                  "function or module.compile(), where wrap's hooks do nothing)")
    if not rec.data_seen:
        del phases["data"]
        unseen["data"] = "no DataLoader batch was taken: data wait cannot be seen"
    return phases, unseen


def rank_record(rec: Any, rank: int, world: int,
                baseline: dict[str, int | None]) -> RankRecord:
    """This rank's ``RankRecord`` from what the hooks saw."""
    import torch  # heavy: torch: loaded after the script's host-memory baseline is taken

    # heavy: numpy: wrap's hooks stay light in the script's process
    from scaleprobe.measure.aggregate import per_median_step
    from scaleprobe.measure.stats import median

    w = min(rec.warmup, len(rec.step_times))
    timed = rec.step_times[w:]
    comm = _comm_record(rec, w, world)
    talks = communicates(rec)
    phases, unseen = _phases(rec, w, world, comm, talks)
    if comm is not None:  # on the breakdown's basis, so in flight >= exposed holds here too
        comm.in_flight_s = per_median_step(rec.comm_in_flight[w:], phases, timed)
    samples = rec.samples[w:]
    per_step = int(round(median(samples))) if samples else 0
    log = rec.train_loader()
    epochs = log.epochs if log else []
    idx = [e.indices() for e in epochs]
    indices = [i for i in idx if i] if idx and all(i is not None for i in idx) else []
    starts = ([(i, got) for i, got in enumerate(rec.step_epoch_starts)
               if i >= w and id(log) in got] if log else [])
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    t0 = rec.walls[w - 1] if w > 0 and len(rec.walls) >= w else rec.wall0
    f0 = rec.faults[w - 1] if w > 0 and len(rec.faults) >= w else rec.faults0
    io0 = rec.io[w - 1] if w > 0 and len(rec.io) >= w else rec.io0
    io1 = rec.io[-1] if timed and rec.io else None
    return RankRecord(
        rank=rank, host=socket.gethostname(),
        device=f"cuda:{torch.cuda.current_device()}" if cuda else "cpu",
        threads=torch.get_num_threads(),
        steps_done=len(rec.step_times), steps_timed=len(timed),
        step_times_s=timed, phase_times_s=phases, phases_unseen=unseen,
        window_s=sum(timed) if timed else None,
        clock_window=[t0, rec.walls[-1]] if timed else None,
        page_faults=rec.faults[-1] - f0 if timed and rec.faults and f0 is not None else None,
        gloo_io_cpu_s=io1 - io0 if io0 is not None and io1 is not None else None,
        epochs_complete=sum(1 for e in epochs if e.complete),
        epoch_start_steps=[i - w for i, got in starts],
        epoch_start_wait_s=[got[id(log)] for _, got in starts],
        samples_per_step=per_step, indices=indices,
        mem=RankMem.from_dict({
            **host_mem_record(baseline),
            "device_allocated": torch.cuda.max_memory_allocated() if cuda else None,
            "device_reserved": torch.cuda.max_memory_reserved() if cuda else None}),
        flops=_flops_record(rec),
        compile=_compile_record(rec, w),
        comm=comm,
        communicates=talks,
        info=RankInfo(train_samples=(log.dataset_len or 0) if log else 0,
                      tokens_per_sample=rec.tokens_per_sample,  # token-id batches: tokens/s
                      param_count=max(rec.top_params.values()) if rec.top_params else None,
                      per_process_batch=per_step or None,
                      dataset_source=(f"the script's DataLoader ({log.sampler})" if log
                                      else "no DataLoader seen")))


def communicates(rec: Any) -> bool | None:
    """False when the script built no process group and no DDP model (its ranks never
    communicated); None when that could not be seen (the hooks could not be installed)."""
    timer = rec.comm
    if timer is None:
        return None
    return bool(timer.built or timer.attached or timer.reason or timer.group)


def _comm_record(rec: Any, warmup: int, world: int) -> RankComm | None:
    """What DDP's comm hook saw over the timed steps (wrap/ddp_comm.py); None when it saw no
    all-reduce in them (one process, no DDP, or a DDP model it could not time).
    ``in_flight_s`` is filled in once the phases are final."""
    from scaleprobe.measure.comm.hook import EXPOSED_METHOD, IN_FLIGHT_METHOD  # heavy: numpy

    exposed = rec.comm_exposed[warmup:]
    if world < 2 or not exposed or any(e is None for e in exposed):
        return None
    return RankComm(method=EXPOSED_METHOD, in_flight_method=IN_FLIGHT_METHOD,
                    models_timed=rec.comm.attached,
                    transfer_reason=("not measured under wrap: the network's share needs a "
                                     "standalone collective on the script's process group"))


def _flops_record(rec: Any) -> RankFlops:
    """The count of the last warm-up step (hooks.py) and, when there is one, the peak of the
    device it ran on (measure/flops.py: the data sheet's, or measured once per machine and
    cached), resolved after the script: a peak that cannot be had never fails the record."""
    import torch  # heavy: torch: loaded after the script's host-memory baseline is taken

    out = RankFlops(flops_per_step=rec.flops, method=rec.flops_method, reason=rec.flops_reason)
    if not rec.flops:
        out.peak_reason = "not resolved: no FLOPs were counted"
        return out
    if rec.flops_device is None:
        out.peak_reason = "no peak: the counted step's model has no parameters"
        return out
    from scaleprobe.measure.flops import resolve_peak  # heavy: torch

    try:
        out.peak = Peak.from_dict(resolve_peak(torch.device(rec.flops_device), rec.flops_amp))
    except Exception as e:  # noqa: BLE001
        out.peak_reason = f"no peak: {type(e).__name__}: {e}"
    return out


def _compile_record(rec: Any, warmup: int) -> RankCompile | None:
    """The script's compilations (measure/compiled.py), placed against its timed window: from
    the end of the last warm-up step to the end of the last step, on the hooks' clock."""
    if rec.watch is None:
        return None
    ends = rec.ends
    t0 = ends[warmup - 1] if 0 < warmup <= len(ends) else (rec.t_first if warmup == 0 else None)
    window = (t0, ends[-1]) if t0 is not None and len(ends) > warmup else None
    return rec.watch.record(window, ends, warmup)


def _compile_watch() -> Any:
    """The compile-event watch, installed before the script's first line. torch.compile
    warns, at every call of a compiled module while global module hooks exist, that they fire
    once more for the compiled wrapper: they are wrap's, which counts that call once (it nests
    in the wrapper's), so the warning is not the script's and is silenced."""
    warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)` when there "
                            r"are global hooks on modules")
    return CompileWatch().install()


def _comm_timer(passed: Any) -> Any:
    """DDP's comm hook timer (wrap/ddp_comm.py), installed before the script builds its model
    (``passed``: the heartbeat's setup places it sees the script pass); None where torch has
    no distributed package."""
    try:
        from scaleprobe.wrap import ddp_comm as comm  # heavy: numpy

        timer = CommTimer()
        comm.install(timer, passed)
        return timer
    except Exception:  # noqa: BLE001  (communication then stays null with its reason)
        return None




def _run_target(target: list[str]) -> None:
    if target[0] == "-m":
        sys.argv = [target[1], *target[2:]]
        runpy.run_module(target[1], run_name="__main__", alter_sys=True)
    else:
        script = os.path.abspath(target[0])
        sys.argv = [target[0], *target[1:]]
        sys.path[0] = os.path.dirname(script)  # as `python SCRIPT` sets it
        runpy.run_path(script, run_name="__main__")


def _exit_code(e: SystemExit) -> int:
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)  # sys.exit("message"), as Python prints it
    return 1


def _script_traceback() -> str:
    """The traceback as ``python SCRIPT`` prints it: from the script's frames on, without
    this module's and runpy's."""
    exc = sys.exc_info()[1]
    tb = exc.__traceback__ if exc is not None else None
    while tb is not None and (tb.tb_frame.f_code.co_filename in (__file__, "<frozen runpy>")
                              or tb.tb_frame.f_code.co_filename.endswith("runpy.py")):
        tb = tb.tb_next
    if exc is None or tb is None:
        return traceback.format_exc()
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _observers(settings: Settings, run_dir: str, rank: int) -> list[Any]:
    """--summary-every (rank 0) and --profile-every (every rank), as in `run`."""
    if not (settings.summary_every or settings.profile_every):
        return []

    import torch  # heavy: torch: loaded after the script's host-memory baseline is taken

    measure = SimpleNamespace(summary_every=settings.summary_every,
                              profile_every=settings.profile_every)
    return build_observers(measure, run_dir, rank, 0, torch.cuda.is_available(),
                           summaries=rank == 0)


def _close(observers: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for ob in observers:
        try:
            out.update(ob.close())
        except Exception as e:  # noqa: BLE001  (a figure, never the script's failure)
            print(f"scaleprobe: {type(ob).__name__}: {type(e).__name__}: {e}", file=sys.stderr)
    return out


OWN_RANKS = ("the script starts processes of its own with torch.multiprocessing.{fn}(), which "
             "cannot run under wrap: wrap starts the ranks itself, as torchrun does; have the "
             "script run one rank (RANK, WORLD_SIZE, MASTER_ADDR/PORT are set, "
             "init_process_group() reads them) and give wrap --nproc N")


class ScriptRefused(BaseException):  # noqa: N818  (the user's mistake, named in one line)
    """Raised where the script does what wrap cannot measure; a BaseException, so the
    script's own ``except Exception`` does not swallow it."""


def _refuse_own_ranks() -> None:
    """``torch.multiprocessing.spawn`` / ``start_processes`` refused with one line. Under wrap
    the children inherited the launcher's environment (TORCHELASTIC_USE_AGENT_STORE: wait
    for the launcher's store at MASTER_ADDR/PORT) and waited forever in
    ``init_process_group`` on a store no one served for their world."""
    import torch.multiprocessing as tmp  # heavy: torch: imported by main already

    module = sys.modules.get("torch.multiprocessing.spawn")
    for name in ("spawn", "start_processes"):
        def refuse(*_args: Any, _fn: str = name, **_kwargs: Any) -> Any:
            raise ScriptRefused(OWN_RANKS.format(fn=_fn))

        setattr(tmp, name, refuse)
        if module is not None:  # the package's spawn() calls the module's start_processes
            setattr(module, name, refuse)


def _sigterm(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _run_script(target: list[str], settings: Settings, run_dir: str,
                rank: int) -> tuple[int, ScriptFacts]:
    """Run the user's script as __main__; returns (its exit code as scaleprobe reports it,
    the facts of how it ended: stopped after N steps, its own error or exit code, the
    signal it was interrupted by)."""
    code: int = 0
    facts = ScriptFacts()
    try:
        _run_target(target)
    except StopScript:
        facts.stopped_after = settings.stop_after

        shutdown_distributed()  # every rank stops at the same step
    except SystemExit as e:
        code = _exit_code(e)
        if code:
            facts.error = f"the script exited with code {code}"
    except KeyboardInterrupt as e:
        code, facts.interrupted = 130, str(e) or "SIGINT"
    except ScriptRefused as e:
        code, facts.refused = 2, str(e)
        write_error(run_dir, rank, RankError(str(e)))
    except BaseException:
        code = 1
        text = _script_traceback()
        sys.stderr.write(text)  # as Python would have printed it
        try:
            traceback_path(run_dir, rank).write_text(text)
        except OSError:
            pass

        facts.error = name_signal(last_meaningful_line(text),
                                  loader_worker_exits(sys.exc_info()[1]))
        write_error(run_dir, rank, RankError(facts.error))
    return code, facts


def main(argv: list[str]) -> int:
    # absolute before the script runs: a script may os.chdir, and the rank's files belong in
    # the run folder under --out, wherever the script goes
    run_dir, target = os.path.abspath(argv[0]), argv[2:] if argv[1:2] == ["--"] else argv[1:]
    settings = Settings.read(run_dir)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    own_process_group()
    signal.signal(signal.SIGTERM, _sigterm)
    # heavy: torch: here, so the baseline below is the memory held before the script's work
    import torch  # noqa: F401

    # heavy: torch: torch._dynamo is imported by the script's first optimizer: see parts.setup
    import torch._dynamo  # noqa: F401

    baseline = host_mem_baseline()
    beat = Heartbeat(run_dir, rank).start()
    observers = _observers(settings, run_dir, rank)
    rec = Recorder(settings.warmup_steps, settings.stop_after, beat, settings.gloo_io).install(
        loss=bool(observers))
    rec.observers = observers
    rec.comm = _comm_timer(beat.setup_passed)
    rec.watch = _compile_watch()
    beat.busy = lambda: rec.watch.compiling  # a long torch.compile is progress, not a stall
    _refuse_own_ranks()
    from scaleprobe.wrap.steps import RecorderSteps  # heavy: torch

    beat.keep_steps(RecorderSteps(rec, rank, world, baseline))  # kept if this rank dies
    beat.set_state("training")  # the launcher's stall check follows its progress from here
    ending = Ending(rec, beat, run_dir, rank, world, baseline)
    with ending.on_hard_exit():
        code, facts = _run_script(target, settings, run_dir, rank)
    return ending.finish(code, facts)


class Ending:
    """What a rank does when its script has ended, however it ended: the rank's record
    written, the heartbeat finished. ``on_hard_exit``: also when the script ends its process
    with ``os._exit`` (no exception, no finally), which left no record and lost the steps."""

    def __init__(self, rec: Any, beat: Heartbeat, run_dir: str, rank: int, world: int,
                 baseline: dict[str, int | None]) -> None:
        self.rec, self.beat, self.run_dir = rec, beat, run_dir
        self.rank, self.world, self.baseline = rank, world, baseline

    @contextlib.contextmanager
    def on_hard_exit(self) -> Any:
        real, pid = os._exit, os.getpid()

        def hard_exit(status: int) -> NoReturn:
            if os.getpid() == pid:  # not in a forked child (a loader worker exits this way)
                os._exit = real
                with contextlib.suppress(BaseException):
                    facts = ScriptFacts(error=f"the script exited with code {status} (os._exit)") \
                        if status else ScriptFacts(exited="os._exit(0)")
                    self.finish(int(status), facts)
            if status == 0 and _launcher_queue is not None:  # forked: done, not lost
                with contextlib.suppress(BaseException):
                    _launcher_queue.put(None)
            real(status)

        os._exit = hard_exit
        try:
            yield
        finally:
            os._exit = real

    def finish(self, code: int, facts: ScriptFacts) -> int:
        rec, run_dir, rank = self.rec, self.run_dir, self.rank
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        self.beat.set_state("after")  # the script ended: no step to stall in
        rec.flops_end(complete=False)  # the script ended inside the counted step
        rec.count_captured()  # with torch.compile: the FLOPs, after the script, on fake tensors
        if rec.opt_compiled and not rec.step_times:
            rec.flops_reason = ("not counted: no step was seen: the script's optimizer step is "
                                "compiled, and wrap's step hooks do nothing inside compiled "
                                "code")
        log = rec.train_loader()
        facts.loader = log.facts() if log else None
        facts.indices_seen = bool(log and log.epochs and all(e.indices() is not None
                                                             for e in log.epochs))
        facts.exit_code, facts.optimizer_steps = code, len(rec.step_times)
        observed = _close(rec.observers)
        try:
            record = rank_record(rec, rank, self.world, self.baseline)
            record.observed = RankObserved.from_dict(observed)
            record.stop_reason = ("steps" if facts.stopped_after is not None else
                                  "interrupted" if code == 130 else
                                  "script" if code == 0 else "failed")
            RankOutcome(record, facts).write(run_dir, rank)
        finally:
            self.beat.finish("done" if code in (0, 130) else "failed")
            sys.stdout.flush()
            sys.stderr.flush()
        return code


# torch's launcher (``_wrap`` in torch.distributed.elastic.multiprocessing.api) waits for a
# forked rank's return value on this queue: a rank that ends in os._exit(0) puts it first,
# or the launcher waits for it forever. None where the rank is a process of its own.
_launcher_queue: Any = None
_QUEUE_FRAME, _QUEUE_NAME = "_wrap", "ret_val_"


def forks_scripts() -> bool:
    """Whether ``wrap``'s ranks are forked from this process (``forked_rank``): where the
    launcher forks ranks, and its queue for their return values is where this module
    looks for it."""
    from torch.distributed.elastic.multiprocessing import api  # heavy: torch

    frame = getattr(api, _QUEUE_FRAME, None)
    return rank_start_method() == "fork" and _QUEUE_NAME in getattr(
        getattr(frame, "__code__", None), "co_varnames", ())


def forked_rank(run_dir: str, *target: str) -> None:
    """A rank forked from ``wrap``'s launcher (a CPU host: launch/__init__.py says when),
    which has imported torch already: ``main`` as ``python -m scaleprobe.wrap.boot`` runs
    it, from what that interpreter would start with. torch read OMP_NUM_THREADS when the
    launcher imported it, so the rank's share is set here; the working directory is first on
    ``sys.path`` as ``python -m`` puts it (a script's own folder replaces it); the launcher's
    exit handlers are not the script's, and a forked process ends without running any, so
    the script's own (``atexit``) run here after it, as at an interpreter's exit. Random
    states start as a fresh interpreter's, from the OS's entropy: a fork copies the
    launcher's numpy and torch states, the same in every rank (Python's own reseeds)."""
    import torch  # heavy: torch: imported by the launcher this rank was forked from

    global _launcher_queue
    frame: Any = sys._getframe(1)
    while frame is not None and frame.f_code.co_name != _QUEUE_FRAME:
        frame = frame.f_back
    _launcher_queue = frame.f_locals.get(_QUEUE_NAME) if frame is not None else None
    atexit._clear()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    torch.seed()
    sys.path[0] = os.getcwd()
    threads = os.environ.get("OMP_NUM_THREADS", "").strip()
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))
    code = main([run_dir, "--", *target])
    atexit._run_exitfuncs()
    if code:
        sys.exit(code)  # the rank's exit status, as the script's interpreter would end


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
