"""Samples of a prepared token dataset (`workers.datasets.index`), read as
ranged reads of its shards: one window of seq_len + 1 tokens is one read of
(seq_len + 1) x itemsize bytes at its offset (`os.pread` on a local file,
one ranged GET elsewhere), never a whole shard. What a rank holds is the
index's window counts (one integer a shard) and the open file descriptors,
whatever the corpus's size.

Windows lie inside one shard: shard k of n tokens has n - seq_len of them,
starting at every token. Sample i is window `first + mix64(seed, i) % count`
of the dataset's windows in order, a function of (seed, i) only, so the
order is the same at any world size and a cursor resumes it exactly. A
holdout takes the last windows (`split_windows`).
"""

from __future__ import annotations

import bisect
import os
import threading
from dataclasses import dataclass

import numpy as np

from workers.datasets.errors import DataError
from workers.datasets.index import DatasetIndex, join, read_index
from workers.datasets.order import mix64


@dataclass(frozen=True)
class WindowRange:
    """The windows a source draws from: `count` of them from `first`."""

    first: int
    count: int


def window_counts(index: DatasetIndex, seq_len: int) -> list[int]:
    return [max(0, s.tokens - seq_len) for s in index.shards]


def split_windows(total: int, holdout_fraction: float, seq_len: int) -> tuple[WindowRange, WindowRange]:
    """(train, held out): the held-out windows are the last `holdout_fraction`
    of them, and a gap of seq_len + 1 windows keeps their tokens apart."""
    held = max(1, int(total * holdout_fraction))
    train = total - held - (seq_len + 1)
    if train < 1:
        raise ValueError(f"{total} windows are too few to hold out {holdout_fraction:g} of them")
    return WindowRange(0, train), WindowRange(total - held, held)


class TokenShardSource:
    """Sample `index` of a token dataset: seq_len + 1 token ids (int64)."""

    def __init__(self, prefix: str, seed: int, seq_len: int, *, index: DatasetIndex | None = None,
                 windows: WindowRange | None = None, storage_options: dict | None = None):
        import fsspec

        self._mix = mix64  # the data order (workers.datasets.order)
        self.prefix, self.seed, self.seq_len = prefix, seed, seq_len
        self.index = index or read_index(prefix, storage_options)
        self.fs, self.root = fsspec.core.url_to_fs(prefix.rstrip("/"), **(storage_options or {}))
        self.local = "file" in _protocols(self.fs)
        counts = window_counts(self.index, seq_len)
        self.ends = list(np.cumsum(counts, dtype=np.int64).tolist())  # one integer a shard
        total = self.ends[-1]
        if total < 1:
            longest = max(s.tokens for s in self.index.shards)
            raise DataError(join(prefix, self.index.shards[0].file),
                            f"no shard of the dataset holds seq_len + 1 = {seq_len + 1} tokens "
                            f"(the longest has {longest})")
        self.windows = windows or WindowRange(0, total)
        self.dtype = np.dtype("<u2" if self.index.itemsize == 2 else "<u4")
        self._fds: dict[int, int] = {}
        self._lock = threading.Lock()

    @property
    def total_windows(self) -> int:
        return self.ends[-1]

    def locate(self, window: int) -> tuple[int, int]:
        """(shard number, first token) of a window."""
        shard = bisect.bisect_right(self.ends, window)
        start = self.ends[shard - 1] if shard else 0
        return shard, window - start

    def sample(self, index: int) -> np.ndarray:
        window = self.windows.first + self._mix(self.seed, index) % self.windows.count
        shard, token = self.locate(window)
        itemsize = self.dtype.itemsize
        blob = self._read(shard, token * itemsize, (self.seq_len + 1) * itemsize)
        ids = np.frombuffer(blob, dtype=self.dtype)
        if len(ids) != self.seq_len + 1:
            raise DataError(self._uri(shard), f"short read at token {token}: the shard is "
                                              "shorter than its index says")
        top = int(ids.max())
        if top >= self.index.vocab_size:
            at = token + int(np.argmax(ids >= self.index.vocab_size))
            raise DataError(self._uri(shard), f"token id {top} at token {at} is >= the "
                                              f"vocabulary size {self.index.vocab_size}")
        return ids.astype(np.int64)

    def _uri(self, shard: int) -> str:
        return join(self.prefix, self.index.shards[shard].file)

    def _path(self, shard: int) -> str:
        return f"{self.root}/{self.index.shards[shard].file}"

    def _read(self, shard: int, offset: int, length: int) -> bytes:
        try:
            if self.local:
                return os.pread(self._fd(shard), length, offset)
            return self.fs.cat_file(self._path(shard), start=offset, end=offset + length)
        except FileNotFoundError:
            raise DataError(self._uri(shard), "shard missing") from None

    def _fd(self, shard: int) -> int:
        with self._lock:  # the loader's thread and the evaluation may both read
            fd = self._fds.get(shard)
            if fd is None:
                fd = self._fds[shard] = os.open(self._path(shard), os.O_RDONLY)
            return fd

    def close(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()

    def __del__(self) -> None:
        self.close()


def _protocols(fs) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)
