"""A file's size and sha256, counted as its bytes go by: the manifest's
checksums come from the save's own writes and a load's own reads, never from
a second pass over the files.

`hashlib` releases the GIL on large buffers, and so do file reads and
writes: a large block is hashed on a helper thread while the caller's I/O of
that block runs (`Digest.beside`), so on a machine with a spare core the
sha256 costs no wall time while the I/O is the slower of the two.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from checkpoints.manifest import FileEntry

T = TypeVar("T")

# Below this a thread hand-off costs more than hashing inline (~1 ms per MiB).
BESIDE_MIN_BYTES = 1 << 20


@functools.cache
def _hasher() -> ThreadPoolExecutor:
    # Started on first use, not at import. Several workers: DCP's writer
    # threads, or a reader, may each hash a file of their own at once; each
    # Digest waits for its block before the next, so one file's order holds.
    return ThreadPoolExecutor(4, thread_name_prefix="checkpoint-sha256")


class Digest:
    """sha256 and size of bytes fed to it in file order."""

    def __init__(self) -> None:
        self._sha = hashlib.sha256()
        self.size = 0

    def update(self, data: bytes | bytearray | memoryview) -> None:
        view = _flat(data)
        self._sha.update(view)
        self.size += view.nbytes

    def beside(self, data: bytes | bytearray | memoryview, io: Callable[[], T]) -> T:
        """Hash `data` while `io()` runs (it must leave `data` as it is); `io`'s result."""
        view = _flat(data)
        if view.nbytes < BESIDE_MIN_BYTES:
            self.update(view)
            return io()
        hashed = _hasher().submit(self._sha.update, view)
        try:
            return io()
        finally:
            hashed.result()
            self.size += view.nbytes

    def entry(self) -> FileEntry:
        return FileEntry(size=self.size, sha256=self._sha.hexdigest())


def _flat(data: bytes | bytearray | memoryview) -> memoryview:
    view = memoryview(data)
    return view if view.ndim == 1 and view.itemsize == 1 else view.cast("B")
