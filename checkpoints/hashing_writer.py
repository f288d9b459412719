"""DCP's fsspec writer, with every file's BLAKE3 digest counted as it is written.

`HashingWriter` is `FsspecWriter` (the same files, bytes and commit of
`.metadata`), but each file it writes passes through a `HashingStream`: when
the file closes, its size and digest are in `digests`, keyed by the file's
name in the step directory. The manifest takes them from there, so a save
reads none of its files back.

torch.save's zip records carry a crc32 of every tensor, which costs a third
of the serialization and protects nothing here: torch.load does not check it
(a flipped byte loads silently), and the manifest's digest covers every byte.
The writer turns it off for its own writes (`_no_crc32`).
"""

from __future__ import annotations

import contextlib
import io
import os
import threading
from collections.abc import Generator, Iterator
from typing import Any, cast

import torch
from torch.distributed.checkpoint._fsspec_filesystem import FileSystem, FsspecWriter

from checkpoints import layout
from checkpoints.digest import Digest, byte_view
from checkpoints.manifest import CHECKPOINT_DIGEST, FileEntry

# Writes below this are gathered into one (see HashingStream).
SMALL_WRITE_BYTES = 64 << 10

_crc_lock = threading.Lock()
_crc_off = 0  # writers inside _no_crc32 now
_crc_before = True  # the setting they found


class HashingStream(io.RawIOBase):
    """A write stream that hashes what goes through it, in order, on a thread
    of its own (`Digest.later`): the digest of one tensor overlaps the
    serialization and write of the next, and the file's fsync.

    A large block is hashed from the caller's memory after `write` returns:
    torch.save hands the zip writer a view of the tensor's own storage, and
    DCP keeps every tensor of a file alive until the file is closed (its
    `_write_files_from_queue` holds them in `tensor_dict`), by which time the
    digest is complete (`close`). The tests check every digest against the
    file's bytes on storage.

    Small writes (a record's zip headers and pickle: ~36 of 1-2,000 bytes per
    tensor) are gathered and go to the file, and to the digest, together,
    before the next large one and before anything that looks at the file
    (`tell`, `flush`, `fileno`, `close`): one write, not dozens.
    """

    def __init__(self, raw: Any) -> None:
        super().__init__()
        self._raw = raw
        self.digest = Digest(CHECKPOINT_DIGEST)
        self._small = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = byte_view(data)
        if view.nbytes < SMALL_WRITE_BYTES:
            self._small += view
            if len(self._small) >= SMALL_WRITE_BYTES:
                self._write_small()
            return view.nbytes
        self._write_small()
        self._write_through(view)
        return view.nbytes

    def _write_small(self) -> None:
        if self._small:
            small, self._small = self._small, bytearray()
            self._write_through(memoryview(small))

    def _write_through(self, view: memoryview) -> None:
        written = self._raw.write(view)
        if written is not None and written != view.nbytes:
            raise OSError(f"short write: {written} of {view.nbytes} bytes")
        self.digest.later(view)

    def entry(self) -> FileEntry:
        """The file's size and digest, once every block written is in the file and hashed."""
        self._write_small()
        return self.digest.entry()

    def tell(self) -> int:
        return int(self._raw.tell()) + len(self._small)

    def fileno(self) -> int:
        self.flush()  # what an fsync of the descriptor is meant to cover is in the file
        return int(self._raw.fileno())

    def flush(self) -> None:
        self._write_small()
        self._raw.flush()

    def close(self) -> None:
        if not self.closed:
            try:
                self.entry()  # the tensors it reads from are alive until this returns
            finally:
                self.digest.close()
                super().close()  # flushes the raw stream first
                self._raw.close()


class _HashingFileSystem(FileSystem):
    """DCP's fsspec filesystem, recording the digest of each file written whole."""

    def __init__(self, fs: Any) -> None:
        super().__init__()
        self.fs = fs
        self.digests: dict[str, FileEntry] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def create_stream(self, path: str | os.PathLike, mode: str) -> Generator[io.IOBase, None, None]:
        if "w" not in mode:
            with super().create_stream(path, mode) as stream:
                yield stream
            return
        with super().create_stream(path, mode) as stream:
            hashing = HashingStream(stream)
            try:
                yield hashing
                entry = hashing.entry()
            finally:
                hashing.close()
        # Reached only when the file was written without error, and closed.
        with self._lock:
            self.digests[layout.basename(os.fspath(path))] = entry

    def rename(self, path: str | os.PathLike, new_path: str | os.PathLike) -> None:
        super().rename(path, new_path)
        with self._lock:  # DCP's commit of `.metadata`: the same bytes under the new name
            entry = self.digests.pop(layout.basename(os.fspath(path)), None)
            if entry is not None:
                self.digests[layout.basename(os.fspath(new_path))] = entry

    def rm_file(self, path: str | os.PathLike) -> None:
        super().rm_file(path)
        with self._lock:
            self.digests.pop(layout.basename(os.fspath(path)), None)


class HashingWriter(FsspecWriter):
    """`FsspecWriter` whose files' sizes and digests are known once they are written."""

    def __init__(self, path: str, **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        # The same fsspec filesystem, behind streams that hash.
        self._files = _HashingFileSystem(cast(Any, self.fs).fs)
        self.fs = cast(Any, self._files)

    @property
    def digests(self) -> dict[str, FileEntry]:
        """Name in the step directory -> size and digest, of every file this writer wrote."""
        with self._files._lock:
            return dict(self._files.digests)

    def write_data(self, plan: Any, planner: Any) -> Any:
        with _no_crc32():
            return super().write_data(plan, planner)


@contextlib.contextmanager
def _no_crc32() -> Iterator[None]:
    """torch.save without its crc32 while any writer is inside (a process-wide
    setting: restored when the last one leaves)."""
    global _crc_off, _crc_before
    with _crc_lock:
        if _crc_off == 0:
            _crc_before = torch.serialization.get_crc32_options()
            torch.serialization.set_crc32_options(False)
        _crc_off += 1
    try:
        yield
    finally:
        with _crc_lock:
            _crc_off -= 1
            if _crc_off == 0:
                torch.serialization.set_crc32_options(_crc_before)
