import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


# the temporary files of every process the suite starts (ranks, launchers, torch's error files,
# multiprocessing's folders): one folder, removed when the session ends, so that runs of the
# suite leave nothing behind in the system's; pytest's own tmp_path stays where it was
_SUITE_TMP: list[str] = []


def _user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no user name for this uid: the name torch falls back to
        return f"uid_{os.getuid()}"


def pytest_configure(config):
    os.environ.setdefault("SCALEPROBE_TEST", "1")
    # An environment that asks Python not to write bytecode (PYTHONDONTWRITEBYTECODE, set in
    # many container images) had each of the hundreds of interpreters the suite starts (ranks,
    # command lines, jobs) compile scaleprobe's sources again: the first one now writes them
    # (__pycache__, ignored by git) and the others read them
    if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
        sys.dont_write_bytecode = False
    import tempfile

    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())
    # torch.compile's cache stays warm across sessions where it was
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR",
                          os.path.join(tempfile.gettempdir(), f"torchinductor_{_user()}"))
    _SUITE_TMP.append(tempfile.mkdtemp(prefix="scaleprobe-suite-"))
    os.environ["TMPDIR"] = _SUITE_TMP[0]
    tempfile.tempdir = None
    # A suite started in the background of a non-interactive shell (`make test &`, a CI step,
    # scripts/suite-under-load.sh) starts with SIGINT ignored, and every process it starts
    # inherits that: the tests that press Ctrl+C on a sweep or a wrapped script would wait for
    # a stop that never comes. Give the suite (and so its children) Python's default.
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# every test this session collected, before -m, -k or --deselect left any out
# (tests/architecture/test_markers.py reads their markers instead of collecting the suite again)
COLLECTED: list = []


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    COLLECTED[:] = list(items)


class Reached(Exception):
    """Raised by the stubs of ``stop_before_work`` where the work would start: the input was
    accepted."""


@pytest.fixture
def stop_before_work(monkeypatch):
    """The commands run for real up to the call that would train (or write a report), which
    raises ``Reached`` (a ScaleprobeError with exit code 0, so ``cli.main`` returns 0)."""
    from scaleprobe.core.errors import ScaleprobeError
    from scaleprobe.experiments.spec import check_points, load_spec

    class Stop(Reached, ScaleprobeError):
        exit_code = 0

    def stop(*_a, **_k):
        raise Stop("reached")

    def sweep(spec, out=None, over=None, **k):
        check_points(load_spec(spec, over, k.get("repeats")), out)
        stop()

    def scale(spec, out=None, views=None, **k):
        check_points(load_spec(spec, None, k.get("repeats")), out)
        stop()

    monkeypatch.setattr("scaleprobe.run.workloads.run_config", stop)
    monkeypatch.setattr("scaleprobe.experiments.parity.run_parity", stop)
    monkeypatch.setattr("scaleprobe.experiments.sweep.run_sweep", sweep)
    monkeypatch.setattr("scaleprobe.experiments.sweep.preflight", lambda cfgs: None)
    monkeypatch.setattr("scaleprobe.experiments.scale.run_scale", scale)
    monkeypatch.setattr("scaleprobe.report.render.build_report.build_report", stop)
    monkeypatch.setattr("scaleprobe.commands.sweep.terminate_as_interrupt", lambda: None)
    monkeypatch.setattr("scaleprobe.experiments.colocate.run_colocate", stop)


@pytest.fixture
def out_dir(tmp_path):
    return tmp_path / "out"


def run_cli(*argv, timeout=240, env=None, cwd=None, netns=None, cpus=None):
    """Run `python -m scaleprobe ...` in a process of its own; returns CompletedProcess. The
    process is forked from a server that imported torch and scaleprobe once
    (tests/cliserver.py), or is a fresh interpreter with SCALEPROBE_TEST_CLI=exec. ``netns``:
    inside that network namespace (as `ip netns exec`); ``cpus``: pinned to those cores (as
    `taskset -c`)."""
    from tests import cliserver

    e = dict(os.environ)
    e.update(env or {})
    srv = cliserver.server()
    if srv is not None:
        return srv.run([str(a) for a in argv], e, None if cwd is None else str(cwd), timeout,
                       netns=netns, cpus=None if cpus is None else list(cpus))
    wrap = ["ip", "netns", "exec", netns] if netns else []
    wrap += ["taskset", "-c", ",".join(map(str, cpus))] if cpus else []
    return subprocess.run([*wrap, sys.executable, "-m", "scaleprobe", *map(str, argv)],
                          capture_output=True, text=True, timeout=timeout, env=e, cwd=cwd)


def wait_for(cond, timeout_s, every_s=0.1):
    """Whether ``cond()`` came true within ``timeout_s``, asked every ``every_s``."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(every_s)
    return False


def run_forked(func, *args, timeout=240):
    """``func(*args)`` (a module-level function of a test module; string arguments) in a
    process forked from the CLI server, waited for: processes it starts fork from one that
    imported torch and ran no tensor operation. Returns CompletedProcess (exit code: an int
    returned, else 0; a traceback on stderr and 1 when it raised). A fresh interpreter
    with SCALEPROBE_TEST_CLI=exec."""
    from tests import cliserver

    target = f"{func.__module__}:{func.__name__}"
    srv = cliserver.server()
    if srv is not None:
        return srv.run([str(a) for a in args], dict(os.environ), None, timeout, call=target)
    code = (f"import sys; from {func.__module__} import {func.__name__} as f; "
            f"r = f(*sys.argv[1:]); sys.exit(r if isinstance(r, int) else 0)")
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def _toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v))  # a TOML basic string


def run_config_cli(cfg, timeout=300):
    """``run_config(cfg)`` as ``scaleprobe run CONFIG.toml``, forked from the CLI server
    (``run_cli``): a run of several ranks forks them from there, where pytest's own process
    (it ran tensor operations) would start each rank as a fresh interpreter importing torch.
    Returns the run's record as written (the last run record of its results.jsonl)."""
    from scaleprobe.core.results import read_jsonl, results_file

    lines = []
    for section, values in cfg.to_dict().items():
        if isinstance(values, dict):
            lines.append(f"[{section}]")
            lines += [f"{k} = {_toml_value(v)}" for k, v in values.items() if v is not None]
        elif values is not None:
            lines.insert(0, f"{section} = {_toml_value(values)}")
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    f = out / "run-config.toml"
    f.write_text("\n".join(lines) + "\n")
    p = run_cli("run", f, timeout=timeout)
    runs = [r for r in read_jsonl(results_file(out)) if r.get("kind") == "run"] \
        if results_file(out).exists() else []
    assert runs, f"exit {p.returncode}, no record: {p.stderr[-3000:]}"
    return runs[-1]


def start_cli(folder, *argv, env=None):
    """``python -m scaleprobe ARGV`` started, not waited for (a test that signals the command
    itself): forked from the CLI server as ``run_cli``'s calls are, or a fresh interpreter
    with SCALEPROBE_TEST_CLI=exec, leading its own process group either way. Returns (the
    handle: ``pid``, ``poll``, ``wait``, ``send_signal``, ``kill``; the file its stdout goes
    to, its stderr's), both files in ``folder``."""
    from tests import cliserver

    e = {**os.environ, **(env or {})}
    out_f, err_f = Path(folder) / "cli.out", Path(folder) / "cli.err"
    args = [str(a) for a in argv]
    srv = cliserver.server()
    if srv is not None:
        return srv.start(args, e, str(out_f), str(err_f)), out_f, err_f
    with out_f.open("w") as out, err_f.open("w") as err:
        return (subprocess.Popen([sys.executable, "-m", "scaleprobe", *args], stdout=out,
                                 stderr=err, env=e, start_new_session=True), out_f, err_f)


# torch's gloo, at a process's exit after the script has ended, now and then aborts a rank
# (std::terminate from a thread torn down with the interpreter): 2 of 40 bare runs of
# examples/scripts/train_ddp.py under torchrun on this machine, each after its last line.
TEARDOWN_ABORT = "terminate called without an active exception"


def run_torchrun(*argv, attempts=3, timeout=240, env=None):
    """``python -m torch.distributed.run ARGV``, the launcher a user's bare run goes through,
    as a reference for a test to compare with. A run whose rank aborted at exit with torch's
    teardown fault (``TEARDOWN_ABORT``) is run again, up to ``attempts`` in all: it says
    nothing about the training the test compares; any other failure is returned as it is."""
    e = {**os.environ, **(env or {})}
    for _ in range(attempts):
        p = subprocess.run([sys.executable, "-m", "torch.distributed.run", *map(str, argv)],
                           capture_output=True, text=True, timeout=timeout, env=e)
        if p.returncode == 0 or TEARDOWN_ABORT not in p.stderr:
            return p
    return p


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture(scope="session")
def quickstart_sweep(tmp_path_factory):
    """One `scaleprobe sweep examples/sweep_quickstart.toml --repeats 2` for the session
    (the sweep tests and the report's browser test read it; none writes to it): (the spec's
    copy, the output folder, the process)."""
    import shutil

    d = tmp_path_factory.mktemp("quickstart")
    spec = d / "quick.toml"
    shutil.copy(ROOT / "examples" / "sweep_quickstart.toml", spec)
    out = d / "out"
    return spec, out, run_cli("sweep", spec, "--out", out, "--repeats", 2, timeout=500)


# Processes a test module left running after its last test: named in the summary, so a test
# that leaks a child (a rank, a loader worker, a sweep point) is found by module. Warned, not
# failed: a leak here says which test to fix; the fault tests assert "nothing left" themselves.
_LEFT: list[str] = []


@pytest.fixture(scope="module", autouse=True)
def _no_process_left(request):
    import psutil

    me = psutil.Process()
    before = set(_children(me))
    yield
    # multiprocessing's resource tracker is one per process and ends with pytest itself
    from tests import cliserver

    mine = cliserver.own_pids()
    new = [c for key, c in _children(me).items() if key not in before
           and c.pid not in mine and "resource_tracker" not in " ".join(_cmdline(c))]
    _, alive = psutil.wait_procs(new, timeout=5)
    for c in alive:
        try:
            _LEFT.append(f"{request.module.__name__}: pid {c.pid} {' '.join(c.cmdline())[:150]}")
            c.kill()
        except psutil.Error:
            pass


def _cmdline(proc):
    import psutil

    try:
        return proc.cmdline()
    except psutil.Error:
        return []


def _children(proc):
    """{(pid, start time): process} of the running (not zombie) descendants."""
    import psutil

    out = {}
    try:
        kids = proc.children(recursive=True)
    except psutil.Error:
        return out
    for c in kids:
        try:
            if c.status() != psutil.STATUS_ZOMBIE:
                out[(c.pid, c.create_time())] = c
        except psutil.Error:
            pass
    return out


def pytest_sessionfinish(session):
    import shutil

    from tests import cliserver

    cliserver.close()
    # after multiprocessing has removed this process's own folder in it (its finaliser, at
    # exit priority -100): removed before, that finaliser prints a traceback at exit
    from multiprocessing import util

    for d in _SUITE_TMP:
        util.Finalize(None, shutil.rmtree, args=(d,), kwargs={"ignore_errors": True},
                      exitpriority=-200)


def pytest_terminal_summary(terminalreporter):
    if _LEFT:
        terminalreporter.section("processes left running by a test module (killed)")
        for line in _LEFT:
            terminalreporter.write_line(line)


@pytest.fixture
def one_rank_group():
    """A one-rank gloo process group in this process for the test (skipped when one is up)."""
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group is already up in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
