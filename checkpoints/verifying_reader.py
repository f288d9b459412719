"""DCP's fsspec reader, checking every file against the manifest as it reads it.

A load reads each file once, and checks it with the algorithm its manifest
entry names (BLAKE3; sha256 for a checkpoint written before it).
`.metadata` (a pickle) is read whole and its digest checked before it is
unpickled (`verify_metadata`). Every shard file
is given to one rank to verify: the rank that reads the most of it
(`prepare_global_plan`, on the coordinator, which sees every rank's plan),
so at the same world size each rank verifies its own files; a file no rank
reads goes to the least loaded one. That rank reads the file sequentially
from start to end, hashing every byte (on another core, beside the next
read: `checkpoints.digest`) and deserializing the records it needs as it
passes them; the other ranks that need parts of it read just those parts.

DCP reads into the live tensors, so a file that fails its check has by then
been copied, in part, into the state: `read_data` raises `ChecksumMismatch`
once it has read its files, DCP raises it on every rank, and the
checkpointer must not let the state be used (it loads an older step over
all of it, or raises: `Checkpointer.load`).

A record (one tensor, `torch.save`d by DCP) is read into a buffer reused
from one record to the next, and deserialized as a view of that buffer
(`checkpoints.dcp_records`): no fresh memory per tensor, and one copy, into
the live tensor.
"""

from __future__ import annotations

import io
import pickle
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import torch.distributed.checkpoint as dcp
from torch.distributed._shard._utils import narrow_tensor_by_index
from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner, ReadItem
from torch.futures import Future

from checkpoints import layout
from checkpoints.dcp_records import copy_into, tensor_of
from checkpoints.digest import Digest, entry_of
from checkpoints.errors import CheckpointInvalid
from checkpoints.manifest import FileEntry, Manifest
from checkpoints.read_ahead import ReadAhead

_CHUNK = 8 << 20  # bytes per read


class ChecksumMismatch(CheckpointInvalid):
    """A file of the step is not the one its manifest describes (size or digest).
    The message is the reasons, '; '-joined."""


def load_verified(state_dict: dict[str, Any], reader: VerifyingReader, **dcp_args: Any) -> list[str]:
    """`dcp.load` through `reader`: [] once loaded, else the reasons the step's
    files failed their checks (DCP hands every rank every rank's errors, so
    all return the same). Other errors propagate."""
    try:
        dcp.load(state_dict, storage_reader=reader, **dcp_args)
    except CheckpointException as exc:
        reasons = sorted({str(error) for error, _ in exc.failures.values()
                          if isinstance(error, ChecksumMismatch)})
        if reasons:
            return reasons
        raise
    return []


class VerifyingReader(FsspecReader):
    """`FsspecReader` for one committed step, verifying its files as DCP reads them."""

    def __init__(self, path: str, manifest: Manifest, **storage_options: Any) -> None:
        super().__init__(path, **storage_options)
        self._step = manifest.step
        self._expected = dict(manifest.files)
        self._metadata: bytes | None = None
        self._buffer = bytearray()  # a record read without hashing
        self._verify_buffers = [bytearray(), bytearray()]  # records read while hashing, in turn

    # -- .metadata: verified before it is unpickled ---------------------------------

    def verify_metadata(self) -> list[str]:
        """Read `.metadata` and check it; the reasons it does not match (empty if it does)."""
        name = layout.DCP_METADATA_NAME
        try:
            with self.fs.create_stream(self.fs.concat_path(self.path, name), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return [f"step {self._step}: file {name} is missing"]
        expected = self._expected.get(name)
        reason = self._mismatch(name, entry_of(data, expected.algo) if expected else None)
        if reason:
            return [reason]
        self._metadata = data
        return []

    def read_metadata(self) -> Metadata:  # no rank argument: DCP tries no rank-local fallback
        if self._metadata is None and (reasons := self.verify_metadata()):
            raise ChecksumMismatch("; ".join(reasons))
        assert self._metadata is not None
        metadata = pickle.loads(self._metadata)  # noqa: S301 - its digest is the signed manifest's
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata

    # -- who verifies which file --------------------------------------------------------

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        """Give each shard file to one rank to verify (in the plan's `storage_data`)."""
        reads: list[dict[str, int]] = [defaultdict(int) for _ in plans]
        for rank, plan in enumerate(plans):
            for item in plan.items:
                info = self.storage_data[item.storage_index]
                reads[rank][info.relative_path] += info.length
        load = [0] * len(plans)
        verify: list[list[str]] = [[] for _ in plans]
        shards = sorted((n for n in self._expected if n != layout.DCP_METADATA_NAME),
                        key=lambda n: (-self._expected[n].size, n))
        for name in shards:
            readers = [r for r in range(len(plans)) if reads[r].get(name)]
            if readers:
                who = max(readers, key=lambda r: (reads[r][name], -load[r], -r))
            else:
                who = min(range(len(plans)), key=lambda r: (load[r], r))
            verify[who].append(name)
            load[who] += self._expected[name].size
        return [replace(plan, storage_data=sorted(names)) for plan, names in zip(plans, verify, strict=True)]

    # -- reading ---------------------------------------------------------------------

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        per_file: dict[str, list[ReadItem]] = defaultdict(list)
        for item in plan.items:
            per_file[self.storage_data[item.storage_index].relative_path].append(item)
        verify = set(plan.storage_data or ())
        # DCP's plan names only files the manifest lists (the commit checks it); one it
        # does not list could not be verified: refused before anything is read.
        reasons = [f"step {self._step}: file {name} is not in the manifest"
                   for name in sorted(per_file) if name not in self._expected]
        if reasons:
            raise ChecksumMismatch("; ".join(reasons))
        for name in sorted(per_file.keys() | verify):
            path = self.fs.concat_path(self.path, name)
            records = self._records(per_file.get(name, []))
            try:
                with self.fs.create_stream(path, "rb") as stream:
                    if name in verify:
                        reason = self._read_verifying(stream, name, records, planner)
                        if reason:
                            reasons.append(reason)
                    else:
                        self._read_records(stream, records, planner)
            except FileNotFoundError:
                if name not in verify:
                    raise
                reasons.append(f"step {self._step}: file {name} is missing")
        if reasons:
            raise ChecksumMismatch("; ".join(reasons))
        done: Future[None] = Future()
        done.set_result(None)
        return done

    def _records(self, items: Iterable[ReadItem]) -> list[tuple[int, int, list[ReadItem]]]:
        """(offset, length, the items it serves) of each record, in file order."""
        by_span: dict[tuple[int, int], list[ReadItem]] = defaultdict(list)
        for item in items:
            info = self.storage_data[item.storage_index]
            by_span[(info.offset, info.length)].append(item)
        return [(offset, length, group) for (offset, length), group in sorted(by_span.items())]

    def _read_verifying(self, stream: Any, name: str, records: list[tuple[int, int, list[ReadItem]]],
                        planner: LoadPlanner) -> str | None:
        """Read the whole file in order, hashing it and delivering its records;
        the reason it fails its check, or None."""
        reads = _HashedReads(stream, self._verify_buffers, self._expected[name].algo,
                             ahead=ReadAhead.of(stream))
        failure: BaseException | None = None  # a record that would not deserialize
        try:
            for offset, length, items in records:
                reads.skip(offset - reads.pos)
                view = reads.read_record(length)
                if failure is None:
                    try:
                        self._deliver(view, items, planner)
                    except Exception as exc:  # corrupt bytes, most likely: the digest says
                        failure = exc
            reads.skip_to_end()
            actual = reads.digest.entry()
        except EOFError:
            return f"step {self._step}: file {name} size mismatch"
        finally:
            reads.digest.close()
        reason = self._mismatch(name, actual)
        if reason is None and failure is not None:
            raise failure  # the file is the one written: a real error, not corruption
        return reason

    def _read_records(self, stream: Any, records: list[tuple[int, int, list[ReadItem]]],
                      planner: LoadPlanner) -> None:
        """Just the records this rank needs (another rank verifies the file)."""
        for offset, length, items in records:
            stream.seek(offset)
            view = memoryview(self._record_buffer(length))[:length]
            got = 0
            while got < length:
                n = stream.readinto(view[got:])
                if not n:
                    raise EOFError(f"step {self._step}: a record ends past the end of its file")
                got += n
            self._deliver(view, items, planner)

    def _record_buffer(self, length: int) -> bytearray:
        if len(self._buffer) < length:
            self._buffer = bytearray(length)  # a new object: views of the old one may be alive
        return self._buffer

    def _deliver(self, record: memoryview, items: list[ReadItem], planner: LoadPlanner) -> None:
        """Deserialize one record and hand it to each item that reads from it."""
        info = self.storage_data[items[0].storage_index]
        if info.transform_descriptors:  # not written by our writer; DCP's own path
            stream = self.transforms.transform_load_stream(
                items[0], info.transform_descriptors, io.BytesIO(bytes(record)))
            record = memoryview(stream.read())
        for item in items:
            if item.type == LoadItemType.BYTE_IO:
                planner.load_bytes(item, io.BytesIO(bytes(record)))
        tensors = [item for item in items if item.type != LoadItemType.BYTE_IO]
        if not tensors:
            return
        saved = tensor_of(record)
        for item in tensors:
            piece = narrow_tensor_by_index(saved, item.storage_offsets, item.lengths)
            target = planner.resolve_tensor(item).detach()
            if target.size() != piece.size():
                raise AssertionError(f"{item.storage_index}: size {piece.size()} in the "
                                     f"checkpoint, {target.size()} in the state")
            copy_into(target, piece)
            planner.commit_tensor(item, target)

    def _mismatch(self, name: str, actual: FileEntry | None) -> str | None:
        expected = self._expected.get(name)
        if expected is None or actual is None:
            return f"step {self._step}: file {name} is not in the manifest"
        if actual == expected:
            return None
        what = "size" if actual.size != expected.size else expected.algo
        return f"step {self._step}: file {name} {what} mismatch"


class _HashedReads:
    """Sequential reads of one file, every byte hashed in order on the
    digest's own thread (`Digest.later`) while the next bytes are read and
    delivered, and, on a local disk, the kernel asked to read a window ahead
    (`ReadAhead`). Two buffers in turn for records and two for skipped
    bytes: a buffer is read into again only once the hash of what it held is
    done."""

    def __init__(self, stream: Any, records: list[bytearray], algo: str,
                 ahead: ReadAhead | None = None) -> None:
        self._stream = stream
        self._ahead = ahead
        self.digest = Digest(algo)
        self.pos = 0
        self._records = records  # the reader's, kept between files
        self._scratch = [bytearray(_CHUNK), bytearray(_CHUNK)]
        self._turn = {"record": 0, "scratch": 0}
        self._tickets: dict[int, int | None] = {}  # id(buffer) -> its last block's ticket

    def read_record(self, length: int) -> memoryview:
        """The next `length` bytes; EOFError if the file ends first."""
        index = self._turn["record"]
        self._turn["record"] ^= 1
        buffer = self._free(self._records, index)
        if len(buffer) < length:
            buffer = self._records[index] = bytearray(length)  # a new one: views of the old may live
        view = memoryview(buffer)[:length]
        self._fill(view, buffer)
        return view

    def skip(self, count: int) -> None:
        """Read (and hash) `count` bytes that nobody here needs."""
        if count < 0:
            raise EOFError  # overlapping records: not a file DCP wrote
        while count:
            n = self._skip_chunk(min(count, _CHUNK))
            if not n:
                raise EOFError
            count -= n

    def skip_to_end(self) -> None:
        while self._skip_chunk(_CHUNK):
            pass

    def _skip_chunk(self, size: int) -> int:
        index = self._turn["scratch"]
        self._turn["scratch"] ^= 1
        buffer = self._free(self._scratch, index)
        view = memoryview(buffer)[:size]
        n = self._stream.readinto(view) or 0
        if n:
            self._hash(view[:n], buffer)
        return n

    def _fill(self, view: memoryview, buffer: bytearray) -> None:
        got = 0
        while got < len(view):
            n = self._stream.readinto(view[got:]) or 0
            if not n:
                raise EOFError
            got += n
        self._hash(view, buffer)

    def _hash(self, view: memoryview, buffer: bytearray) -> None:
        self._tickets[id(buffer)] = self.digest.later(view)
        self.pos += len(view)
        if self._ahead is not None:
            self._ahead.advance(self.pos)

    def _free(self, buffers: list[bytearray], index: int) -> bytearray:
        buffer = buffers[index]
        self.digest.wait(self._tickets.pop(id(buffer), None))
        return buffer
