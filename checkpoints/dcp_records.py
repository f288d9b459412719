"""One DCP record (a tensor `torch.save`d into a shard file) read back from
its bytes in memory, with no copy and no fresh memory, and copied into a
live tensor.

A record is a stored (uncompressed) zip: `{prefix}/data.pkl` (the pickle
that rebuilds the tensor: dtype, shape, strides) and `{prefix}/data/{key}`
(its storage's bytes, aligned). `tensor_of` finds the members from the
zip's central directory, unpickles `data.pkl` with torch's weights-only
unpickler (what `torch.load(weights_only=True)` uses, so only tensors and
plain types come out) and gives it storages that are views of the record's
bytes; a `data.pkl` seen before is not unpickled again (`_LAYOUTS`).
torch.load itself would allocate and fill fresh storage per tensor (on these
VMs the first touch of fresh memory is slower than the disk) and costs ~1 ms
per record in Python callbacks. Anything unexpected in the zip
(zip64, compression, big-endian data) goes to `torch.load`.

`copy_into` copies contiguous tensors with one `memmove` (single-threaded,
GIL released): torch's `copy_` splits a large copy over its intra-op
threads, and with a digest thread on the other core one of them waits for
it, ten times slower.
"""

from __future__ import annotations

import ctypes
import io
import struct
from typing import Any

import torch
from torch import _weights_only_unpickler

_EOCD = struct.Struct("<4sHHHHIIH")  # end of central directory, without the comment
_CENTRAL = struct.Struct("<4sHHHHHHIIIHHHHHII")  # central directory file header
_LOCAL = struct.Struct("<4sHHHHHIIIHH")  # local file header
_U32_MAX = 0xFFFFFFFF

# data.pkl -> (storage key, dtype, shape, strides, storage offset): a record's
# pickle says only these, so one seen before needs no unpickling (~0.4 ms):
# a model's tensors come in a few shapes.
_LAYOUTS: dict[bytes, tuple[str, torch.dtype, tuple[int, ...], tuple[int, ...], int]] = {}
_MAX_LAYOUTS = 4096


class _Unexpected(Exception):
    """A record this parser does not handle: torch.load reads it instead."""


def tensor_of(record: memoryview) -> torch.Tensor:
    """The tensor saved in `record`; a view of its bytes where it can be."""
    try:
        return _view_of(record)
    except _Unexpected:
        return torch.load(io.BytesIO(bytes(record)), map_location="cpu", weights_only=True)


def copy_into(target: torch.Tensor, source: torch.Tensor) -> None:
    if (target.dtype == source.dtype and target.shape == source.shape
            and target.is_contiguous() and source.is_contiguous()
            and target.device.type == "cpu" and source.device.type == "cpu"):
        if target.numel():
            ctypes.memmove(target.data_ptr(), source.data_ptr(), target.nbytes)
    else:
        target.copy_(source)


def _view_of(record: memoryview) -> torch.Tensor:
    members = _members(record)
    pickles = [name for name in members if name.endswith("/data.pkl")]
    if len(pickles) != 1:
        raise _Unexpected("no single data.pkl")
    prefix = pickles[0][: -len("data.pkl")]
    byteorder = members.get(f"{prefix}byteorder")
    if byteorder is not None and bytes(record[slice(*byteorder)]) != b"little":
        raise _Unexpected("not little-endian")
    pickled = bytes(record[slice(*members[pickles[0]])])
    layout = _LAYOUTS.get(pickled)
    if layout is not None:  # a pickle seen before: the same dtype, shape, strides and offset
        key, dtype, size, stride, offset = layout
        span = members.get(f"{prefix}data/{key}")
        if span is None:
            raise _Unexpected(f"no storage {key}")
        base = (torch.frombuffer(record[slice(*span)], dtype=dtype) if span[1] > span[0]
                else torch.empty(0, dtype=dtype))
        return base.as_strided(size, stride, offset)
    loaded: list[tuple[str, torch.dtype]] = []

    def persistent_load(saved_id: Any) -> torch.storage.TypedStorage:
        typename, storage_type, key, _location, numel = saved_id
        if (typename.decode() if isinstance(typename, bytes) else typename) != "storage":
            raise _Unexpected(f"persistent id {typename!r}")
        dtype = torch.uint8 if storage_type is torch.UntypedStorage else storage_type.dtype
        nbytes = numel * torch._utils._element_size(dtype)
        span = members.get(f"{prefix}data/{key}")
        if span is None or span[1] - span[0] != nbytes:
            raise _Unexpected(f"storage {key} is not {nbytes} bytes")
        loaded.append((key, dtype))
        if nbytes == 0:
            untyped = torch.UntypedStorage(0)
        else:
            untyped = torch.frombuffer(record[slice(*span)], dtype=torch.uint8).untyped_storage()
        return torch.storage.TypedStorage(wrap_storage=untyped, dtype=dtype, _internal=True)

    unpickler = _weights_only_unpickler.Unpickler(io.BytesIO(pickled), encoding="utf-8")
    unpickler.persistent_load = persistent_load  # type: ignore[method-assign]
    tensor = unpickler.load()
    if not isinstance(tensor, torch.Tensor):
        raise _Unexpected(f"a {type(tensor).__name__}, not a tensor")
    plain = (type(tensor) is torch.Tensor and not tensor.requires_grad and not tensor.__dict__
             and len(loaded) == 1 and loaded[0][1] == tensor.dtype)
    if plain and len(_LAYOUTS) < _MAX_LAYOUTS:
        _LAYOUTS[pickled] = (loaded[0][0], tensor.dtype, tuple(tensor.shape), tensor.stride(),
                             int(tensor.storage_offset()))
    return tensor


def _members(record: memoryview) -> dict[str, tuple[int, int]]:
    """Each stored member's name -> (start, end) of its bytes in the record."""
    if len(record) < _EOCD.size:
        raise _Unexpected("too short for a zip")
    (sig, _disk, _cd_disk, _n_here, count, cd_size, cd_offset,
     comment) = _EOCD.unpack_from(record, len(record) - _EOCD.size)
    if sig != b"PK\x05\x06" or comment or _U32_MAX in (cd_size, cd_offset) or count == 0xFFFF:
        raise _Unexpected("no plain end of central directory (zip64, or a comment)")
    members: dict[str, tuple[int, int]] = {}
    at = cd_offset
    for _ in range(count):
        fields = _CENTRAL.unpack_from(record, at)
        sig, method, size = fields[0], fields[4], fields[8]
        name_len, extra_len, comment_len, local = fields[10], fields[11], fields[12], fields[16]
        if sig != b"PK\x01\x02" or method != 0 or _U32_MAX in (size, local):
            raise _Unexpected("a compressed or zip64 member")
        name = bytes(record[at + _CENTRAL.size : at + _CENTRAL.size + name_len]).decode()
        at += _CENTRAL.size + name_len + extra_len + comment_len
        local_fields = _LOCAL.unpack_from(record, local)
        if local_fields[0] != b"PK\x03\x04":
            raise _Unexpected("no local header")
        start = local + _LOCAL.size + local_fields[9] + local_fields[10]
        if start + size > cd_offset:
            raise _Unexpected("a member past the central directory")
        members[name] = (start, start + size)
    return members
