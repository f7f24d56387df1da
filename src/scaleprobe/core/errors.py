"""Errors a user can cause. The CLI prints them as one line and exits 2. (Running out of memory
is not one: the driver recognises it, ``run.failure.is_oom``, records the run as "oom" and exits 3.)"""


class ScaleprobeError(Exception):
    """Base class: a mistake in the user's input, reported as one clear line."""

    exit_code = 2


class ConfigError(ScaleprobeError):
    """A bad option, file or combination of options."""


class DataError(ScaleprobeError):
    """Data that is missing, empty or unreadable; the message names the file."""


class OutputError(ScaleprobeError):
    """An output folder that cannot take the results (read-only, no permission, full); the
    message names the path."""


def one_line(exc: BaseException) -> str:
    """The user-facing line of an error, also when a DataLoader worker re-raised it with the
    worker's traceback folded into the message."""
    text = str(exc).strip()
    if "Traceback" not in text:
        return text.splitlines()[0] if text else type(exc).__name__
    prefix = f"{type(exc).__name__}: "
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln.startswith(prefix):
            return ln[len(prefix):]
    return lines[-1]
