"""scaleprobe: measure and explain deep-learning training performance."""

import logging

__version__ = "0.1.0"


class _NoCudaRuntimeNote(logging.Filter):
    """torch logs "No CUDA runtime is found, using CUDA_HOME='/usr/local/cuda'" when a CUDA
    toolkit is installed on a machine without a GPU (its C++ extension helpers are imported by
    torch.compile, among others): noise in scaleprobe's output, which names the device itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("No CUDA runtime is found")


# the logger torch.utils.cpp_extension creates on import: the filter is in place before it is
logging.getLogger("torch.utils.cpp_extension").addFilter(_NoCudaRuntimeNote())

# A run record's config block is read as a RunConfig through config/sections.py, which the
# record's module cannot import (core/run_blocks.py says why): importing any module of
# scaleprobe installs the reader first.
from scaleprobe.config import runconfig as _config  # noqa: E402, F401
