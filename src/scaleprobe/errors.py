"""Errors a user can cause. The CLI prints them as one line and exits 2 (OOM exits 3)."""


class ScaleprobeError(Exception):
    """Base class: a mistake in the user's input, reported as one clear line."""

    exit_code = 2


class ConfigError(ScaleprobeError):
    """A bad option, file or combination of options."""


class DataError(ScaleprobeError):
    """Data that is missing, empty or unreadable; the message names the file."""


class OutOfMemory(ScaleprobeError):
    """A run that ran out of device or host memory."""

    exit_code = 3
