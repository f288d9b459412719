"""The safetensors format through fsspec, without torch: headers, the sharded
index, ranged reads of any sub-box of a tensor, and a writer that streams.

A safetensors file is an 8-byte little-endian header length N, N bytes of
JSON (`{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
{...}}`, offsets relative to the byte after the header), then the tensors'
bytes, row-major. A Hugging Face model directory holds `model.safetensors`,
or shards `model-0000k-of-0000n.safetensors` named by
`model.safetensors.index.json` (`{"metadata": {"total_size"}, "weight_map":
{name: file}}`).

`SafetensorsReader.read_box(name, box)` reads just the bytes of a box
(`[(start, stop), ...]`, one pair per dimension): the rows of a dim-0 shard
are one ranged read; a dim-1 shard is one run per row, runs whose gaps are
small are read together (`max_gap`), and the rest go out in one
`cat_ranges` call (concurrent on object stores). `reads` and `bytes_read`
count what went over the wire, so a test can check a rank read its share.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from fsspec import AbstractFileSystem
from fsspec.core import url_to_fs
from fsspec.implementations.local import LocalFileSystem

from checkpoints.digest import Digest
from checkpoints.manifest import FileEntry

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
CONFIG_FILE = "config.json"
HEADER_PROBE = 64 << 10  # the first read takes this much: most headers fit, saving a round trip
MAX_HEADER = 100 << 20  # what safetensors itself allows
ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
            "U8": 1, "BOOL": 1}
FLOAT_DTYPES = ("F32", "F16", "BF16")

Box = Sequence[tuple[int, int]]  # per dimension, [start, stop)


class SafetensorsError(ValueError):
    """A file or directory that is not what the format says; the message names it."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str  # safetensors' names: F32, BF16, ...
    shape: tuple[int, ...]
    begin: int  # absolute offsets in the file
    end: int
    file: str  # the file's path on its filesystem

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self.dtype]

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


def parse_header(data: bytes, path: str) -> tuple[int, dict[str, Any]]:
    """(the data section's absolute offset, the header's JSON) from a file's
    first bytes (at least 8 + N of them)."""
    if len(data) < 8:
        raise SafetensorsError(f"{path}: shorter than a safetensors header")
    (length,) = struct.unpack("<Q", data[:8])
    if length > MAX_HEADER:
        raise SafetensorsError(f"{path}: header of {length} bytes is over {MAX_HEADER}")
    if len(data) < 8 + length:
        raise SafetensorsError(f"{path}: header cut short")
    try:
        header = json.loads(data[8 : 8 + length])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SafetensorsError(f"{path}: header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    return 8 + length, header


def tensors_of(header: Mapping[str, Any], data_start: int, path: str,
               file_size: int | None = None) -> dict[str, TensorInfo]:
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape = entry["dtype"], tuple(int(d) for d in entry["shape"])
            begin, end = (int(x) for x in entry["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise SafetensorsError(f"{path}: tensor {name!r} has a malformed entry") from None
        if dtype not in ITEMSIZE:
            raise SafetensorsError(f"{path}: tensor {name!r} has dtype {dtype!r}, not one we read")
        if end - begin != math.prod(shape) * ITEMSIZE[dtype] or begin < 0:
            raise SafetensorsError(f"{path}: tensor {name!r}: offsets do not match its shape")
        if file_size is not None and data_start + end > file_size:
            raise SafetensorsError(f"{path}: tensor {name!r} runs past the end of the file")
        out[name] = TensorInfo(name, dtype, shape, data_start + begin, data_start + end, path)
    return out


def read_header(fs: AbstractFileSystem, path: str) -> dict[str, TensorInfo]:
    """Every tensor of one file, from its header alone (one or two ranged reads)."""
    size = fs.size(path)
    head = fs.cat_file(path, start=0, end=min(HEADER_PROBE, size))
    if len(head) >= 8:
        (length,) = struct.unpack("<Q", head[:8])
        if 8 + length > len(head) and length <= MAX_HEADER:
            head = fs.cat_file(path, start=0, end=8 + length)
    start, header = parse_header(head, path)
    return tensors_of(header, start, path, size)


def model_files(fs: AbstractFileSystem, directory: str) -> list[str]:
    """The safetensors files of a model directory: the index's shards, or the single file."""
    directory = directory.rstrip("/")
    index = f"{directory}/{INDEX_FILE}"
    if fs.exists(index):
        weight_map = parse_index(fs.cat_file(index), index)
        return [f"{directory}/{name}" for name in dict.fromkeys(weight_map.values())]
    single = f"{directory}/{SINGLE_FILE}"
    if fs.exists(single):
        return [single]
    raise SafetensorsError(f"{directory}: neither {SINGLE_FILE} nor {INDEX_FILE} is there")


def parse_index(data: bytes, path: str) -> dict[str, str]:
    """The index's weight map, name -> shard file name (no paths: a shard is in the directory)."""
    try:
        weight_map = json.loads(data)["weight_map"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError):
        raise SafetensorsError(f"{path}: not an index with a weight_map") from None
    if not isinstance(weight_map, dict):
        raise SafetensorsError(f"{path}: weight_map is not an object")
    for name, file in weight_map.items():
        if not isinstance(file, str) or "/" in file or file in ("", ".", "..") or "\\" in file:
            raise SafetensorsError(f"{path}: tensor {name!r} names a file outside the directory")
    return weight_map


@dataclass
class SafetensorsReader:
    """A Hugging Face model directory's tensors (or those of its one `file`),
    read by box through fsspec."""

    uri: str
    storage_options: Mapping[str, Any] = field(default_factory=dict)
    max_gap: int = 256 << 10  # runs this close are read as one range (a row of a column shard)
    file: str | None = None  # one file of the directory to read instead (a PEFT adapter's)
    reads: int = 0  # ranged reads of tensor data
    bytes_read: int = 0

    def __post_init__(self) -> None:
        self.fs, self.path = url_to_fs(self.uri, **dict(self.storage_options))
        self.path = self.path.rstrip("/")
        self.tensors: dict[str, TensorInfo] = {}
        files = ([f"{self.path}/{self.file}"] if self.file is not None
                 else model_files(self.fs, self.path))
        for file in files:
            for name, info in read_header(self.fs, file).items():
                if name in self.tensors:
                    raise SafetensorsError(f"{self.uri}: tensor {name!r} is in two files")
                self.tensors[name] = info

    def config(self) -> dict[str, Any]:
        """The directory's config.json."""
        try:
            return json.loads(self.fs.cat_file(f"{self.path}/{CONFIG_FILE}"))
        except FileNotFoundError:
            raise SafetensorsError(f"{self.uri}: no {CONFIG_FILE}") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SafetensorsError(f"{self.uri}: {CONFIG_FILE} is not JSON ({exc})") from None

    def read_box(self, name: str, box: Box | None = None) -> bytes:
        """The bytes of `box` of tensor `name`, row-major as the box's own
        contiguous array (the file's dtype)."""
        info = self.tensors[name]
        box = [(0, d) for d in info.shape] if box is None else [(b[0], b[1]) for b in box]
        runs = box_runs(info.shape, box, info.itemsize)
        if not runs:
            return b""
        spans = coalesce(runs, self.max_gap)
        if len(runs) == 1:  # the usual case (a dim-0 shard): the read is the answer
            start, end = runs[0]
            blob = self.fs.cat_file(info.file, start=info.begin + start, end=info.begin + end)
            self.reads += 1
            self.bytes_read += len(blob)
            return blob
        if len(spans) == 1:
            start, end = spans[0][0]
            blobs = [self.fs.cat_file(info.file, start=info.begin + start, end=info.begin + end)]
        else:
            blobs = self.fs.cat_ranges([info.file] * len(spans),
                                       [info.begin + s for (s, _), _ in spans],
                                       [info.begin + e for (_, e), _ in spans])
        self.reads += len(spans)
        out = bytearray()
        for ((span_start, _), members), blob in zip(spans, blobs, strict=True):
            if isinstance(blob, Exception):
                raise blob
            self.bytes_read += len(blob)
            if len(members) == 1 and members[0] == (span_start, span_start + len(blob)):
                out += blob
                continue
            view = memoryview(blob)
            for start, end in members:
                out += view[start - span_start : end - span_start]
        return bytes(out)

    def read_box_into(self, name: str, box: Box, out: memoryview) -> None:
        """`read_box` into `out` (a writable buffer of exactly the box's
        bytes). On a local filesystem a box that is one run is read straight
        into it (no intermediate copy); otherwise as `read_box`."""
        info = self.tensors[name]
        runs = box_runs(info.shape, [(b[0], b[1]) for b in box], info.itemsize)
        if len(runs) == 1 and isinstance(self.fs, LocalFileSystem):
            start, end = runs[0]
            if out.nbytes != end - start:
                raise ValueError(f"{name}: a buffer of {out.nbytes} bytes for a box of {end - start}")
            with open(info.file, "rb", buffering=0) as f:
                f.seek(info.begin + start)
                view, done = out.cast("B"), 0
                while done < len(view):
                    n = f.readinto(view[done:])
                    if not n:
                        raise SafetensorsError(f"{info.file}: cut short inside tensor {name!r}")
                    done += n
            self.reads += 1
            self.bytes_read += end - start
            return
        data = self.read_box(name, box)
        out.cast("B")[:] = data

    def read_array(self, name: str, box: Box | None = None, dtype: str = "float32") -> np.ndarray:
        """`read_box` as a numpy array of `dtype` (bf16 widened exactly)."""
        info = self.tensors[name]
        box = [(0, d) for d in info.shape] if box is None else box
        shape = tuple(stop - start for start, stop in box)
        return to_numpy(self.read_box(name, box), info.dtype, shape).astype(dtype, copy=False)


def to_numpy(data: bytes, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    if dtype == "BF16":  # numpy has no bfloat16: its bits are a float32's upper half
        bits = np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16
        return bits.view(np.float32).reshape(shape)
    numpy_name = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4",
                  "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}[dtype]
    return np.frombuffer(data, dtype=numpy_name).reshape(shape)


def box_runs(shape: Sequence[int], box: Box, itemsize: int) -> list[tuple[int, int]]:
    """The contiguous byte ranges (relative to the tensor's start) that hold
    `box` of a row-major tensor, in order."""
    if len(box) != len(shape):
        raise ValueError(f"a box of {len(box)} dimensions for a tensor of {len(shape)}")
    for (start, stop), dim in zip(box, shape, strict=True):
        if not 0 <= start <= stop <= dim:
            raise ValueError(f"box {list(box)} is outside the shape {list(shape)}")
    if any(start == stop for start, stop in box):
        return []
    if not shape:
        return [(0, itemsize)]
    strides = [itemsize] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    # The innermost dimensions the box covers whole merge into the run; the
    # first one from the inside that it does not cover sets the run's length.
    k = len(shape) - 1
    while k > 0 and box[k] == (0, shape[k]):
        k -= 1
    run = (box[k][1] - box[k][0]) * strides[k]
    outer = [range(start, stop) for start, stop in box[:k]]
    base = box[k][0] * strides[k]
    return [(off, off + run) for off in _offsets(outer, strides[:k], base)]


def _offsets(ranges: list[range], strides: list[int], base: int) -> Iterator[int]:
    if not ranges:
        yield base
        return
    for i in ranges[0]:
        yield from _offsets(ranges[1:], strides[1:], base + i * strides[0])


def coalesce(runs: Iterable[tuple[int, int]], max_gap: int
             ) -> list[tuple[tuple[int, int], list[tuple[int, int]]]]:
    """Runs (in order) grouped into spans to read: (span, its runs)."""
    spans: list[tuple[tuple[int, int], list[tuple[int, int]]]] = []
    for start, end in runs:
        if spans and start - spans[-1][0][1] <= max_gap:
            (span_start, _), members = spans[-1]
            spans[-1] = ((span_start, end), [*members, (start, end)])
        else:
            spans.append(((start, end), [(start, end)]))
    return spans


# -- writing -------------------------------------------------------------------

@dataclass(frozen=True)
class TensorEntry:
    """A tensor to write: what the header says of it."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * ITEMSIZE[self.dtype]


def encode_header(entries: Sequence[TensorEntry], metadata: Mapping[str, str] | None = None) -> bytes:
    """The 8-byte length and the JSON header for tensors written in this
    order, padded with spaces so the data starts 8-byte aligned."""
    header: dict[str, Any] = {"__metadata__": dict(metadata or {"format": "pt"})}
    offset = 0
    for e in entries:
        header[e.name] = {"dtype": e.dtype, "shape": list(e.shape),
                          "data_offsets": [offset, offset + e.nbytes]}
        offset += e.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    return struct.pack("<Q", len(text)) + text


class SafetensorsWriter:
    """Streams one safetensors file: the header first (from the entries'
    shapes and dtypes), then each tensor's bytes, in the entries' order.
    The file's size and digest (sha256 unless `algo` says otherwise) are
    counted as it goes (`entry()`)."""

    def __init__(self, fs: AbstractFileSystem, path: str, entries: Sequence[TensorEntry],
                 metadata: Mapping[str, str] | None = None, *, algo: str = "sha256"):
        self.entries = list(entries)
        self._next = 0
        self._digest = Digest(algo)
        self._fs = fs
        self._file = fs.open(path, "wb")
        self._write(encode_header(self.entries, metadata))

    @property
    def size(self) -> int:
        return self._digest.size

    def entry(self) -> FileEntry:
        """The size and digest of everything written so far."""
        return self._digest.entry()

    def write(self, name: str, data: bytes | memoryview) -> None:
        entry = self.entries[self._next]
        nbytes = memoryview(data).nbytes
        if name != entry.name or nbytes != entry.nbytes:
            raise ValueError(f"expected {entry.name} of {entry.nbytes} bytes next, "
                             f"got {name} of {nbytes}")
        self._write(data)
        self._next += 1

    def _write(self, data: bytes | memoryview) -> None:
        # The digest runs beside the write (both release the GIL): it costs
        # no wall time while the disk is the slower of the two.
        self._digest.beside(data, lambda: self._file.write(data))

    def close(self) -> None:
        """Close the file, on a local disk synced first (a manifest may commit it next)."""
        if self._next != len(self.entries):
            self._file.close()
            raise ValueError(f"{len(self.entries) - self._next} tensors were never written")
        if isinstance(self._fs, LocalFileSystem):
            self._file.flush()
            os.fsync(self._file.fileno())
        self._file.close()


def shard_plan(entries: Sequence[TensorEntry], max_shard_bytes: int) -> list[list[TensorEntry]]:
    """Tensors in order, cut into files of at most `max_shard_bytes` (a tensor
    larger than that gets a file of its own)."""
    shards: list[list[TensorEntry]] = [[]]
    size = 0
    for e in entries:
        if shards[-1] and size + e.nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(e)
        size += e.nbytes
    return shards


def shard_names(count: int) -> list[str]:
    """`model.safetensors` alone, else Hugging Face's `model-0000k-of-0000n.safetensors`."""
    if count == 1:
        return [SINGLE_FILE]
    return [f"model-{k:05d}-of-{count:05d}.safetensors" for k in range(1, count + 1)]


def encode_index(shards: Sequence[Sequence[TensorEntry]], names: Sequence[str]) -> bytes:
    weight_map = {e.name: file for shard, file in zip(shards, names, strict=True) for e in shard}
    total = sum(e.nbytes for shard in shards for e in shard)
    return json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map},
                      indent=2, sort_keys=True).encode()
