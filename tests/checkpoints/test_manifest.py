"""The manifest signs what a step holds; any edit breaks the signature."""

from __future__ import annotations

import json
import math

import pytest

from checkpoints import (
    CheckpointInvalid,
    FileEntry,
    Manifest,
    TornCheckpoint,
    decode_bytes,
    encode_bytes,
)
from checkpoints.manifest import snapshot_extra


def make_manifest(**changes) -> Manifest:
    fields = dict(
        tenant="acme",
        job="j1",
        step=12,
        world_size=2,
        created_at="2025-01-02T03:04:05.678+00:00",
        files={
            "__0_0.distcp": FileEntry(size=10, sha256="a" * 64),
            ".metadata": FileEntry(size=3, sha256="b" * 64),
        },
        extra={"cursor": 96, "rng": encode_bytes(b"\x00\xffstate")},
    )
    return Manifest(**(fields | changes))


def test_round_trip(secret):
    manifest = make_manifest()
    assert Manifest.from_json(manifest.to_json(secret), secret) == manifest
    assert manifest.total_bytes == 13


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m.update(step=13),
        lambda m: m.update(world_size=4),
        lambda m: m["extra"].update(cursor=0),
        lambda m: m["files"]["__0_0.distcp"].update(sha256="c" * 64),
        lambda m: m["files"].pop(".metadata"),
        lambda m: m.update(job="j2"),
    ],
)
def test_any_edit_breaks_the_signature(secret, edit):
    raw = json.loads(make_manifest().to_json(secret))
    edit(raw)
    with pytest.raises(CheckpointInvalid, match="HMAC mismatch"):
        Manifest.from_json(json.dumps(raw).encode(), secret)


def test_another_secret_does_not_verify(secret):
    with pytest.raises(CheckpointInvalid, match="HMAC mismatch"):
        Manifest.from_json(make_manifest().to_json(secret), b"another secret")


def test_unsigned_manifest_is_invalid(secret):
    raw = json.loads(make_manifest().to_json(secret))
    del raw["hmac"]
    with pytest.raises(CheckpointInvalid, match="no signature"):
        Manifest.from_json(json.dumps(raw).encode(), secret)


def test_a_manifest_cut_short_is_torn(secret):
    data = make_manifest().to_json(secret)
    with pytest.raises(TornCheckpoint):
        Manifest.from_json(data[: len(data) // 2], secret)


@pytest.mark.parametrize("secret", [b"", "text", None])
def test_secret_must_be_non_empty_bytes(secret):
    with pytest.raises(ValueError):
        make_manifest().to_json(secret)


def test_extra_is_snapshotted_as_json():
    extra = {"cursor": 5, "mesh": [2], "nested": {"a": 1.5}}
    snapshot = snapshot_extra(extra)
    extra["cursor"] = 6
    extra["nested"]["a"] = 0
    assert snapshot == {"cursor": 5, "mesh": [2], "nested": {"a": 1.5}}
    assert snapshot_extra(None) == {}


@pytest.mark.parametrize("extra", [{"t": object()}, {"x": math.nan}, {"b": b"raw"}, [1, 2]])
def test_extra_that_is_not_json_is_refused(extra):
    with pytest.raises(ValueError):
        snapshot_extra(extra)


def test_bytes_travel_as_base64():
    data = bytes(range(256))
    assert decode_bytes(encode_bytes(data)) == data
