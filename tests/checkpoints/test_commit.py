"""Save, commit and load in one process: the layout, the signed manifest,
refusals, and the fallback past a step that does not verify."""

from __future__ import annotations

import json
import logging

import blake3
import pytest
import torch
from ckpt_harness import blank, flip_byte, saved, state, truncate

from checkpoints import CheckpointError, CheckpointExistsError, CheckpointInvalid
from checkpoints.manifest import utc_now

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


@pytest.mark.parametrize("group", ["single process", "gloo"])
def test_save_then_load(make_checkpointer, request, group):
    if group == "gloo":
        request.getfixturevalue("gloo_group")
    checkpointer = make_checkpointer()
    manifest = checkpointer.save(3, state(3.0), extra={"cursor": 30, "rng": "AAE="})
    assert (manifest.step, manifest.world_size) == (3, 1)
    assert manifest.extra == {"cursor": 30, "rng": "AAE="}

    loaded = blank()
    result = checkpointer.load(loaded)
    assert (result.step, result.extra["cursor"], result.skipped) == (3, 30, [])
    assert torch.equal(loaded["model"]["w"], state(3.0)["model"]["w"]) and loaded["cursor"] == 3


def test_layout_and_manifest_on_storage(make_checkpointer):
    checkpointer = make_checkpointer()
    before = utc_now()
    saved(checkpointer, 7)
    store = checkpointer.store
    step_dir = store.layout.step(7)
    assert step_dir.endswith("/tenants/acme/jobs/j1/checkpoints/step-000000007")
    names = sorted(e["name"].rsplit("/", 1)[-1] for e in store.fs.ls(step_dir, detail=True))
    assert names == [".metadata", "__0_0.distcp", "manifest.json"]

    manifest = store.read_manifest(7)
    assert sorted(manifest.files) == [".metadata", "__0_0.distcp"]
    for name, entry in manifest.files.items():
        data = store.fs.cat_file(f"{step_dir}/{name}")
        expected = (len(data), "blake3", blake3.blake3(data).hexdigest())
        assert (entry.size, entry.algo, entry.digest) == expected
    assert before <= manifest.created_at <= utc_now()

    [info] = store.list_committed()
    assert (info.step, info.world_size, info.bytes) == (7, 1, manifest.total_bytes)
    assert info.created_at == manifest.created_at_datetime and info.uri == store.step_uri(7)
    assert store.latest_committed() == info


def test_no_checkpoint_loads_nothing(make_checkpointer):
    assert make_checkpointer().load(blank()) is None


def test_refuses_to_save_into_a_committed_step(make_checkpointer):
    checkpointer = make_checkpointer()
    saved(checkpointer, 1)
    manifest = checkpointer.store.read_manifest(1)
    with pytest.raises(CheckpointExistsError, match="fresh step directory"):
        checkpointer.save(1, state(9.0))
    # An async save checks the directory off the training path: the refusal
    # comes with its other errors, from wait() (or the next call).
    checkpointer.async_save(1, state(9.0))
    with pytest.raises(CheckpointExistsError, match="fresh step directory"):
        checkpointer.wait()
    checkpointer.async_save(1, state(9.0))
    with pytest.raises(CheckpointExistsError):
        checkpointer.save(2, state(2.0))
    assert checkpointer.store.read_manifest(1) == manifest
    assert checkpointer.store.steps() == [1]


def test_refuses_to_save_into_a_step_that_has_files(make_checkpointer):
    checkpointer = make_checkpointer()
    store = checkpointer.store
    store.fs.makedirs(store.layout.step(4), exist_ok=True)
    store.fs.pipe_file(store.layout.file(4, "__0_0.distcp"), b"left by a crashed save")
    with pytest.raises(CheckpointExistsError):
        checkpointer.save(4, state(4.0))
    assert store.fs.cat_file(store.layout.file(4, "__0_0.distcp")) == b"left by a crashed save"


def test_extra_that_is_not_json_writes_nothing(make_checkpointer):
    checkpointer = make_checkpointer()
    with pytest.raises(CheckpointError, match="JSON"):
        checkpointer.save(1, state(1.0), extra={"rng": torch.get_rng_state()})
    checkpointer.async_save(1, state(1.0), extra={"rng": torch.get_rng_state()})
    with pytest.raises(CheckpointError, match="JSON"):
        checkpointer.wait()
    assert checkpointer.store.steps() == []


def test_an_async_save_records_extra_as_it_was_when_called(make_checkpointer):
    checkpointer = make_checkpointer()
    extra = {"cursor": 10, "nested": {"rows": [1]}}
    checkpointer.async_save(1, state(1.0), extra=extra)
    extra["cursor"] = 11  # the train loop goes on while the save is in flight
    extra["nested"]["rows"].append(2)
    assert checkpointer.wait().extra == {"cursor": 10, "nested": {"rows": [1]}}
    assert checkpointer.store.read_manifest(1).extra == {"cursor": 10, "nested": {"rows": [1]}}


def test_flipped_byte_in_a_shard_falls_back_to_the_previous_step(make_checkpointer, caplog):
    checkpointer = make_checkpointer()
    saved(checkpointer, 1, 2)
    flip_byte(checkpointer.store, 2, "__0_0.distcp")
    # Same size: the cheap listing cannot tell; the load's checksums do.
    assert [c.step for c in checkpointer.store.list_committed()] == [1, 2]

    loaded = blank()
    with caplog.at_level(logging.WARNING, logger="checkpoints"):
        result = checkpointer.load(loaded)
    assert result.step == 1 and loaded["cursor"] == 1
    assert [(r.step, r.reason) for r in result.skipped] == [
        (2, "step 2: file __0_0.distcp blake3 mismatch")
    ]
    assert "not loading step 2: step 2: file __0_0.distcp blake3 mismatch" in caplog.text


def test_flipped_byte_in_dcp_metadata_is_caught_before_unpickling(make_checkpointer):
    checkpointer = make_checkpointer()
    saved(checkpointer, 1, 2)
    flip_byte(checkpointer.store, 2, ".metadata", offset=0)
    result = checkpointer.load(blank())
    assert result.step == 1 and "file .metadata blake3 mismatch" in result.skipped[0].reason


def test_edited_manifest_falls_back_to_the_previous_step(make_checkpointer):
    checkpointer = make_checkpointer()
    saved(checkpointer, 1, 2)
    store = checkpointer.store
    raw = json.loads(store.fs.cat_file(store.layout.manifest(2)))
    raw["extra"]["cursor"] = 0  # say, to replay data
    store.fs.pipe_file(store.layout.manifest(2), json.dumps(raw).encode())

    assert [c.step for c in store.list_committed()] == [1]
    result = checkpointer.load(blank())
    assert result.step == 1
    assert "HMAC mismatch" in result.skipped[0].reason and result.skipped[0].step == 2


def test_truncated_shard_is_not_listed(make_checkpointer):
    checkpointer = make_checkpointer()
    saved(checkpointer, 1, 2)
    truncate(checkpointer.store, 2, "__0_0.distcp")
    _, [rejection] = checkpointer.store.scan()
    assert rejection.step == 2 and "bytes, manifest says" in rejection.reason
    assert checkpointer.load(blank()).step == 1


def test_manifest_moved_to_another_step_does_not_verify(make_checkpointer):
    checkpointer = make_checkpointer()
    saved(checkpointer, 1, 2)
    store = checkpointer.store
    store.fs.pipe_file(store.layout.manifest(2), store.fs.cat_file(store.layout.manifest(1)))
    _, [rejection] = store.scan()
    assert rejection.step == 2 and "not this directory" in rejection.reason


def test_a_named_step_that_does_not_verify_raises(make_checkpointer):
    checkpointer = make_checkpointer()
    saved(checkpointer, 1, 2)
    flip_byte(checkpointer.store, 2, "__0_0.distcp")
    with pytest.raises(CheckpointInvalid, match="blake3 mismatch"):
        checkpointer.load(blank(), step=2)
    with pytest.raises(CheckpointInvalid, match="no manifest"):
        checkpointer.load(blank(), step=5)
    assert checkpointer.load(blank(), step=1).step == 1


def test_with_another_secret_nothing_is_committed_and_nothing_deleted(make_checkpointer, caplog):
    saved(make_checkpointer(), 1, 2)
    stranger = make_checkpointer(secret=b"not the service's secret")
    assert stranger.store.list_committed() == []
    assert stranger.load(blank()) is None
    with caplog.at_level(logging.WARNING, logger="checkpoints"):
        assert stranger.cleanup_uncommitted(including_newer=True) == []
    assert "is the signing secret right?" in caplog.text
    assert stranger.store.steps() == [1, 2]


def test_async_save_returns_once_staged_and_commits_on_wait(make_checkpointer):
    checkpointer = make_checkpointer()
    # 8 MiB: the write is still going on when training changes the tensors.
    live = state(1.0) | {"big": torch.zeros(2 << 20)}
    checkpointer.async_save(1, live, extra={"cursor": 10})
    assert checkpointer.in_flight == 1
    live["big"].fill_(1.0)  # training goes on
    live["model"]["w"].add_(100.0)
    assert checkpointer.wait().step == 1 and checkpointer.in_flight is None
    assert checkpointer.wait() is None

    loaded = blank() | {"big": torch.empty(2 << 20)}
    checkpointer.load(loaded)
    assert torch.equal(loaded["model"]["w"], state(1.0)["model"]["w"])
    assert not loaded["big"].any()


def test_async_saves_of_the_same_tensors_each_keep_their_own_values(make_checkpointer):
    # The staging copy is kept and reused between async saves: each save must
    # still record the values of its own step, not the previous one's.
    checkpointer = make_checkpointer(keep_last=None)
    live = state(1.0) | {"big": torch.zeros(2 << 20)}
    for step in (1, 2, 3):
        live["big"].fill_(float(step))
        live["model"]["w"].fill_(float(step))
        checkpointer.async_save(step, live)
        live["big"].fill_(-1.0)  # training goes on while the save is in flight
    checkpointer.wait()
    for step in (1, 2, 3):
        loaded = blank() | {"big": torch.empty(2 << 20)}
        checkpointer.load(loaded, step=step)
        assert torch.all(loaded["big"] == step) and torch.all(loaded["model"]["w"] == step)


def test_a_second_async_save_waits_for_the_first(make_checkpointer):
    checkpointer = make_checkpointer()
    checkpointer.async_save(1, state(1.0))
    checkpointer.async_save(2, state(2.0))
    assert checkpointer.in_flight == 2
    # The second save began only once the first had committed; it may itself have committed
    # since (its write is quick), so step 2 can be listed already, but never alone.
    assert [c.step for c in checkpointer.store.list_committed()][:1] == [1]
    checkpointer.wait()
    assert [c.step for c in checkpointer.store.list_committed()] == [1, 2]


def test_an_async_save_that_fails_raises_on_wait_and_commits_nothing(make_checkpointer):
    checkpointer = make_checkpointer()
    unpicklable = state(1.0) | {"callback": lambda: None}
    checkpointer.async_save(1, unpicklable)
    with pytest.raises(CheckpointError, match="writing step 1 failed on 1 rank"):
        checkpointer.wait()
    assert checkpointer.store.list_committed() == []
    saved(checkpointer, 2)
    assert [c.step for c in checkpointer.store.list_committed()] == [2]


def test_an_async_save_error_surfaces_on_the_next_save(make_checkpointer):
    checkpointer = make_checkpointer()
    checkpointer.async_save(1, state(1.0) | {"callback": lambda: None})
    with pytest.raises(CheckpointError, match="writing step 1"):
        checkpointer.async_save(2, state(2.0))
    assert checkpointer.in_flight is None
