"""Hash while writing, verify while reading: the manifest's digests are the
BLAKE3 of the files on storage, counted by the save's own writes; a flipped
byte anywhere in any file is caught by the load that reads it; a step
written before BLAKE3 (manifest format 1, sha256) still loads, and is
checked as strictly; and a record read back as a view of its bytes is the
tensor torch.save wrote. On memory://, file:// and S3 (moto)."""

from __future__ import annotations

import hashlib
import io
import json

import blake3
import pytest
import torch
from ckpt_harness import SECRET, flip_byte

from checkpoints import CheckpointInvalid, CheckpointStore
from checkpoints.manifest import sign
from checkpoints.dcp_records import copy_into, tensor_of

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def big_state(value: float) -> dict:
    """Tensors past the hashing thread's threshold (1 MiB) and small ones, a
    bfloat16 one, and a plain value (a pickled record of its own)."""
    generator = torch.Generator().manual_seed(int(value))
    return {
        "model": {
            "embed": torch.randn(600, 1024, generator=generator) + value,  # 2.4 MB
            "w": torch.randn(300, 1000, generator=generator).to(torch.bfloat16),
            "b": torch.arange(7.0) + value,
        },
        "optim": {"exp_avg": torch.full((512, 1024), value)},  # 2 MB
        "cursor": int(value),
    }


def blank_big() -> dict:
    return {
        "model": {"embed": torch.zeros(600, 1024), "w": torch.zeros(300, 1000, dtype=torch.bfloat16),
                  "b": torch.zeros(7)},
        "optim": {"exp_avg": torch.zeros(512, 1024)},
        "cursor": -1,
    }


def assert_state_equal(got: dict, expected: dict) -> None:
    for group in ("model", "optim"):
        for key, tensor in expected[group].items():
            assert torch.equal(got[group][key], tensor), f"{group}.{key} differs"
    assert got["cursor"] == expected["cursor"]


def saved_big(checkpointer, *steps: int) -> None:
    for step in steps:
        checkpointer.save(step, big_state(float(step)))
    checkpointer.wait()


def test_manifest_digests_are_the_blake3_of_the_files_on_storage(make_checkpointer):
    checkpointer = make_checkpointer()
    checkpointer.save(1, big_state(1.0))
    checkpointer.async_save(2, big_state(2.0))
    checkpointer.wait()
    store = checkpointer.store
    for step in (1, 2):
        manifest = store.read_manifest(step)
        assert sorted(manifest.files) == [".metadata", "__0_0.distcp"]
        for name, entry in manifest.files.items():
            data = store.fs.cat_file(store.layout.file(step, name))
            assert entry.size == len(data) > 0
            assert (entry.algo, entry.digest) == ("blake3", blake3.blake3(data).hexdigest()), \
                f"step {step} {name}"
        loaded = blank_big()
        assert checkpointer.load(loaded, step=step).step == step
        assert_state_equal(loaded, big_state(float(step)))


@pytest.mark.parametrize("where", [0, 0.3, 0.5, 0.9, -1])
@pytest.mark.parametrize("name", [".metadata", "__0_0.distcp"])
def test_a_flipped_byte_anywhere_is_caught_at_load(make_checkpointer, name, where):
    """Headers, pickles, tensor bytes, the zip's directory, the last byte:
    the load passes over the step and loads the one before, over the whole
    state (part of the bad step may have been read into it first)."""
    checkpointer = make_checkpointer()
    saved_big(checkpointer, 1, 2)
    size = checkpointer.store.read_manifest(2).files[name].size
    offset = where if isinstance(where, int) else int(size * where)
    flip_byte(checkpointer.store, 2, name, offset=offset)
    loaded = blank_big()
    result = checkpointer.load(loaded)
    assert result.step == 1
    assert [(r.step, r.reason) for r in result.skipped] == [(2, f"step 2: file {name} blake3 mismatch")]
    assert_state_equal(loaded, big_state(1.0))


def test_a_corrupt_only_step_raises_rather_than_a_fresh_start(make_checkpointer):
    """Its shard was read, in part, into the state: a None (fresh start) would
    train from that. A corrupt `.metadata` is caught before anything is
    read: then the state is untouched, and nothing loads."""
    checkpointer = make_checkpointer()
    saved_big(checkpointer, 1)
    flip_byte(checkpointer.store, 1, "__0_0.distcp", offset=4 << 20)
    with pytest.raises(CheckpointInvalid, match="blake3 mismatch.*partly overwritten"):
        checkpointer.load(blank_big())

    other = make_checkpointer(job="j2")
    saved_big(other, 1)
    flip_byte(other.store, 1, ".metadata", offset=0)
    untouched = blank_big()
    assert other.load(untouched) is None
    assert_state_equal(untouched, blank_big())


def as_written_before_blake3(store: CheckpointStore, step: int) -> None:
    """Rewrite the step's manifest as the code before BLAKE3 wrote it: format
    1, each file's entry its size and the sha256 of its bytes, signed."""
    path = store.layout.manifest(step)
    body = json.loads(store.fs.cat_file(path))
    del body["hmac"]
    files = {}
    for name, entry in body["files"].items():
        data = store.fs.cat_file(store.layout.file(step, name))
        assert entry["size"] == len(data)
        files[name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    body |= {"format": 1, "files": files}
    signed = dict(body, hmac=sign(body, SECRET))
    store.fs.pipe_file(path, json.dumps(signed, sort_keys=True, indent=1).encode())


@pytest.mark.parametrize("name", [".metadata", "__0_0.distcp"])
@pytest.mark.parametrize("algo", ["blake3", "sha256"])
def test_either_digest_loads_and_catches_a_flipped_byte(make_checkpointer, algo, name):
    """A step written with BLAKE3 (now) or with sha256 (before, format 1):
    it verifies and loads; a flipped byte fails the check of the algorithm
    its manifest names, at load and in `verify_files` (the export's)."""
    checkpointer = make_checkpointer()
    saved_big(checkpointer, 1, 2)
    store = checkpointer.store
    if algo == "sha256":
        for step in (1, 2):
            as_written_before_blake3(store, step)
    manifest = store.read_manifest(2)
    assert manifest.format == (1 if algo == "sha256" else 2)
    assert {entry.algo for entry in manifest.files.values()} == {algo}
    assert store.verify_files(manifest) == []
    loaded = blank_big()
    assert checkpointer.load(loaded).step == 2
    assert_state_equal(loaded, big_state(2.0))

    size = manifest.files[name].size
    flip_byte(store, 2, name, offset=size // 2)
    reason = f"step 2: file {name} {algo} mismatch"
    assert store.verify_files(manifest) == [reason]
    loaded = blank_big()
    result = checkpointer.load(loaded)
    assert result.step == 1 and [(r.step, r.reason) for r in result.skipped] == [(2, reason)]
    assert_state_equal(loaded, big_state(1.0))


@pytest.mark.parametrize("make", [
    lambda: torch.randn(3, 4),
    lambda: torch.randn(4, 3).t(),  # strided
    lambda: torch.arange(10, dtype=torch.int64)[2:7],  # an offset into its storage
    lambda: torch.randn(5).to(torch.bfloat16),
    lambda: torch.zeros(0, 3),
    lambda: torch.tensor(2.5),
    lambda: torch.tensor([True, False]),
])
def test_a_record_read_as_a_view_is_the_tensor_saved(make):
    tensor = make()
    buffer = io.BytesIO()
    torch.save(tensor, buffer)
    record = memoryview(bytearray(buffer.getvalue()))
    got = tensor_of(record)
    again = tensor_of(record)  # its pickle seen before: rebuilt from the cached layout
    for view in (got, again):
        assert view.dtype == tensor.dtype and view.stride() == tensor.stride()
        assert torch.equal(view, tensor)
    record[:] = bytes(len(record))  # zeroing the record's bytes zeroes the tensor: a view, no copy
    assert not got.any() and not again.any()
    target = torch.empty_like(tensor)
    copy_into(target, torch.load(io.BytesIO(buffer.getvalue()), weights_only=True))
    assert torch.equal(target, tensor)
