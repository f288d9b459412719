"""A rank's shard of a parameter read from a safetensors file, by box: the
rows (or columns) of the full tensor its local DTensor shard covers, and
nothing else. Shared by the base's weights (`HuggingFaceWeights`,
workers/engine/init_weights.py) and a PEFT adapter's (`PeftAdapterWeights`,
workers/engine/peft_format.py), which is why it imports neither.
"""

from __future__ import annotations

import warnings

import torch
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

from checkpoints.safetensors_io import SafetensorsReader

TORCH_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
                "F64": torch.float64}


def local_box(param: torch.Tensor) -> tuple[list[tuple[int, int]], torch.Tensor]:
    """(the box of the full tensor this rank holds, the local tensor holding it)."""
    if isinstance(param, DTensor):
        shape, offset = compute_local_shape_and_global_offset(
            param.shape, param.device_mesh, param.placements)
        return [(o, o + s) for o, s in zip(offset, shape, strict=True)], param.to_local()
    return [(0, d) for d in param.shape], param


def read_local(reader: SafetensorsReader, key: str, param: torch.Tensor) -> None:
    """Write `param`'s local shard from the box of the file's tensor `key` it
    covers (the caller has checked that the shapes agree): straight into the
    shard's memory where the dtypes agree, else converting the file's (bf16,
    fp16, fp32) to the parameter's."""
    info = reader.tensors[key]
    box, local = local_box(param)
    if local.numel() == 0:
        return
    with torch.no_grad():
        if TORCH_DTYPES[info.dtype] == local.dtype and local.is_contiguous() \
                and local.device.type == "cpu":
            reader.read_box_into(key, box, _bytes_of(local))
            return
        data = reader.read_box(key, box)
        with warnings.catch_warnings():  # read-only bytes: copied out at once below
            warnings.simplefilter("ignore", UserWarning)
            source = torch.frombuffer(data, dtype=TORCH_DTYPES[info.dtype])
        local.copy_(source.view(local.shape))


def _bytes_of(tensor: torch.Tensor) -> memoryview:
    """A contiguous CPU tensor's memory, writable (numpy has no bf16: viewed as int16)."""
    flat = tensor.detach()
    if flat.dtype == torch.bfloat16:
        flat = flat.view(torch.int16)
    return flat.numpy().data.cast("B")
