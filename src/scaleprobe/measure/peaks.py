"""Peak FLOP/s of known accelerators, by dtype, from the vendors' data sheets. No torch.

MFU (``metrics.mfu``) divides the FLOP/s a run achieved by the peak of the devices it ran on,
for the dtype its matrix products ran in. The figures below are DENSE peaks: data sheets
print tensor-core figures "with sparsity" (2:4 structured sparsity, twice the dense rate),
which no ordinary training step uses, so those are halved (in ``accelerators.csv``). A device that is not in the
table (and every CPU) gets a measured peak instead (``measure/flops.py``).

dtype keys: ``fp32`` (plain FP32, no tensor cores), ``tf32`` (FP32 tensors on TF32 tensor
cores), ``bf16``, ``fp16``. ``None``: the device has no such unit.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path

T = 1e12
DTYPES = ("fp32", "tf32", "bf16", "fp16")


@dataclass(frozen=True)
class Accelerator:
    name: str
    pattern: str  # regular expression on the lower-case NVML / torch device name
    peaks: dict[str, float | None]  # dtype -> dense FLOP/s
    source: str


# One row per accelerator in accelerators.csv beside this module: its name, the pattern, the
# dense peaks in TFLOP/s per dtype (empty: no such unit), the source named in the figures'
# basis, and what the data sheet prints (with sparsity or dense). Ordered: the first pattern
# that matches wins, so the more specific names come first ("h100 nvl" before "h100", "a100"
# before "a10", "l40s" before "l40" before "l4"). A new accelerator is a row there.
TABLE_FILE = Path(__file__).with_name("accelerators.csv")


def _load(path: Path) -> tuple[Accelerator, ...]:
    with path.open(newline="") as fh:
        return tuple(Accelerator(row["name"], row["pattern"],
                                 {d: float(row[d]) * T if row[d] else None for d in DTYPES},
                                 row["source"])
                     for row in csv.DictReader(fh))


TABLE = _load(TABLE_FILE)


def find(device_name: str | None) -> Accelerator | None:
    """The table's entry for an NVML / torch device name (``NVIDIA H100 80GB HBM3``,
    ``NVIDIA A100-SXM4-40GB``, ``Tesla T4``), or None."""
    if not device_name:
        return None
    name = re.sub(r"[-_]", " ", device_name.lower())
    return next((a for a in TABLE if re.search(a.pattern, name)), None)


def table_peak(device_name: str | None, dtype: str) -> tuple[float, str] | None:
    """(dense FLOP/s, source) for this device and dtype; None when the device is not in the
    table. A dtype the device has no unit for falls back to its FP32 peak, and says so."""
    acc = find(device_name)
    if acc is None:
        return None
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r} (one of {', '.join(DTYPES)})")
    v = acc.peaks.get(dtype)
    if v is None:
        return acc.peaks["fp32"], f"{acc.name} fp32 (no {dtype} unit): {acc.source}"  # type: ignore[return-value]
    return v, f"{acc.name} {dtype}: {acc.source}"
