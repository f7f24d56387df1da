"""The error lines a failed rank leaves, in scaleprobe's words: the last meaningful line of a
traceback (``last_meaningful_line``), torch's wrapping taken off (``plain_error``), a killed
DataLoader worker's signal named (``name_signal``, ``loader_worker_exits``), and what a rank
that waited for a frozen peer did (``waited_text``), and a rank that never started
(``never_started_text``)."""

from __future__ import annotations

import re
import signal

# a frame of the Python stack pybind11 appends to an error raised through C++ (a torch
# future's callback, DDP's comm hook): "At:" then "  /path/hook.py(101): done" lines
_PYBIND_FRAME = re.compile(r"^\S.*\(\d+\): \S+$")
_CALLBACK = "Got the following error when running the callback: "
# a C++ source location torch's distributed errors begin with: "[../third_party/gloo/...:81] "
_SOURCE_AT = re.compile(r"\[[^\]\s]+\.(?:cc|cpp|c|h|hpp):\d+\] ")


def last_meaningful_line(msg: str) -> str:
    """The error line of a traceback: its last line that is not a frame or a marker (Python's,
    or the "At:" stack pybind11 appends to an error raised through torch's C++: its last
    frame, "measure/comm/hook.py(101): done", was taken for the error)."""
    lines = [ln.strip() for ln in msg.strip().splitlines() if ln.strip()]
    while "At:" in lines:  # one block for each callback the error passed through
        at = len(lines) - 1 - lines[::-1].index("At:")
        if not all(_PYBIND_FRAME.match(ln) for ln in lines[at + 1:]):
            break
        lines = lines[:at]
    for ln in reversed(lines):
        if ln.startswith(("File ", "^", "~")) or ln.startswith("Traceback"):
            continue
        return ln[:400]
    return ""


def plain_error(line: str) -> str:
    """An error line without torch's wrapping: the callback's preamble and a C++ source
    location (``RuntimeError: Timed out waiting 10000ms for recv operation to complete``)."""
    head, sep, inner = line.rpartition(_CALLBACK)  # the innermost, where callbacks nest
    return _SOURCE_AT.sub("", inner if sep and inner else line, count=1)


def name_signal(line: str, worker_exits: list[tuple[int, int]] | None = None) -> str:
    """An error line with the signal that killed a DataLoader worker named by number and
    name: PyTorch says "is killed by signal: Killed." (strsignal's words) or only "exited
    unexpectedly"; ``worker_exits`` is (pid, exit code) of the loader's workers where they
    were read (a negative code: the signal)."""
    killed = [(pid, -code) for pid, code in worker_exits or [] if code < 0]
    if killed and "killed by signal" not in line:
        return line + "; " + ", ".join(f"DataLoader worker (pid {pid}) was killed by signal "
                                       f"{sig} ({signal_name_of(sig)})" for pid, sig in killed)
    m = re.search(r"killed by signal: ([A-Za-z ]+)", line)
    if m:
        words = m.group(1).strip().rstrip(".")
        for s in signal.Signals:
            if signal.strsignal(s) == words:
                return line.rstrip(".") + f" (signal {s.value}, {s.name})"
    return line


def loader_worker_exits(exc: BaseException | None) -> list[tuple[int, int]]:
    """(pid, exit code) of the DataLoader workers that had ended when ``exc`` was raised,
    read from the iterators its traceback's frames hold (PyTorch's ``_workers``): a worker
    killed by a signal surfaces as "exited unexpectedly" or as a reset connection."""
    out: list[tuple[int, int]] = []
    tb = exc.__traceback__ if exc is not None else None
    while tb is not None:
        for v in list(tb.tb_frame.f_locals.values()):
            try:  # any object: its attributes may raise anything
                workers = v._workers if hasattr(v, "_workers_status") else None
                ended = [(w.pid, w.exitcode) for w in workers or []]
            except Exception:  # noqa: BLE001  (a detail of the error line, nothing more)
                continue
            out += [(pid, code) for pid, code in ended
                    if isinstance(code, int) and code != 0 and (pid, code) not in out]
        tb = tb.tb_next
    return out


def signal_name_of(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def waited_text(rank: int, line: str) -> str:
    """What the rank that failed after a peer stopped did, in scaleprobe's words: ``rank 0
    waited for it and gave up at the collective timeout (--timeout): RuntimeError: Timed out
    waiting 10000ms for recv operation to complete``."""
    line = plain_error(line)
    if gave_up_waiting(line):
        return (f"rank {rank} waited for it and gave up at the collective timeout "
                f"(--timeout): {line}")
    return f"rank {rank}, which waited for it, then failed: {line}"


def gave_up_waiting(line: str) -> bool:
    """Whether a rank's error says it gave up waiting (a collective's or the rendezvous
    store's timeout: "Timed out waiting 10000ms for recv", "DistStoreError: wait timeout
    after 10000ms"), rather than failing on its own."""
    return re.search(r"timed? ?out", line, re.IGNORECASE) is not None


def never_started_text(after_s: float) -> str:
    """``never started: no heartbeat 12.3 s after the job began ...``: a rank whose process
    never reached scaleprobe's code in the rank."""
    return (f"never started: no heartbeat {after_s:.1f} s after the job began (its process "
            "never reached scaleprobe's code in the rank: stuck as it started, in an import, "
            "a lock held when it was forked or a site hook)")
