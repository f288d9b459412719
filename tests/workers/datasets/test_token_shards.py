"""Token shards: sample i is a window of seq_len + 1 ids at a position that
depends on (seed, i) only, read as one ranged read; the same samples at any
world size and through the read-ahead; a held-out tail kept apart."""

from __future__ import annotations

import fsspec
import numpy as np
import pytest

from workers.engine.data import RankBatches
from workers.datasets.index import read_index
from workers.datasets.token_shards import TokenShardSource, split_windows
from workers.engine.prefetch import BatchPrefetch

SEQ = 16


class CountingReads(TokenShardSource):
    """A source that records each read's length (the real reads, not a stand-in)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.reads: list[int] = []

    def _read(self, shard, offset, length):
        self.reads.append(length)
        return super()._read(shard, offset, length)


def all_ids(prefix, index):
    fs, root = fsspec.core.url_to_fs(prefix)
    return [np.frombuffer(fs.cat_file(f"{root}/{s.file}"), dtype="<u2") for s in index.shards]


def test_a_sample_is_the_window_its_seed_and_index_name(dataset):
    prefix, index = dataset
    assert len(index.shards) > 3 and index.dtype == "uint16"
    shards = all_ids(prefix, index)
    source = CountingReads(prefix, seed=7, seq_len=SEQ)
    from workers.engine.data import mix64

    for i in range(50):
        shard, token = source.locate(mix64(7, i) % source.total_windows)
        assert np.array_equal(source.sample(i), shards[shard][token:token + SEQ + 1])
    assert source.reads == [(SEQ + 1) * 2] * 50  # one ranged read a window, never a shard
    assert np.array_equal(TokenShardSource(prefix, 7, SEQ).sample(3), source.sample(3))
    assert not np.array_equal(TokenShardSource(prefix, 8, SEQ).sample(3), source.sample(3))


def test_ranks_at_any_world_size_read_the_same_global_batch(dataset):
    prefix, _ = dataset
    source = TokenShardSource(prefix, 0, SEQ)

    def global_batches(world):
        ranks = [RankBatches(source, 6, r, world) for r in range(world)]
        return [np.concatenate([b.next_batch()[0].numpy() for b in ranks]) for _ in range(3)]

    one = global_batches(1)
    for world in (2, 3):
        assert all(np.array_equal(a, b) for a, b in zip(one, global_batches(world), strict=True))


def test_read_ahead_hands_out_the_same_batches_and_keeps_the_cursor_exact(dataset):
    prefix, _ = dataset
    plain = RankBatches(TokenShardSource(prefix, 0, SEQ), 4, 1, 2)
    ahead = BatchPrefetch(RankBatches(TokenShardSource(prefix, 0, SEQ), 4, 1, 2))
    for _ in range(3):
        assert np.array_equal(plain.next_batch()[0], ahead.next_batch()[0])
        assert ahead.state_dict() == plain.state_dict()  # not the read-ahead batch's cursor
    resumed = BatchPrefetch(RankBatches(TokenShardSource(prefix, 0, SEQ), 4, 1, 2))
    resumed.next_batch()
    resumed.load_state_dict(plain.state_dict())  # drops what it read ahead
    assert np.array_equal(resumed.next_batch()[1], plain.next_batch()[1])
    ahead.close()
    expected = RankBatches(TokenShardSource(prefix, 0, SEQ), 4, 1, 2)
    expected.load_state_dict(ahead.state_dict())
    assert np.array_equal(ahead.next_batch()[0], expected.next_batch()[0])  # reads on after a close
    ahead.close()
    resumed.close()


def test_the_held_out_windows_are_never_trained_on(dataset):
    prefix, _ = dataset
    source = TokenShardSource(prefix, 0, SEQ)
    train, held = split_windows(source.total_windows, 0.1, SEQ)
    assert train.first + train.count + SEQ < held.first
    assert held.first + held.count == source.total_windows
    with pytest.raises(ValueError):
        split_windows(10, 0.5, SEQ)


def test_other_fsspec_schemes_read_ranges_too(dataset):
    prefix, index = dataset
    local, root = fsspec.core.url_to_fs(prefix)
    memory = fsspec.filesystem("memory")
    for name in [*(s.file for s in index.shards), "index.json", "tokenizer.json"]:
        memory.pipe_file(f"/ds-copy/{name}", local.cat_file(f"{root}/{name}"))
    remote = CountingReads("memory://ds-copy", 3, SEQ)
    assert not remote.local
    assert read_index("memory://ds-copy") == index
    for i in range(5):
        assert np.array_equal(remote.sample(i), TokenShardSource(prefix, 3, SEQ).sample(i))
    assert remote.reads == [(SEQ + 1) * 2] * 5
