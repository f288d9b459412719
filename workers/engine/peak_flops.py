"""A device's peak FLOP/s: the denominator of model FLOPs utilisation (the
`mfu` metric, workers/engine/metrics.py).

The table holds the vendors' datasheet numbers for dense matrix products
(the "with sparsity" figures NVIDIA prints first are twice these, and no
training step uses 2:4 sparsity), by the device name CUDA reports and the
dtype the products run in: the job's `sharding.param_dtype`, and for
float32, TF32 where torch lets cuBLAS use it
(`torch.get_float32_matmul_precision()` other than "highest"; the engine
leaves it at torch's default, "highest"). A name is matched by the first
entry it contains, so the longer names come before the shorter they
contain ("H100 NVL" before "H100", "L40S" before "L40" before "L4").

`BRIGADE_PEAK_FLOPS` (FLOP/s of one device, a float) in the rank's
environment overrides the table: for a device the table lacks, or a CPU,
which has no entry (its peak depends on cores, clocks and vector units
nothing here measures). A rank reads it itself, as it reads
BRIGADE_DATA_STORAGE_OPTIONS: set it where the Ray nodes run; a local
cluster that the service starts inherits the service's environment, and so
do the ranks its fork servers start (workers/cluster/fork_exec.py sends its
environment along).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

ENV = "BRIGADE_PEAK_FLOPS"
TERA = 1e12


@dataclass(frozen=True)
class Peak:
    """Dense FLOP/s of one device by the dtype its products run in; None where
    it has no such units (a V100 has no bf16 or TF32)."""

    fp32: float
    tf32: float | None
    bf16: float | None
    fp16: float | None

    def of(self, dtype: str) -> float | None:
        return getattr(self, dtype)


def _peak(fp32: float, tf32: float | None, bf16: float | None, fp16: float | None) -> Peak:
    """From datasheet TFLOPS."""
    def flops(tflops: float | None) -> float | None:
        return None if tflops is None else tflops * TERA

    return Peak(fp32 * TERA, flops(tf32), flops(bf16), flops(fp16))


# (a part of CUDA's device name, upper case, '-' read as ' '), the first contained wins
PEAKS: tuple[tuple[str, Peak], ...] = (
    ("B200", _peak(75, 1125, 2250, 2250)),  # HGX B200: 600 / 18,000 / 36,000 sparse for 8
    ("H100 NVL", _peak(60, 417.5, 835.5, 835.5)),
    ("H100 PCIE", _peak(51, 378, 756, 756)),
    ("H100", _peak(67, 494.5, 989.5, 989.5)),  # SXM ("NVIDIA H100 80GB HBM3")
    ("H200 NVL", _peak(60, 417.5, 835.5, 835.5)),
    ("H200", _peak(67, 494.5, 989.5, 989.5)),  # SXM: the H100's compute, more memory
    ("A100", _peak(19.5, 156, 312, 312)),  # SXM4 and PCIe alike
    ("L40S", _peak(91.6, 183, 362.05, 362.05)),
    ("L40", _peak(90.5, 90.5, 181, 181)),
    ("L4", _peak(30.3, 60, 121, 121)),
    ("A10G", _peak(31.2, 62.5, 125, 125)),  # AWS's A10: the A10's datasheet (AWS prints none)
    ("A10", _peak(31.2, 62.5, 125, 125)),
    ("V100 PCIE", _peak(14, None, None, 112)),
    ("V100", _peak(15.7, None, None, 125)),  # SXM2
)

# a job's sharding.param_dtype -> the table's column (float32: see `matmul_dtype`)
COLUMNS = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def matmul_dtype(param_dtype: str, float32_precision: str = "highest") -> str:
    """The table's column a job's products run in: its param dtype, or TF32
    for float32 where torch's matmul precision allows it."""
    if param_dtype == "float32" and float32_precision != "highest":
        return "tf32"
    return COLUMNS[param_dtype]


def table_peak(device_name: str, dtype: str) -> float | None:
    """The datasheet's dense FLOP/s of the device CUDA names `device_name` in
    `dtype` (a column: fp32, tf32, bf16, fp16); None for a device the table
    lacks or a dtype it has no units for."""
    name = device_name.upper().replace("-", " ")
    for part, peak in PEAKS:
        if part in name:
            return peak.of(dtype)
    return None


def env_peak() -> float | None:
    """BRIGADE_PEAK_FLOPS, or None where unset; ValueError naming it if it is
    not a positive number."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{ENV} must be FLOP/s of one device, a number like 989e12; "
                         f"got {raw!r}") from None
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{ENV} must be a positive, finite number of FLOP/s; got {raw!r}")
    return value


def device_peak_flops(device: torch.device, param_dtype: str) -> float | None:
    """This rank's device's peak FLOP/s for the job's dtype: BRIGADE_PEAK_FLOPS
    if set, else the table's for a CUDA device, else None (a CPU, a device
    the table lacks): then a row carries FLOP/s and no `mfu`."""
    override = env_peak()
    if override is not None:
        return override
    if device.type != "cuda":
        return None
    dtype = matmul_dtype(param_dtype, torch.get_float32_matmul_precision())
    return table_peak(torch.cuda.get_device_name(device), dtype)
