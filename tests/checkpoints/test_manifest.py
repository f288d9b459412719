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
from checkpoints.manifest import sign, snapshot_extra


def make_manifest(**changes) -> Manifest:
    fields = dict(
        tenant="acme",
        job="j1",
        step=12,
        world_size=2,
        created_at="2025-01-02T03:04:05.678+00:00",
        files={
            "__0_0.distcp": FileEntry(size=10, algo="blake3", digest="a" * 64),
            ".metadata": FileEntry(size=3, algo="blake3", digest="b" * 64),
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
        lambda m: m["files"]["__0_0.distcp"].update(digest="c" * 64),
        lambda m: m["files"]["__0_0.distcp"].update(algo="sha256"),
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


def signed_json(body: dict, secret: bytes) -> bytes:
    return json.dumps(dict(body, hmac=sign(body, secret)), sort_keys=True).encode()


def test_a_format_1_manifest_reads_as_sha256_entries(secret):
    """What the code before BLAKE3 wrote: every file's size and sha256."""
    body = json.loads(make_manifest().to_json(secret))
    del body["hmac"]
    body |= {"format": 1, "files": {"__0_0.distcp": {"size": 10, "sha256": "d" * 64}}}
    manifest = Manifest.from_json(signed_json(body, secret), secret)
    entry = manifest.files["__0_0.distcp"]
    assert (manifest.format, entry.algo, entry.digest, entry.sha256) == (1, "sha256", "d" * 64, "d" * 64)
    with pytest.raises(ValueError, match="format 2"):
        manifest.to_json(secret)  # never written again in format 1


@pytest.mark.parametrize("fmt, entry", [
    (1, {"size": 10, "algo": "sha256", "digest": "d" * 64}),  # format 1 has no algo
    (2, {"size": 10, "sha256": "d" * 64}),  # format 2 names it
    (2, {"size": 10, "algo": "md5", "digest": "d" * 32}),
])
def test_a_file_entry_of_another_shape_is_malformed(secret, fmt, entry):
    body = json.loads(make_manifest().to_json(secret))
    del body["hmac"]
    body |= {"format": fmt, "files": {"__0_0.distcp": entry}}
    with pytest.raises(CheckpointInvalid, match="malformed"):
        Manifest.from_json(signed_json(body, secret), secret)


def test_only_a_sha256_entry_has_a_sha256():
    assert FileEntry(size=1, algo="sha256", digest="e" * 64).sha256 == "e" * 64
    assert not hasattr(FileEntry(size=1, algo="blake3", digest="e" * 64), "sha256")
