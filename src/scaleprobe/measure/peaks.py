"""Peak FLOP/s of known accelerators, by dtype, from the vendors' data sheets. No torch.

MFU (``metrics.mfu``) divides the FLOP/s a run achieved by the peak of the devices it ran on,
for the dtype its matrix products ran in. The figures below are DENSE peaks: data sheets
print tensor-core figures "with sparsity" (2:4 structured sparsity, twice the dense rate),
which no ordinary training step uses, so those are halved here. A device that is not in the
table (and every CPU) gets a measured peak instead (``measure/flops.py``).

dtype keys: ``fp32`` (plain FP32, no tensor cores), ``tf32`` (FP32 tensors on TF32 tensor
cores), ``bf16``, ``fp16``. ``None``: the device has no such unit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

T = 1e12


@dataclass(frozen=True)
class Accelerator:
    name: str
    pattern: str  # regular expression on the lower-case NVML / torch device name
    peaks: dict[str, float | None]  # dtype -> dense FLOP/s
    source: str


# Ordered: the first pattern that matches wins, so the more specific names come first
# ("h100 nvl" before "h100", "a100" before "a10", "l40s" before "l40" before "l4").
TABLE: tuple[Accelerator, ...] = (
    # NVIDIA H200 Tensor Core GPU data sheet (2024): H200 NVL column; TF32 835, BF16/FP16
    # 1,671 TFLOPS are with sparsity
    Accelerator("NVIDIA H200 NVL", r"h200.*nvl",
                {"fp32": 60 * T, "tf32": 417.5 * T, "bf16": 835.5 * T, "fp16": 835.5 * T},
                "NVIDIA H200 data sheet (H200 NVL), dense = sparse / 2"),
    # NVIDIA H200 Tensor Core GPU data sheet (2024): H200 SXM column; TF32 989, BF16/FP16
    # 1,979 TFLOPS are with sparsity
    Accelerator("NVIDIA H200 SXM", r"h200",
                {"fp32": 67 * T, "tf32": 494.5 * T, "bf16": 989.5 * T, "fp16": 989.5 * T},
                "NVIDIA H200 data sheet (H200 SXM), dense = sparse / 2"),
    # NVIDIA H100 Tensor Core GPU data sheet (2023): H100 NVL column, per GPU; TF32 835,
    # BF16/FP16 1,671 TFLOPS are with sparsity
    Accelerator("NVIDIA H100 NVL", r"h100.*nvl",
                {"fp32": 60 * T, "tf32": 417.5 * T, "bf16": 835.5 * T, "fp16": 835.5 * T},
                "NVIDIA H100 data sheet (H100 NVL), dense = sparse / 2"),
    # NVIDIA H100 Tensor Core GPU data sheet (2023): H100 PCIe column; TF32 756, BF16/FP16
    # 1,513 TFLOPS are with sparsity
    Accelerator("NVIDIA H100 PCIe", r"h100.*pcie",
                {"fp32": 51 * T, "tf32": 378 * T, "bf16": 756.5 * T, "fp16": 756.5 * T},
                "NVIDIA H100 data sheet (H100 PCIe), dense = sparse / 2"),
    # NVIDIA H100 Tensor Core GPU data sheet (2023): H100 SXM column (NVML: "NVIDIA H100 80GB
    # HBM3"); TF32 989, BF16/FP16 1,979 TFLOPS are with sparsity
    Accelerator("NVIDIA H100 SXM", r"h100",
                {"fp32": 67 * T, "tf32": 494.5 * T, "bf16": 989.5 * T, "fp16": 989.5 * T},
                "NVIDIA H100 data sheet (H100 SXM), dense = sparse / 2"),
    # NVIDIA A100 Tensor Core GPU data sheet (2021): TF32 156, BF16/FP16 312 TFLOPS dense
    # (312 / 624 with sparsity); the same for SXM and PCIe, 40 and 80 GB
    Accelerator("NVIDIA A100", r"a100",
                {"fp32": 19.5 * T, "tf32": 156 * T, "bf16": 312 * T, "fp16": 312 * T},
                "NVIDIA A100 data sheet, dense"),
    # NVIDIA L40S data sheet (2023): TF32 366, BF16/FP16 733 TFLOPS are with sparsity
    Accelerator("NVIDIA L40S", r"l40s",
                {"fp32": 91.6 * T, "tf32": 183 * T, "bf16": 366.5 * T, "fp16": 366.5 * T},
                "NVIDIA L40S data sheet, dense = sparse / 2"),
    # NVIDIA L40 data sheet (2022): TF32 181, BF16/FP16 362 TFLOPS are with sparsity
    Accelerator("NVIDIA L40", r"\bl40\b",
                {"fp32": 90.5 * T, "tf32": 90.5 * T, "bf16": 181 * T, "fp16": 181 * T},
                "NVIDIA L40 data sheet, dense = sparse / 2"),
    # NVIDIA L4 data sheet (2023): TF32 120, BF16/FP16 242 TFLOPS are with sparsity
    Accelerator("NVIDIA L4", r"\bl4\b",
                {"fp32": 30.3 * T, "tf32": 60 * T, "bf16": 121 * T, "fp16": 121 * T},
                "NVIDIA L4 data sheet, dense = sparse / 2"),
    # NVIDIA A10 data sheet (2021): TF32 62.5, BF16/FP16 125 TFLOPS dense
    Accelerator("NVIDIA A10", r"\ba10\b",
                {"fp32": 31.2 * T, "tf32": 62.5 * T, "bf16": 125 * T, "fp16": 125 * T},
                "NVIDIA A10 data sheet, dense"),
    # NVIDIA V100 data sheet (2020): SXM2 15.7 FP32, 125 tensor (FP16); no TF32, no BF16
    Accelerator("NVIDIA V100 SXM2", r"v100.*sxm",
                {"fp32": 15.7 * T, "tf32": None, "bf16": None, "fp16": 125 * T},
                "NVIDIA V100 data sheet (SXM2)"),
    # NVIDIA V100 data sheet (2020): PCIe 14 FP32, 112 tensor (FP16)
    Accelerator("NVIDIA V100 PCIe", r"v100",
                {"fp32": 14 * T, "tf32": None, "bf16": None, "fp16": 112 * T},
                "NVIDIA V100 data sheet (PCIe)"),
    # NVIDIA T4 data sheet (2019): 8.1 FP32, 65 mixed precision (FP16/FP32)
    Accelerator("NVIDIA T4", r"\bt4\b",
                {"fp32": 8.1 * T, "tf32": None, "bf16": None, "fp16": 65 * T},
                "NVIDIA T4 data sheet"),
)

DTYPES = ("fp32", "tf32", "bf16", "fp16")


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
