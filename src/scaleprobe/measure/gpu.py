"""NVML access: GPU utilisation, memory (context included) and power, when a driver is present."""

from __future__ import annotations

import os
from typing import Any

_state: dict[str, Any] = {"init": None, "error": None}


def _init() -> bool:
    if _state["init"] is not None:
        return bool(_state["init"])
    try:
        import pynvml  # optional: pynvml (absent or failing without an NVIDIA driver)

        pynvml.nvmlInit()
        ok = True
    except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded, ImportError, ...
        ok = False
        _state["error"] = f"NVML unavailable: {type(e).__name__}"
    _state["init"] = ok
    return ok


def nvml_info() -> dict[str, Any]:
    if not _init():
        return {"status": _state["error"], "driver": None}
    import pynvml  # optional: pynvml (absent or failing without an NVIDIA driver)

    drv = pynvml.nvmlSystemGetDriverVersion()
    return {"status": "ok", "driver": drv.decode() if isinstance(drv, bytes) else drv}


def nvml_unavailable_reason() -> str | None:
    return None if _init() else (_state["error"] or "NVML unavailable")


def _physical_index(cuda_index: int) -> int:
    """Map a CUDA device index to NVML's, honouring CUDA_VISIBLE_DEVICES given as numbers."""
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis:
        parts = [p.strip() for p in vis.split(",") if p.strip()]
        if cuda_index < len(parts) and parts[cuda_index].isdigit():
            return int(parts[cuda_index])
    return cuda_index


class NvmlDevice:
    """One GPU as NVML sees it. ``sample()`` -> (util %, used bytes, power W)."""

    def __init__(self, cuda_index: int) -> None:
        import pynvml  # optional: pynvml (absent or failing without an NVIDIA driver)

        self._nv = pynvml
        self.index = cuda_index
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(_physical_index(cuda_index))

    def sample(self) -> tuple[float | None, int | None, float | None]:
        nv = self._nv
        util = mem = power = None
        try:
            util = float(nv.nvmlDeviceGetUtilizationRates(self.handle).gpu)
        except nv.NVMLError:
            pass
        try:
            mem = int(nv.nvmlDeviceGetMemoryInfo(self.handle).used)
        except nv.NVMLError:
            pass
        try:
            power = nv.nvmlDeviceGetPowerUsage(self.handle) / 1000.0
        except nv.NVMLError:
            pass
        return util, mem, power

    def energy_mj(self) -> int | None:
        """NVML's energy counter (millijoules since the driver loaded; Volta and later), or
        None where the GPU or driver has none."""
        try:
            return int(self._nv.nvmlDeviceGetTotalEnergyConsumption(self.handle))
        except (self._nv.NVMLError, AttributeError):
            return None

    def compute_processes(self) -> list[tuple[int, int | None]] | None:
        """(pid, used GPU memory in bytes or None) of every process with a compute context on
        this device; None when NVML cannot list them."""
        try:
            procs = self._nv.nvmlDeviceGetComputeRunningProcesses(self.handle)
        except self._nv.NVMLError:
            return None
        out = []
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            out.append((int(p.pid), int(used) if isinstance(used, int) else None))
        return out


def open_device(cuda_index: int) -> NvmlDevice | None:
    if not _init():
        return None
    try:
        return NvmlDevice(cuda_index)
    except Exception:
        return None
