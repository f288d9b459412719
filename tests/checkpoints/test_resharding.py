"""Save a sharded FSDP2 model and its AdamW state at world size 2 (one step
synchronously, one asynchronously while training goes on), load it at world
sizes 1 and 3: every parameter and optimizer state is bitwise equal. On a
local directory and on S3 (moto), with real gloo process groups."""

from __future__ import annotations

import pytest
from ckpt_harness import (
    SECRET,
    flip_byte,
    load_and_compare,
    load_falls_back_past_a_corrupt_shard,
    run_ranks,
    save_sync_then_async,
)

from checkpoints import CheckpointStore

TENANT, JOB = "acme", "reshard"


@pytest.fixture(scope="module", params=["file", "s3"])
def saved_at_ws2(request, tmp_path_factory):
    """(store kwargs, path of the expected full state) after a ws=2 save."""
    if request.param == "s3":
        bucket, options = request.getfixturevalue("s3_bucket"), request.getfixturevalue("moto_s3")
        kwargs = {"root": f"s3://{bucket}/reshard", "storage_options": options}
    else:
        kwargs = {"root": f"file://{tmp_path_factory.mktemp('storage')}"}
    kwargs.update(tenant=TENANT, job=JOB)
    store = CheckpointStore(secret=SECRET, **kwargs)
    assert store.list_committed() == []  # a listing before the ranks write must not go stale
    expected = str(tmp_path_factory.mktemp("expected") / "expected.pt")
    run_ranks(save_sync_then_async, 2, kwargs, expected)
    return kwargs, expected


def test_save_at_ws2_commits_two_steps(saved_at_ws2):
    kwargs, _ = saved_at_ws2
    store = CheckpointStore(secret=SECRET, **kwargs)
    committed = store.list_committed()
    assert [(c.step, c.world_size) for c in committed] == [(1, 2), (2, 2)]
    manifest = store.read_manifest(2)
    assert sorted(manifest.files) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    assert manifest.extra == {"cursor": 200, "world_size": 2}
    assert committed[1].bytes == manifest.total_bytes > 0
    assert store.verify_files(manifest) == []


@pytest.mark.parametrize("world_size", [1, 3])
def test_load_at_another_world_size_is_bitwise_equal(saved_at_ws2, world_size):
    kwargs, expected = saved_at_ws2
    run_ranks(load_and_compare, world_size, kwargs, expected)


@pytest.mark.parametrize("world_size", [2, 3])
def test_a_flipped_byte_in_another_ranks_shard_is_caught_at_any_world_size(saved_at_ws2, world_size):
    """The file is verified by the one rank that reads most of it; the others
    learn of the mismatch through DCP and pass over the step with it."""
    kwargs, expected = saved_at_ws2
    store = CheckpointStore(secret=SECRET, **kwargs)
    middle = store.read_manifest(2).files["__1_0.distcp"].size // 2
    flip_byte(store, 2, "__1_0.distcp", offset=middle)
    try:
        run_ranks(load_falls_back_past_a_corrupt_shard, world_size, kwargs, expected)
    finally:
        flip_byte(store, 2, "__1_0.distcp", offset=middle)  # back as it was, for the other tests
