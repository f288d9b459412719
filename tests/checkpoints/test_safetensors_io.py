"""The torch-free safetensors reader and writer: any sub-box of a tensor in
few ranged reads (file, memory and S3 through fsspec), dtypes widened
exactly, the sharded index, and files the `safetensors` library reads and
writes too."""

from __future__ import annotations

import itertools
import json
import uuid

import fsspec
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from checkpoints.safetensors_io import (
    INDEX_FILE,
    SafetensorsError,
    SafetensorsReader,
    SafetensorsWriter,
    TensorEntry,
    box_runs,
    coalesce,
    encode_index,
    shard_names,
    shard_plan,
)

RNG = np.random.default_rng(0)
TENSORS = {
    "a.weight": RNG.standard_normal((12, 10), dtype=np.float32),
    "b.bias": RNG.standard_normal((7,), dtype=np.float32),
    "c.cube": RNG.standard_normal((4, 5, 6), dtype=np.float32),
    "d.half": RNG.standard_normal((9, 8)).astype(np.float16),
}


def test_box_runs_merge_the_dimensions_a_box_covers_whole():
    assert box_runs((4, 6), [(1, 3), (0, 6)], 4) == [(24, 72)]  # rows: one run
    assert box_runs((4, 6), [(0, 2), (2, 4)], 4) == [(8, 16), (32, 40)]  # columns: one per row
    assert box_runs((2, 3, 4), [(0, 2), (1, 2), (0, 4)], 1) == [(4, 8), (16, 20)]
    assert box_runs((5,), [(2, 2)], 4) == []
    assert coalesce([(0, 8), (12, 20), (100, 108)], max_gap=4) == [
        ((0, 20), [(0, 8), (12, 20)]), ((100, 108), [(100, 108)])]
    with pytest.raises(ValueError, match="outside the shape"):
        box_runs((4, 6), [(0, 5), (0, 6)], 4)


@pytest.fixture(params=["single", "sharded"])
def model_dir(request, tmp_path):
    """A model directory written by the `safetensors` library: one file, or three shards and an index."""
    names = sorted(TENSORS)
    groups = [names] if request.param == "single" else [names[:1], names[1:3], names[3:]]
    files = shard_names(len(groups))
    for group, file in zip(groups, files, strict=True):
        save_file({n: TENSORS[n] for n in group}, str(tmp_path / file), metadata={"format": "pt"})
    if len(groups) > 1:
        weight_map = {n: f for g, f in zip(groups, files, strict=True) for n in g}
        (tmp_path / INDEX_FILE).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    return tmp_path


def test_every_box_of_every_tensor_reads_as_numpy_slices_it(model_dir):
    reader = SafetensorsReader(f"file://{model_dir}", max_gap=0)
    assert reader.config() == {"model_type": "llama"}
    for name, full in TENSORS.items():
        assert reader.tensors[name].shape == full.shape
        cuts = [sorted({0, d // 3, d // 2, d}) for d in full.shape]
        for bounds in itertools.product(*[list(itertools.combinations(c, 2)) for c in cuts]):
            got = reader.read_array(name, list(bounds), dtype=str(full.dtype))
            np.testing.assert_array_equal(got, full[tuple(slice(a, b) for a, b in bounds)])


def test_a_row_shard_is_one_ranged_read_of_just_its_bytes(model_dir):
    reader = SafetensorsReader(str(model_dir))
    reader.read_box("a.weight", [(6, 12), (0, 10)])
    assert (reader.reads, reader.bytes_read) == (1, 6 * 10 * 4)
    reader = SafetensorsReader(str(model_dir), max_gap=0)
    reader.read_box("a.weight", [(0, 12), (5, 10)])  # a column shard: a run per row...
    assert (reader.reads, reader.bytes_read) == (12, 12 * 5 * 4)
    reader = SafetensorsReader(str(model_dir))  # ...read as one span when the gaps are small
    reader.read_box("a.weight", [(0, 12), (5, 10)])
    assert reader.reads == 1


def test_bf16_widens_exactly(tmp_path):
    fs = fsspec.filesystem("file")
    values = np.array([[1.0, -2.5, 3.140625], [0.0, 65280.0, -0.0078125]], dtype=np.float32)
    bits = (values.view(np.uint32) >> 16).astype(np.uint16)  # exact in bf16
    writer = SafetensorsWriter(fs, str(tmp_path / "model.safetensors"),
                               [TensorEntry("w", "BF16", (2, 3))])
    writer.write("w", bits.tobytes())
    writer.close()
    reader = SafetensorsReader(str(tmp_path))
    np.testing.assert_array_equal(reader.read_array("w", [(0, 2), (1, 3)]), values[:, 1:])


def test_what_the_writer_streams_the_safetensors_library_loads(tmp_path):
    fs = fsspec.filesystem("file")
    entries = [TensorEntry(n, {"float32": "F32", "float16": "F16"}[str(t.dtype)], t.shape)
               for n, t in TENSORS.items()]
    shards = shard_plan(entries, max_shard_bytes=500)
    names = shard_names(len(shards))
    assert len(shards) > 1 and names[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    for shard, file in zip(shards, names, strict=True):
        writer = SafetensorsWriter(fs, str(tmp_path / file), shard)
        for entry in shard:
            writer.write(entry.name, TENSORS[entry.name].tobytes())
        writer.close()
        assert writer.size == (tmp_path / file).stat().st_size
    (tmp_path / INDEX_FILE).write_bytes(encode_index(shards, names))
    loaded = {}
    for file in names:
        loaded |= load_file(str(tmp_path / file))
    assert sorted(loaded) == sorted(TENSORS)
    for name, full in TENSORS.items():
        np.testing.assert_array_equal(loaded[name], full)
    assert SafetensorsReader(str(tmp_path)).read_array("c.cube").shape == (4, 5, 6)


def test_the_writer_refuses_tensors_out_of_order(tmp_path):
    writer = SafetensorsWriter(fsspec.filesystem("file"), str(tmp_path / "x.safetensors"),
                               [TensorEntry("a", "F32", (2,)), TensorEntry("b", "F32", (1,))])
    with pytest.raises(ValueError, match="expected a of 8 bytes next, got b"):
        writer.write("b", b"\0" * 4)


@pytest.mark.parametrize("index, message", [
    ({"weight_map": {"a": "../elsewhere.safetensors"}}, "outside the directory"),
    ({"no_map": {}}, "not an index with a weight_map"),
])
def test_an_index_that_points_outside_or_is_malformed_is_refused(tmp_path, index, message):
    (tmp_path / INDEX_FILE).write_text(json.dumps(index))
    with pytest.raises(SafetensorsError, match=message):
        SafetensorsReader(str(tmp_path))


def test_a_header_that_lies_about_its_tensor_is_refused(tmp_path):
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}).encode()
    (tmp_path / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    with pytest.raises(SafetensorsError, match="offsets do not match its shape"):
        SafetensorsReader(str(tmp_path))
    with pytest.raises(SafetensorsError, match="neither model.safetensors"):
        SafetensorsReader(str(tmp_path / "nothing-here"))


def test_ranged_reads_over_s3(moto_s3, s3_bucket, tmp_path):
    root = f"s3://{s3_bucket}/hf-{uuid.uuid4().hex[:8]}"
    save_file(TENSORS, str(tmp_path / "model.safetensors"))
    fs = fsspec.filesystem("s3", **moto_s3)
    fs.put(str(tmp_path / "model.safetensors"), f"{root}/model.safetensors")
    reader = SafetensorsReader(root, moto_s3, max_gap=0)
    got = reader.read_array("a.weight", [(3, 9), (0, 10)])
    np.testing.assert_array_equal(got, TENSORS["a.weight"][3:9])
    assert (reader.reads, reader.bytes_read) == (1, 6 * 10 * 4)
    got = reader.read_array("c.cube", [(0, 4), (1, 3), (2, 4)])  # 8 runs, one cat_ranges call
    np.testing.assert_array_equal(got, TENSORS["c.cube"][:, 1:3, 2:4])
    assert reader.bytes_read == 6 * 10 * 4 + 4 * 2 * 2 * 4
