"""A job's exports are committed by their signed manifest, written last: a
torn export is never listed and is cleaned up; a file that does not match
its manifest is refused (size at listing, sha256 at download)."""

from __future__ import annotations

import hashlib

import pytest

from checkpoints import FileEntry
from checkpoints.errors import CheckpointInvalid
from checkpoints.exports import ExportStore, export_id, parse_export_id

FILES = {"config.json": b'{"model_type": "llama"}', "model.safetensors": b"\x08" + b"\0" * 63}


@pytest.fixture
def exports(storage, secret):
    return ExportStore(tenant="acme", job="j1", secret=secret, **storage)


def write(exports: ExportStore, ident: str, *, commit: bool = True) -> None:
    directory = exports.begin(ident)
    for name, data in FILES.items():
        exports.fs.pipe_file(f"{directory}/{name}", data)
    if commit:
        files = {n: FileEntry(size=len(d), algo="sha256", digest=hashlib.sha256(d).hexdigest())
                 for n, d in FILES.items()}
        exports.commit(ident, world_size=2, files=files, extra={})


def test_ids_name_step_dtype_and_kind():
    assert export_id(20, "bfloat16") == "step-000000020-bfloat16"
    assert parse_export_id("step-000000020-float32") == (20, "float32", "model")
    assert export_id(20, "float32", "adapter") == "step-000000020-float32-adapter"
    assert parse_export_id("step-000000020-bfloat16-merged") == (20, "bfloat16", "merged")
    assert parse_export_id("step-20-float32") is None
    assert parse_export_id("step-000000020-float32-model") is None  # a model's id has no suffix
    with pytest.raises(ValueError, match="dtype"):
        export_id(1, "float16")
    with pytest.raises(ValueError, match="kind"):
        export_id(1, "float32", "lora")


def test_only_committed_exports_are_listed_and_torn_ones_are_cleaned_up(exports):
    write(exports, "step-000000010-float32")
    write(exports, "step-000000020-float32", commit=False)  # its writer died before the manifest
    listed = exports.list_committed()
    assert [(e.id, e.step, e.dtype, sorted(e.files)) for e in listed] == [
        ("step-000000010-float32", 10, "float32", sorted(FILES))]
    assert exports.cleanup_torn(keep={"step-000000020-float32"}) == []  # still being written
    assert exports.cleanup_torn() == ["step-000000020-float32"]
    assert exports.ids() == ["step-000000010-float32"]


def test_each_kind_of_export_of_a_step_is_listed_with_its_kind(exports):
    for ident in ("step-000000010-float32", "step-000000010-float32-adapter",
                  "step-000000010-float32-merged"):
        write(exports, ident)
    assert [(e.id, e.step, e.kind) for e in exports.list_committed()] == [
        ("step-000000010-float32", 10, "model"), ("step-000000010-float32-adapter", 10, "adapter"),
        ("step-000000010-float32-merged", 10, "merged")]
    # an adapter's manifest copied over its merged export names another kind: not listed
    exports.fs.pipe_file(exports.path("step-000000010-float32-merged", "manifest.json"),
                         exports.fs.cat_file(exports.path("step-000000010-float32-adapter",
                                                          "manifest.json")))
    assert "step-000000010-float32-merged" not in {e.id for e in exports.list_committed()}


def test_a_corrupt_file_fails_its_manifest_check(exports):
    ident = "step-000000010-bfloat16"
    write(exports, ident)
    assert exports.verify_file(ident, "model.safetensors").size == 64
    path = exports.path(ident, "model.safetensors")
    exports.fs.pipe_file(path, b"\x09" + FILES["model.safetensors"][1:])  # a flipped byte
    with pytest.raises(CheckpointInvalid, match="model.safetensors fails its manifest check"):
        exports.verify_file(ident, "model.safetensors")
    exports.fs.pipe_file(path, FILES["model.safetensors"][:10])  # cut short: not even listed
    assert exports.list_committed() == []


def test_a_manifest_copied_to_another_export_does_not_verify(exports):
    write(exports, "step-000000010-float32")
    write(exports, "step-000000010-bfloat16", commit=False)
    manifest = exports.fs.cat_file(exports.path("step-000000010-float32", "manifest.json"))
    exports.fs.pipe_file(exports.path("step-000000010-bfloat16", "manifest.json"), manifest)
    with pytest.raises(CheckpointInvalid, match="not this directory"):
        exports.read_manifest("step-000000010-bfloat16")
    assert [e.id for e in exports.list_committed()] == ["step-000000010-float32"]
