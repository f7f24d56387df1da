"""Out of memory is recognised precisely: allocator failures are "oom", other faults are not."""

import pytest

from scaleprobe.run.failure import is_oom


@pytest.mark.parametrize("error", [
    MemoryError(),
    "OutOfMemoryError: CUDA out of memory. Tried to allocate 12.25 GiB. GPU 0 has a total "
    "capacity of 79.18 GiB of which 2.33 GiB is free.",
    "RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't "
    "allocate memory: you tried to allocate 4294967296 bytes. Error code 12 (Cannot allocate "
    "memory)",
    "RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR ... out of memory",
    # the kernel's own words, capitalised: matched case-insensitively
    "OSError: [Errno 12] Cannot allocate memory",
    "torch.OutOfMemoryError: CUDA Out Of Memory. Tried to allocate 2.00 GiB",
    "RuntimeError: std::bad_alloc",
])
def test_allocator_failures_are_oom(error):
    assert is_oom(error)


@pytest.mark.parametrize("error", [
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "RuntimeError: CUDA error: misaligned address",
    "ValueError: rank one gave up",
    "RuntimeError: shape '[64, 10]' is invalid for input of size 320",
    "DataError: cannot read image /data/x.jpg",
])
def test_other_failures_are_not_oom(error):
    assert not is_oom(error)


ONEDNN = ("RuntimeError: could not create a primitive descriptor for a convolution "
          "forward propagation primitive")


def test_onednn_primitive_failure_is_oom_only_under_a_memory_limit():
    """Under --memory-limit a large batch's conv fails in oneDNN with "could not create a
    primitive" (a workspace it could not allocate): that point is oom, and the sweep skips the
    larger batches. Without a limit the same words are a real failure (an unsupported shape),
    which must not be hidden as oom."""
    assert is_oom(ONEDNN, memory_limited=True)
    assert is_oom(RuntimeError("could not create a primitive"), memory_limited=True)
    assert not is_oom(ONEDNN)
    assert not is_oom("RuntimeError: CUDA error: an illegal memory access was encountered",
                      memory_limited=True)
