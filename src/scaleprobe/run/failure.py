"""How a run ended, in one line: out of memory or not, the error line of a failure, and the
exit code each status gives. Torch-free: the driver, the experiments and the tests ask it."""

from __future__ import annotations

import re

from scaleprobe.measure import env

# std::bad_alloc: a C++ allocation (a oneDNN or gloo buffer) that failed outside torch's allocator
OOM_MARKERS = ("out of memory", "can't allocate memory", "cannot allocate memory",
               "defaultcpuallocator", "memoryerror", "outofmemoryerror", "std::bad_alloc")

# Under a CPU memory limit (RLIMIT_DATA), oneDNN reports a failed workspace allocation only as
# a primitive it could not create; without a limit the same words mean an unsupported shape or
# layout, so they count as out of memory only where a limit is in force.
LIMITED_OOM_MARKERS = ("could not create a primitive",)

SHM_MARKERS = ("unable to allocate shared memory", "insufficient shared memory",
               "out of shared memory", "unable to write to file </torch_")
_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Failure)\b.*:")

# the exit code of each run status (anything else, "failed", is 1); 2 is a mistake in the
# input, before or during the run (ConfigError, DataError, OutputError)
EXIT_CODES = {"ok": 0, "oom": 3, "target_not_reached": 4, "audit_failed": 5,
              "interrupted": 130}


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
    size = env.shm_bytes()
    have = ("/dev/shm is missing" if size is None else
            f"/dev/shm has {size >> 10} KiB" if size < 16 << 20 else
            f"/dev/shm has {size >> 20} MiB")
    return f"{have}; use --loader naive, fewer --workers or a larger /dev/shm"


def exit_code(status: str) -> int:
    """The exit code of a run that ended with ``status`` (docs/RELIABILITY.md)."""
    return EXIT_CODES.get(status, 1)
