"""Reading and writing result records and their files. No torch import: reports run anywhere.

One run writes ``OUT/<run_id>/result.json`` and appends the same record as one line to
``OUT/results.jsonl``; experiments append their own summary records to the same kind of file.
Every record is a JSON object with ``kind``; docs/RESULTS.md documents the run record's
fields. A value that was not measured is ``null``, with its reason in ``null_reasons``; never 0.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from scaleprobe.core.errors import OutputError
from scaleprobe.core.experiment_records import ColocateRecord, ParityRecord, SweepRecord, typed
from scaleprobe.core.result_model import Experiment, RunResult
from scaleprobe.core.run_metrics import Breakdown, Metrics, PeakMem, StepTime
from scaleprobe.core.run_parts import Audit, Batch, Comm, Load

# the record's types, read from here by README's "Reading results from Python" (the
# reading and writing below is this module's own)
__all__ = [
    "Audit", "Batch", "Breakdown", "ColocateRecord", "Comm", "Experiment", "Load", "Metrics",
    "ParityRecord", "PeakMem", "RunResult", "StepTime", "SweepRecord", "typed",
]


try:  # fcntl is POSIX-only; on other systems appends are still whole-line writes
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

RESULTS_FILE = "results.jsonl"
RESULTS_FILE_ENV = "SCALEPROBE_RESULTS_FILE"


def results_file(out: str | Path) -> Path:
    """Where a run appends its record: ``OUT/results.jsonl``, or the file named by
    SCALEPROBE_RESULTS_FILE (a Slurm job's own file; the process that submitted the job
    appends the record to OUT/results.jsonl, so jobs never write one file at once)."""
    override = os.environ.get(RESULTS_FILE_ENV)
    return Path(override) if override else Path(out) / RESULTS_FILE


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def new_run_record(config: dict[str, Any], run_id: str, name: str, key: str) -> dict[str, Any]:
    """A run's record before it ran (status "failed" until it ends otherwise)."""
    rec = RunResult(run_id=run_id, name=name, key=key, started_at=utc_now()).to_dict()
    return {**rec, "config": config}


def make_run_id(name: str | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    suffix = f"{os.getpid() % 100000:05d}{time.perf_counter_ns() % 1000:03d}"
    base = f"{stamp}-{suffix}"
    if name:
        safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)[:40]
        base = f"{base}-{safe}"
    return base


OUTPUT_REASONS = {errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
                  errno.EPERM: "permission denied", errno.ENOSPC: "no space left on device",
                  errno.EDQUOT: "disk quota exceeded", errno.ENOTDIR: "not a folder"}


def output_error(path: str | Path, e: OSError, verb: str = "cannot write") -> OutputError:
    """One line naming the path and why: ``cannot write OUT/result.json: read-only file system``."""
    reason = OUTPUT_REASONS.get(e.errno or 0) or e.strerror or str(e)
    return OutputError(f"{verb} {path}: {reason}")


def free_bytes(folder: str | Path) -> int | None:
    """Bytes an unprivileged writer may still use on ``folder``'s file system."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _kib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n // 1024} KiB"


def check_writable(folder: str | Path, need_bytes: int = 0, what: str = "the results") -> Path:
    """Preflight of an output folder: create it, create and remove a file in it, and check
    that ``need_bytes`` are free. Raises OutputError (one line naming the folder)."""
    d = Path(folder)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise output_error(d, e, "cannot create the output folder") from None
    if not d.is_dir():
        raise OutputError(f"output folder {d} is not a folder")
    probe = d / f".scaleprobe-probe.{os.getpid()}.tmp"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as e:
        raise output_error(d, e, "cannot write in the output folder") from None
    probe.unlink(missing_ok=True)
    free = free_bytes(d)
    if need_bytes and free is not None and free < need_bytes:
        raise OutputError(f"not enough free space in {d}: {_kib(free)} free, {what} need "
                          f"about {_kib(need_bytes)}")
    return d


def _mkdir(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise output_error(folder, e, "cannot create the output folder") from None


def write_text_atomic(path: str | Path, text: str | bytes) -> None:
    """Write via a temporary file (``.<name>.<pid>.tmp``) and rename, so a crash never leaves
    half a file; on failure (read-only, full disk) the temporary file is removed and an
    OutputError names the path."""
    p = Path(path)
    _mkdir(p.parent)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    data = text.encode() if isinstance(text, str) else text
    try:
        with tmp.open("wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except OSError as e:
        _remove(tmp)
        raise output_error(p, e) from None
    except BaseException:
        _remove(tmp)
        raise


def _remove(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:  # a read-only folder, where the file was never created
        pass


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """Write via a temporary file and rename, so a crash never leaves half a file."""
    write_text_atomic(path, json.dumps(obj, indent=2, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, (set, tuple)):
        return list(o)
    return str(o)


def append_jsonl(path: str | Path, record: dict[str, Any]) -> None:
    """Append one complete line, under an exclusive lock, flushed to disk: whole or not at all.

    The line goes out in one ``os.write`` after a check that the file system has room for it;
    a short write (the disk filled meanwhile) is cut back to the previous size, so the file
    never ends in part of this record. If the file already ends in a torn line (a writer
    killed mid-write), a newline is written first, so the new record starts on its own line.
    Raises OutputError (naming the file) when the line cannot be written.
    """
    p = Path(path)
    _mkdir(p.parent)
    line = (json.dumps(record, default=_json_default, separators=(",", ":")) + "\n").encode()
    try:
        fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as e:
        raise output_error(p, e) from None
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        _append_whole(fd, p, line)
    finally:
        os.close(fd)  # closing releases the lock


def _append_whole(fd: int, p: Path, line: bytes) -> None:
    size = os.fstat(fd).st_size
    if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
        line = b"\n" + line
    free = free_bytes(p.parent)
    if free is not None and free < len(line):
        raise output_error(p, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    try:
        written = os.write(fd, line)
        if written != len(line):
            raise OSError(errno.ENOSPC, f"short write ({written} of {len(line)} bytes)")
        os.fsync(fd)
    except OSError as e:
        try:
            os.ftruncate(fd, size)
        except OSError:  # pragma: no cover  (truncating never needs space)
            pass
        raise output_error(p, e) from None


def read_jsonl(path: str | Path, warn: bool = True) -> list[dict[str, Any]]:
    """All complete records; a torn or corrupt line is skipped with a warning, never raised."""
    p = Path(path)
    if not p.exists():
        return []
    out: list[dict[str, Any]] = []
    with p.open("rb") as fh:
        for n, raw in enumerate(fh, 1):
            raw = raw.strip()
            if not raw:
                continue
            try:
                rec = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                if warn:
                    print(f"warning: {p}:{n}: skipping a torn or corrupt line", file=sys.stderr)
                continue
            if isinstance(rec, dict):
                out.append(rec)
            elif warn:  # valid JSON, but no record: warned like a torn line, not dropped silently
                print(f"warning: {p}:{n}: skipping a line that is not a record (a JSON "
                      f"{_json_kind(rec)}, not an object)", file=sys.stderr)
    return out


def _json_kind(v: Any) -> str:
    return {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(v), "number")


def find_results(path: str | Path) -> list[dict[str, Any]]:
    """Records from a results.jsonl, a folder holding one (searched recursively), or a result.json."""
    p = Path(path)
    if p.is_file() and p.suffix == ".json":
        with p.open() as fh:
            return [json.load(fh)]
    if p.is_file():
        return read_jsonl(p)
    recs: list[dict[str, Any]] = []
    for f in sorted(p.rglob(RESULTS_FILE)):
        recs.extend(read_jsonl(f))
    return recs


def runs(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r.get("kind") == "run"]
