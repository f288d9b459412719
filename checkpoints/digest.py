"""A file's size and digest, counted as its bytes go by: the manifest's
checksums come from the save's own writes and a load's own reads, never from
a second pass over the files.

The algorithm is the manifest entry's (`FileEntry.algo`): BLAKE3 for a
checkpoint's files, sha256 for an export's and for checkpoints written
before BLAKE3. Measured here on a 64 MiB buffer (2 cores, AVX-512): sha256
1.7-1.8 GB/s, blake2b 0.8-0.9 GB/s, BLAKE3 3.9-4.7 GB/s on one thread (7.2-7.5
GB/s with its own threads, `max_threads`). A digest runs on one thread: the
other core is busy with the writer or reader it runs beside (or, at world
size 2, with the other rank).

`hashlib` and `blake3` release the GIL on large buffers (two threads hash at
twice one's rate), and so do file reads and writes, so the digest runs on
another core while the caller's I/O goes on: `Digest.beside` hashes a block
while the caller's I/O of that block runs; `Digest.later` queues a block on
the digest's own thread and returns at once, so the hashing also overlaps
what the caller does next (serializing the next tensor, an fsync). On a
machine with a spare core the digest then costs no wall time while the I/O
is the slower of the two.
"""

from __future__ import annotations

import functools
import hashlib
import queue
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, BinaryIO, TypeVar

import blake3

from checkpoints.manifest import DIGEST_ALGOS, FileEntry

T = TypeVar("T")

# Below this a thread hand-off costs more than hashing inline (~1 ms per MiB).
BESIDE_MIN_BYTES = 1 << 20
# `later`'s small blocks (a record's zip headers, its pickle: ~36 writes of 1-2,000 bytes each
# per tensor) are queued for the digest's thread together once they add up to this: one
# hand-off, not one per write.
SMALL_BATCH_BYTES = 256 << 10
_READ_CHUNK = 8 << 20


def new_hash(algo: str) -> Any:
    """A fresh hash object of `algo` (one of `DIGEST_ALGOS`), with `update` and `hexdigest`."""
    if algo == "blake3":
        return blake3.blake3()  # one thread (see above)
    if algo == "sha256":
        return hashlib.sha256()
    raise ValueError(f"digest algorithm {algo!r} is not one of {', '.join(DIGEST_ALGOS)}")


def entry_of(data: bytes | bytearray | memoryview, algo: str) -> FileEntry:
    """The size and digest of bytes held whole."""
    digest = Digest(algo)
    digest.update(data)
    return digest.entry()


def entry_of_stream(stream: BinaryIO, algo: str) -> FileEntry:
    """The size and digest of what `stream` reads to its end."""
    digest = Digest(algo)
    while chunk := stream.read(_READ_CHUNK):
        digest.update(chunk)
    return digest.entry()


@functools.cache
def _hasher() -> ThreadPoolExecutor:
    # Started on first use, not at import. Several workers: DCP's writer
    # threads, or a reader, may each hash a file of their own at once; each
    # Digest waits for its block before the next, so one file's order holds.
    return ThreadPoolExecutor(4, thread_name_prefix="checkpoint-digest")


class Digest:
    """Digest (of `algo`) and size of bytes fed to it in file order."""

    def __init__(self, algo: str) -> None:
        self.algo = algo
        self._hash = new_hash(algo)
        self.size = 0
        self._lane: _Lane | None = None  # the thread `later` queues blocks on
        self._small = bytearray()  # small blocks for the lane, queued together once they add up

    def update(self, data: bytes | bytearray | memoryview) -> None:
        view = byte_view(data)
        self._hash.update(view)
        self.size += view.nbytes

    def beside(self, data: bytes | bytearray | memoryview, io: Callable[[], T]) -> T:
        """Hash `data` while `io()` runs (it must leave `data` as it is); `io`'s result."""
        view = byte_view(data)
        if view.nbytes < BESIDE_MIN_BYTES:
            self.update(view)
            return io()
        hashed = _hasher().submit(self._hash.update, view)
        try:
            return io()
        finally:
            hashed.result()
            self.size += view.nbytes

    def later(self, data: bytes | bytearray | memoryview) -> int | None:
        """Hash `data` after the blocks before it, on the digest's own thread;
        returns at once. The caller must leave a large `data` as it is until
        `wait()` on what this returns (or `entry()`); a small one is copied
        (None is returned: nothing to wait for)."""
        view = byte_view(data)
        if self._lane is None:
            if view.nbytes < BESIDE_MIN_BYTES:
                self.update(view)
                return None
            self._lane = _Lane(self._hash)
        self.size += view.nbytes
        if view.nbytes < BESIDE_MIN_BYTES:
            self._small += view  # copied: the caller may reuse its memory at once
            if len(self._small) >= SMALL_BATCH_BYTES:
                self._queue_small()
            return None
        self._queue_small()
        return self._lane.put(view)

    def _queue_small(self) -> None:
        if self._small and self._lane is not None:
            self._lane.put(self._small)  # the lane's now: a fresh one takes the next
            self._small = bytearray()

    def wait(self, ticket: int | None) -> None:
        """Until the block `later` gave this ticket for is hashed (its memory free again)."""
        if ticket is not None and self._lane is not None:
            self._lane.drain(ticket)

    def entry(self) -> FileEntry:
        """The size and digest of everything fed so far (waits for `later`'s blocks)."""
        if self._lane is not None:
            self._queue_small()
            self._lane.drain()
        return FileEntry(size=self.size, algo=self.algo, digest=self._hash.hexdigest())

    def close(self) -> None:
        if self._lane is not None:
            self._lane.close()
            self._lane = None


class _Lane:
    """One digest's blocks, hashed in order on a thread of its own."""

    def __init__(self, hash_: Any) -> None:
        self._hash = hash_
        self._blocks: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._idle = threading.Condition()
        self._queued = 0  # blocks put, and hashed: the tickets
        self._hashed = 0
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="checkpoint-digest", daemon=True)
        self._thread.start()

    def put(self, block: Any) -> int:
        with self._idle:
            self._queued += 1
            ticket = self._queued
        self._blocks.put(block)
        return ticket

    def drain(self, ticket: int | None = None) -> None:
        """Until every block so far (or the one with `ticket`, and those before it) is hashed."""
        with self._idle:
            upto = self._queued if ticket is None else ticket
            self._idle.wait_for(lambda: self._hashed >= upto)
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        self._blocks.put(None)
        self._thread.join()

    def _run(self) -> None:
        while (block := self._blocks.get()) is not None:
            try:
                if self._error is None:
                    self._hash.update(block)
            except BaseException as exc:  # raised to the caller by drain()
                self._error = exc
            finally:
                with self._idle:
                    self._hashed += 1
                    self._idle.notify_all()


def byte_view(data: bytes | bytearray | memoryview) -> memoryview:
    """`data` as a flat view of bytes (no copy)."""
    view = memoryview(data)
    return view if view.ndim == 1 and view.itemsize == 1 else view.cast("B")
