"""The save's write path, below DCP: `HashingStream` gathers small writes
into one before they reach the file and the digest, and `Digest.later`
hands small blocks to its thread together; neither changes a byte of the
file, its offsets or its digest."""

from __future__ import annotations

import io
import os
import random

import blake3

from checkpoints.digest import BESIDE_MIN_BYTES, Digest
from checkpoints.hashing_writer import SMALL_WRITE_BYTES, HashingStream


class CountingFile(io.FileIO):
    """A real file that counts the writes that reach it."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.writes = 0

    def write(self, data) -> int:  # type: ignore[override]
        self.writes += 1
        return super().write(data)


def record_like_writes(seed: int) -> list[bytes]:
    """What torch.save's zip writer hands its stream for a few tensors:
    dozens of header and pickle writes of 1-2,000 bytes around each
    tensor's bytes, and a small tensor now and then."""
    rng = random.Random(seed)
    out: list[bytes] = []
    for tensor in range(6):
        out += [rng.randbytes(rng.choice([1, 2, 8, 16, 30, 64, 500, 1800])) for _ in range(36)]
        size = (2 << 20) + tensor if tensor % 3 else 100_000  # large, or small enough to gather
        out.append(rng.randbytes(size))
    out += [rng.randbytes(22) for _ in range(5)]  # the zip's directory, at the end
    return out


def test_small_writes_are_gathered_and_the_file_is_what_was_written(tmp_path):
    path = tmp_path / "shard.distcp"
    writes = record_like_writes(seed=1)
    raw = CountingFile(path, "wb")
    stream = HashingStream(raw)
    offset = 0
    for data in writes:
        assert stream.tell() == offset  # DCP takes each record's offset from here
        assert stream.write(memoryview(data)) == len(data)
        offset += len(data)
    assert stream.tell() == offset
    entry = stream.entry()
    stream.close()

    on_disk = path.read_bytes()
    assert on_disk == b"".join(writes)
    assert (entry.size, entry.digest) == (len(on_disk), blake3.blake3(on_disk).hexdigest())
    large = sum(len(d) >= SMALL_WRITE_BYTES for d in writes)
    assert len(writes) > 200
    assert raw.writes <= 2 * large + 2, f"{raw.writes} writes reached the file for {len(writes)}"


def test_what_is_written_is_in_the_file_before_its_descriptor_is_synced(tmp_path):
    """DCP fsyncs `stream.fileno()`: the gathered bytes must be in the file by then."""
    path = tmp_path / "shard.distcp"
    with open(path, "wb") as raw:
        stream = HashingStream(raw)
        stream.write(b"PK\x03\x04header")
        stream.write(b"pickle")
        os.fsync(stream.fileno())
        assert path.read_bytes() == b"PK\x03\x04headerpickle"
        stream.close()


def test_small_blocks_reach_the_digest_in_order_and_together():
    rng = random.Random(2)
    blocks = []
    for _ in range(4):
        blocks.append(rng.randbytes(BESIDE_MIN_BYTES + 7))  # starts the digest's thread
        blocks += [rng.randbytes(rng.randint(1, 2000)) for _ in range(300)]
    digest = Digest("blake3")
    for block in blocks:
        digest.later(block)
    entry = digest.entry()
    handed = digest._lane._queued if digest._lane else 0
    digest.close()
    whole = b"".join(blocks)
    assert (entry.size, entry.digest) == (len(whole), blake3.blake3(whole).hexdigest())
    assert handed <= 4 * 2 + 8, f"{handed} hand-offs to the digest's thread for {len(blocks)} blocks"
