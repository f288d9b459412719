"""Asking the kernel to read a local file ahead of the one who consumes it,
so the disk works while the consumer deserializes and copies what it has
already read.

A load reads each file start to end on one thread, and between two reads it
hashes and copies into the live tensors: left alone, the disk sits idle then
(a cold load ran at a third of a raw sequential read). `ReadAhead` keeps the
kernel's read-ahead a `window` past the consumer's position with
`posix_fadvise(WILLNEED)`, one `chunk` at a time as the consumer moves: the
kernel reads those pages into the page cache in the background, where the
consumer's own reads find them. Nothing is copied into this process and no
thread of ours waits on the disk; the window bounds how far ahead the page
cache is filled (a whole file asked for at once competes with the reads the
consumer needs now).

Only for a stream with a real file descriptor (local disk); elsewhere `of`
gives None.

    ahead = ReadAhead.of(stream)       # None where the stream has no descriptor
    ...; ahead.advance(position)       # the consumer's position after each read
"""

from __future__ import annotations

import io
import os
from typing import Any

WINDOW = 32 << 20  # how far past the consumer the kernel is asked to have read
CHUNK = 4 << 20  # the smallest request: fewer, larger asks as the consumer moves


class ReadAhead:
    def __init__(self, fd: int, *, window: int = WINDOW, chunk: int = CHUNK) -> None:
        self._fd, self._window, self._chunk = fd, window, chunk
        self.asked = 0  # the file is asked for up to here
        self.advance(0)

    @classmethod
    def of(cls, stream: Any, **options: Any) -> ReadAhead | None:
        """A read-ahead of `stream`'s file, or None where it has no file descriptor
        (or the platform has no `posix_fadvise`)."""
        if not hasattr(os, "posix_fadvise"):
            return None
        try:
            fd = stream.fileno()
        except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
            return None
        return cls(fd, **options) if isinstance(fd, int) and fd >= 0 else None

    def advance(self, position: int) -> None:
        """The consumer has read up to `position`: keep the kernel a window ahead."""
        want = position + self._window
        if want - self.asked < self._chunk and self.asked:
            return
        try:
            os.posix_fadvise(self._fd, self.asked, want - self.asked, os.POSIX_FADV_WILLNEED)
        except OSError:
            return  # advice only: the consumer's own reads go on, and say any error
        self.asked = want
