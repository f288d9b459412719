"""ReadAhead: the kernel asked to read a local file a window past its
consumer, a chunk at a time, and no further; nothing for a stream without a
file descriptor. Residency is read with util-linux's `fincore` (as
bench/checkpoint.py does)."""

from __future__ import annotations

import io
import os
import shutil
import subprocess

import fsspec

from checkpoints.read_ahead import ReadAhead
from tests.ci import skip_or_fail
from tests.waiting import wait_until

MB = 1 << 20


def resident_bytes(path) -> int:
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


def evicted(path):
    """`path` written and then dropped from the page cache."""
    with open(path, "wb") as f:
        f.write(os.urandom(24 * MB))
        f.flush()
        os.fsync(f.fileno())
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return path


def test_it_asks_a_window_past_the_consumer_a_chunk_at_a_time(tmp_path):
    path = tmp_path / "shard"
    path.write_bytes(b"x")
    with open(path, "rb") as f:
        ahead = ReadAhead(f.fileno(), window=30 * MB, chunk=10 * MB)
        assert ahead.asked == 30 * MB
        ahead.advance(5 * MB)
        assert ahead.asked == 30 * MB  # less than a chunk more: not asked yet
        ahead.advance(10 * MB)
        assert ahead.asked == 40 * MB


def test_the_pages_ahead_of_the_consumer_reach_the_page_cache_and_no_further(tmp_path):
    if not shutil.which("fincore"):  # CI installs it (.ci/run): there it fails instead
        skip_or_fail("util-linux fincore is not installed")
    path = evicted(tmp_path / "shard")
    assert resident_bytes(path) == 0, "could not evict the file: the test proves nothing here"
    with open(path, "rb", buffering=0) as f:
        ahead = ReadAhead.of(f, window=8 * MB, chunk=4 * MB)
        assert ahead is not None
        assert wait_until(lambda: resident_bytes(path) >= 8 * MB, 10)
        assert resident_bytes(path) < 16 * MB  # the window, not the whole file
        f.seek(8 * MB)
        ahead.advance(8 * MB)
        assert wait_until(lambda: resident_bytes(path) >= 16 * MB, 10)


def test_a_stream_without_a_descriptor_is_not_read_ahead():
    assert ReadAhead.of(io.BytesIO(b"abc")) is None
    fs = fsspec.filesystem("memory")
    fs.pipe("/read-ahead/shard", b"abc")
    with fs.open("/read-ahead/shard", "rb") as stream:
        assert ReadAhead.of(stream) is None


def test_a_local_fsspec_stream_is_read_ahead(tmp_path):
    path = tmp_path / "shard"
    path.write_bytes(b"x")
    fs, _ = fsspec.core.url_to_fs(f"file://{path}")
    with fs.open(str(path), "rb") as stream:
        ahead = ReadAhead.of(stream, window=4 * MB, chunk=MB)
        assert ahead is not None and ahead.asked == 4 * MB
