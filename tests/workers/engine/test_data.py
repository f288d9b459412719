"""Data order is a function of (seed, global sample index), never world size."""

import numpy as np
import pytest
import torch

from workers.cluster.errors import permanent_cause
from workers.datasets.errors import DataError
from workers.schema import DataSpec, ModelSpec
from workers.engine.data import RankBatches, build_source, builtin_corpus

MODEL = ModelSpec(seq_len=16)


def global_batches(source, global_batch, world_size, steps):
    ranks = [RankBatches(source, global_batch, r, world_size) for r in range(world_size)]
    out = []
    for _ in range(steps):
        parts = [rb.next_batch() for rb in ranks]
        out.append((torch.cat([x for x, _ in parts]), torch.cat([y for _, y in parts])))
    return out


@pytest.mark.parametrize("source", ["synthetic", "builtin"])
def test_the_global_batch_is_the_same_at_every_world_size(source):
    src = build_source(DataSpec(source=source), MODEL, seed=3)
    for batch, worlds in ((12, (2, 3, 4, 5, 7, 12)), (8, (3, 5, 6))):
        reference = global_batches(src, batch, 1, 3)
        for world in worlds:  # uneven splits too
            for (x, y), (rx, ry) in zip(global_batches(src, batch, world, 3), reference):
                assert torch.equal(x, rx) and torch.equal(y, ry)


def test_each_rank_takes_a_contiguous_range_as_even_as_it_goes():
    src = build_source(DataSpec(source="synthetic"), MODEL, seed=0)
    shares = [RankBatches(src, 8, r, 3).share() for r in range(3)]
    assert shares == [range(0, 3), range(3, 6), range(6, 8)]
    rank2 = RankBatches(src, 8, 2, 3)
    rank2.load_state_dict({"next_sample": 16})  # step 3's samples 16..23
    x, _ = rank2.next_batch()
    assert torch.equal(x, torch.from_numpy(np.stack([src.sample(22), src.sample(23)]))[:, :-1])
    assert rank2.state_dict() == {"next_sample": 24}


def test_targets_are_inputs_shifted_by_one():
    x, y = RankBatches(build_source(DataSpec(), MODEL, seed=0), 4, 0, 1).next_batch()
    assert x.shape == (4, 16) and torch.equal(x[:, 1:], y[:, :-1])


def test_the_cursor_resumes_the_exact_order_at_another_world_size():
    src = build_source(DataSpec(source="builtin"), MODEL, seed=0)
    straight = global_batches(src, 8, 2, 5)
    first = [RankBatches(src, 8, r, 2) for r in range(2)]
    for _ in range(2):
        for rb in first:
            rb.next_batch()
    cursor = first[0].state_dict()
    resumed = [RankBatches(src, 8, r, 3) for r in range(3)]  # 8 over 3: 3, 3, 2
    for rb in resumed:
        rb.load_state_dict(cursor)
    x = torch.cat([rb.next_batch()[0] for rb in resumed])
    assert torch.equal(x, straight[2][0])


def test_seeds_change_the_order():
    a = build_source(DataSpec(source="builtin"), MODEL, seed=0).sample(0)
    b = build_source(DataSpec(source="builtin"), MODEL, seed=1).sample(0)
    assert not np.array_equal(a, b)


def test_builtin_corpus_is_the_stdlib_source():
    corpus = builtin_corpus()
    assert len(corpus) == 1 << 20
    assert b"def " in corpus[:200_000].tobytes()


def test_file_source_reads_through_fsspec(tmp_path):
    path = tmp_path / "text.txt"
    path.write_bytes(b"hello brigade " * 50)
    src = build_source(DataSpec(source="uri", uri=f"file://{path}"), MODEL, seed=0)
    assert bytes(src.sample(7).astype(np.uint8)) in (b"hello brigade " * 52)


def test_a_file_too_short_for_a_window_is_refused(tmp_path):
    path = tmp_path / "tiny.txt"
    path.write_bytes(b"abc")
    with pytest.raises(ValueError, match="too short for seq_len 16"):
        build_source(DataSpec(source="uri", uri=str(path)), MODEL, seed=0)


@pytest.mark.parametrize("make", ["missing", "folder", "short"])
def test_a_byte_file_gone_bad_since_submit_fails_the_rank_for_good_naming_it(tmp_path, make):
    """What the submit checked (workers/datasets/byte_file.py) is checked again as a rank
    reads it: a DataError naming the file, which the lifecycle fails at once, not restarted."""
    path = tmp_path / "corpus.bin"
    if make == "folder":
        path.mkdir()
    elif make == "short":
        path.write_bytes(b"abc")
    with pytest.raises(DataError) as failed:
        build_source(DataSpec(source="uri", uri=f"file://{path}"), MODEL, seed=0)
    message = f"rank 0 (pid 1, node n) failed: {type(failed.value).__name__}: {failed.value}"
    assert message.startswith(f"rank 0 (pid 1, node n) failed: DataError: file://{path}: ")
    assert permanent_cause(message) == "its data is bad: fix or replace the file named, then submit again"
