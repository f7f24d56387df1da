"""`python -m scaleprobe ARGV` for the tests, forked from a server that imported torch and
scaleprobe once.

A fresh interpreter spends 3-5 s of a 2-core CPU importing torch, its compiler front end and
scaleprobe before it parses a flag; the suite starts well over a hundred of them. The server
(started at the first call, one per test session) imports them once and forks one process per
call, which then runs exactly what `python -m scaleprobe ARGV` runs: the call's environment,
working folder, default signal handlers, stdout and stderr in files, and the same exit code
(a negative signal number when a signal ended it, as `subprocess` reports it). The server
itself never runs a tensor operation, so no thread pool is carried into a forked child.

A test may also call a function of its own there (``call``: ``"module:function"`` and its
string arguments), one that starts processes of its own: forked from the server, they do not
import torch again, where pytest's own process (it ran tensor operations) could only start
fresh interpreters.

Each call forks twice: a waiter, then the command under it. The waiter sends the command's
pid, waits for it and sends how it ended, so the server never waits and never holds a thread.

``SCALEPROBE_TEST_CLI=exec`` runs every call as a fresh interpreter instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# what a command needs before it trains: the CLI and its commands, the run driver, the engine,
# torch's compiler front end (the first optimizer step imports it) and the launcher
PRELOAD = ["scaleprobe.cli", "scaleprobe.run.workloads", "scaleprobe.run.assemble",
           "scaleprobe.train.engine", "scaleprobe.experiments.point", "scaleprobe.launch",
           "scaleprobe.measure.monitor", "torch._dynamo", "torch.distributed.launcher.api",
           "torchvision.models", "matplotlib"]


def _send(conn: socket.socket, obj: object) -> None:
    data = json.dumps(obj).encode()
    conn.sendall(struct.pack("!I", len(data)) + data)


def _recv(conn: socket.socket) -> object | None:
    head = _read(conn, 4)
    if head is None:
        return None
    body = _read(conn, struct.unpack("!I", head)[0])
    return None if body is None else json.loads(body)


def _read(conn: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


# --- the server side ---------------------------------------------------------------------

def _run_command(req: dict) -> None:
    """In the forked command: become `python -m scaleprobe ARGV` and exit as it would."""
    code = 1
    try:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT
                          else signal.SIG_IGN if sig == signal.SIGPIPE else signal.SIG_DFL)
        if req.get("cpus"):  # pinned, as `taskset` pins a fresh interpreter
            os.sched_setaffinity(0, req["cpus"])
        if req.get("netns"):  # inside a namespace, as `ip netns exec` starts one
            from scaleprobe.netlab.ranknet import enter

            enter(req["netns"])
        os.environ.clear()
        os.environ.update(req["env"])
        tempfile.tempdir = None  # read from the call's TMPDIR, as a fresh interpreter does
        os.chdir(req["cwd"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, req["stdout"]), (2, req["stderr"])):
            f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(f, fd)
            os.close(f)
        if req.get("call"):  # a test's own function: "module:function", its arguments
            import importlib

            sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.*
            module, _, name = req["call"].partition(":")
            got = getattr(importlib.import_module(module), name)(*req["argv"])
            code = got if isinstance(got, int) else 0
        else:
            sys.argv = [str(Path(sys.executable)), *req["argv"]]
            from scaleprobe.cli import entry

            code = entry(req["argv"])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
    except BaseException:  # noqa: BLE001 - as the interpreter would: a traceback, exit 1
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:  # what an interpreter does at exit: wait for its threads, run atexit, flush
            threading._shutdown()  # type: ignore[attr-defined]
            import atexit

            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            code = code if isinstance(code, int) else 1
            with contextlib.suppress(OSError):  # read only if the waiter is lost
                with open(req["status"], "w") as fh:
                    fh.write(str(code))
            os._exit(code)


def _serve_one(conn: socket.socket) -> None:
    """In the waiter: fork the command, report its pid, wait, report how it ended."""
    req = _recv(conn)
    if not isinstance(req, dict):
        os._exit(0)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    pid = os.fork()
    if pid == 0:
        conn.close()
        os.setpgid(0, 0)  # its own group: the caller can end it and all it started
        _run_command(req)
    try:
        _send(conn, {"pid": pid})
        _, status = os.waitpid(pid, 0)
        _send(conn, {"returncode": os.waitstatus_to_exitcode(status)})
    finally:
        os._exit(0)


def serve(path: str) -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    # every command's module and what its flags import: the first parser costs 0.2 s, each
    # one after it 0.03 s (every call builds its own)
    importlib.import_module("scaleprobe.cli").build_parser()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # waiters are reaped by the kernel
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C on the suite ends pytest, not us
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(16)
    print("ready", flush=True)
    while True:
        conn, _ = srv.accept()
        if os.fork() == 0:
            srv.close()
            _serve_one(conn)
        conn.close()


# --- the test side -----------------------------------------------------------------------

class Server:
    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="sp-test-cli-")
        self.path = os.path.join(self.dir, "sock")
        self.proc = subprocess.Popen([sys.executable, "-c",
                                      f"import tests.cliserver as s; s.serve({self.path!r})"],
                                     stdout=subprocess.PIPE, text=True,
                                     cwd=Path(__file__).resolve().parents[1])
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if line.strip() != "ready":
            raise RuntimeError(f"the test CLI server did not start: {line!r}")

    def run(self, argv: list[str], env: dict[str, str], cwd: str | None, timeout: float,
            netns: str | None = None, cpus: list[int] | None = None, call: str | None = None
            ) -> subprocess.CompletedProcess:
        out = tempfile.NamedTemporaryFile(dir=self.dir, delete=False)
        err = tempfile.NamedTemporaryFile(dir=self.dir, delete=False)
        out.close()
        err.close()
        status = out.name + ".rc"
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self.path)
            _send(conn, {"argv": argv, "env": env, "cwd": str(cwd or os.getcwd()),
                         "stdout": out.name, "stderr": err.name, "status": status,
                         "netns": netns, "cpus": cpus, "call": call})
            pid = (_recv(conn) or {})["pid"]
            conn.settimeout(timeout)
            try:
                ended = _recv(conn)
            except TimeoutError:
                _kill_group(pid)
                raise subprocess.TimeoutExpired([sys.executable, "-m", "scaleprobe", *argv],
                                                timeout, _text(out.name), _text(err.name)
                                                ) from None
            if not isinstance(ended, dict):  # the waiter is gone: the command's own status
                ended = {"returncode": _status_of(pid, status, timeout)}
            return subprocess.CompletedProcess([sys.executable, "-m", "scaleprobe", *argv],
                                               ended["returncode"], _text(out.name),
                                               _text(err.name))
        finally:
            conn.close()
            for f in (out.name, err.name, status):
                with contextlib.suppress(OSError):
                    os.unlink(f)

    def start(self, argv: list[str], env: dict[str, str], stdout: str, stderr: str
              ) -> Forked:
        """The command started, not waited for: a ``Forked`` (what the tests use of
        ``subprocess.Popen``), its output in the files ``stdout`` and ``stderr``."""
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(self.path)
        status = stdout + ".rc"
        _send(conn, {"argv": argv, "env": env, "cwd": os.getcwd(), "stdout": stdout,
                     "stderr": stderr, "status": status, "netns": None, "cpus": None})
        got = _recv(conn)
        if not isinstance(got, dict):
            conn.close()
            raise RuntimeError("the test CLI server did not start the command")
        return Forked(conn, got["pid"], status, argv)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
            os.rmdir(self.dir)


class Forked:
    """A command the server forked, as much of ``subprocess.Popen`` as the tests use: its
    pid (leading its own process group), ``poll``, ``wait``, signals."""

    def __init__(self, conn: socket.socket, pid: int, status: str, argv: list[str]) -> None:
        self.conn, self.pid, self.status, self.args = conn, pid, status, argv
        self.returncode: int | None = None

    def _ended(self, timeout: float | None) -> int | None:
        if self.returncode is None:
            ready, _, _ = select.select([self.conn], [], [], timeout)
            if ready:
                ended = _recv(self.conn)
                self.returncode = (ended["returncode"] if isinstance(ended, dict)
                                   else _status_of(self.pid, self.status, 10))
                self.conn.close()
        return self.returncode

    def poll(self) -> int | None:
        return self._ended(0)

    def wait(self, timeout: float | None = None) -> int:
        rc = self._ended(timeout)
        if rc is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return rc

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


def _status_of(pid: int, status: str, timeout: float) -> int:
    """The exit code a command wrote as it ended, waited for; when its waiter was lost."""
    import psutil

    with contextlib.suppress(psutil.Error):
        psutil.Process(pid).wait(timeout=timeout)
    try:
        with open(status) as fh:
            return int(fh.read())
    except (OSError, ValueError):
        raise RuntimeError(f"the test CLI server lost command pid {pid}: its waiter ended and "
                           "the command wrote no exit code (killed by a signal?)") from None


def _text(path: str) -> str:
    with open(path, errors="replace") as fh:
        return fh.read()


def _kill_group(pid: int) -> None:
    import psutil

    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        procs = []
    for p in procs:
        with contextlib.suppress(OSError):
            p.kill()
    psutil.wait_procs(procs, timeout=5)


_SERVER: Server | None = None
_STARTING = threading.Lock()  # calls from several threads at once start one server


def server() -> Server | None:
    """The session's server, started at the first call; None where calls are fresh
    interpreters (``SCALEPROBE_TEST_CLI=exec``)."""
    global _SERVER
    if os.environ.get("SCALEPROBE_TEST_CLI", "fork") == "exec":
        return None
    with _STARTING:
        if _SERVER is not None and _SERVER.proc.poll() is not None:  # a test killed it
            _SERVER.close()
            _SERVER = None
        if _SERVER is None:
            _SERVER = Server()
        return _SERVER


def own_pids() -> set[int]:
    """The server and its waiters (a waiter ends right after it reports its command's end)."""
    import psutil

    if _SERVER is None:
        return set()
    try:
        return {_SERVER.proc.pid, *(c.pid for c in psutil.Process(_SERVER.proc.pid).children())}
    except psutil.Error:
        return {_SERVER.proc.pid}


def running_descendants():
    """The test process's running descendants (psutil processes), the server and its waiters
    left out: a command it forked, and whatever that started, still counts. multiprocessing's
    resource tracker is left out too: one per process, started by a test that ran a sweep in
    pytest's own process, it ends with pytest (as ``conftest._no_process_left`` counts it)."""
    import psutil

    out = []
    try:
        kids = psutil.Process().children(recursive=True)
    except psutil.Error:
        return out
    mine = own_pids()
    for c in kids:
        try:
            if c.pid not in mine and c.is_running() and c.status() != psutil.STATUS_ZOMBIE \
                    and "multiprocessing.resource_tracker" not in " ".join(c.cmdline()):
                out.append(c)
        except psutil.Error:
            pass
    return out


def close() -> None:
    global _SERVER
    if _SERVER is not None:
        _SERVER.close()
        _SERVER = None
