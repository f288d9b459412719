"""Export: a job's committed checkpoint as a consolidated Hugging Face model.

`export_checkpoint(request)` runs in one process (a Ray task the control
plane starts, `service.run.ray_cluster.run_export`): it verifies the step's
files against its manifest (DCP's metadata first, the shards on a thread
while the export is written; it commits only if they pass), writes each safetensors file's header from the
DCP metadata's shapes (no tensor read yet), then loads one full tensor at a
time from the DCP shards (`dcp.load` of that one key, no process group),
converts it to the export's dtype and streams its bytes out; then
config.json, the index (if sharded), and the signed manifest last
(`checkpoints.exports.ExportStore`). At most one full tensor (and its
converted copy) is held at a time. Any failure removes what was written.

Importing this module does not import torch (the control plane names the
function); the function does.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from checkpoints import CheckpointTarget, FileEntry, layout
from checkpoints.digest import entry_of
from checkpoints.errors import CheckpointInvalid
from checkpoints.exports import EXPORT_DIGEST, export_id
from checkpoints.safetensors_io import (
    CONFIG_FILE,
    INDEX_FILE,
    SafetensorsWriter,
    TensorEntry,
    encode_index,
    shard_names,
    shard_plan,
)
from workers.datasets.storage import data_storage_options
from workers.spec import ModelSpec
from workers.spec.hf_format import CARRIED_FILES, exported_config, hf_config, tensor_shapes

SAFETENSORS_DTYPE = {"float32": "F32", "bfloat16": "BF16"}
DCP_MODEL_PREFIX = "app.model."  # checkpoints.stateful.ModelAndOptimizer under "app"


def export_request(target: dict, model: ModelSpec, step: int, dtype: str,
                   max_shard_bytes: int, base_uri: str | None = None) -> dict[str, Any]:
    """What `export_checkpoint` takes, as plain data (it travels to a Ray task). `base_uri`:
    the Hugging Face directory the job started from (`init.uri`), whose config and tokenizer
    the export keeps."""
    return {"target": target, "model": model.model_dump(mode="json"), "step": step,
            "dtype": dtype, "max_shard_bytes": max_shard_bytes, "base_uri": base_uri}


def base_files(base_uri: str | None) -> tuple[dict[str, Any] | None, dict[str, bytes]]:
    """The base model's config.json (None without a base) and the files an export carries
    over from it (`CARRIED_FILES` that exist), read with the data's storage options."""
    if not base_uri:
        return None, {}
    from fsspec.core import url_to_fs

    fs, root = url_to_fs(base_uri.rstrip("/"), **data_storage_options())
    config = json.loads(fs.cat_file(f"{root}/{CONFIG_FILE}"))
    carried = {}
    for name in CARRIED_FILES:
        try:
            carried[name] = fs.cat_file(f"{root}/{name}")
        except FileNotFoundError:
            continue
    return config, carried


def export_checkpoint(request: dict[str, Any],
                      on_tensor: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Write and commit the export; returns {id, step, dtype, bytes, seconds}.
    `on_tensor(name)` is called after each tensor is written (a test's hook)."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    started = time.perf_counter()
    target = CheckpointTarget.from_dict(request["target"])
    model = ModelSpec.model_validate(request["model"])
    step, dtype = int(request["step"]), request["dtype"]
    ident = export_id(step, dtype)
    ours = hf_config(model, dtype)  # refuses a model with no HF architecture, before any I/O
    base_config, carried = base_files(request.get("base_uri"))
    config = exported_config(ours, base_config)
    store, exports = target.open_store(), target.open_exports()
    manifest = store.read_manifest(step)
    # DCP's metadata is a pickle: verified before it is read. The shards are
    # verified meanwhile, on a thread, and the export commits only if they pass.
    _verified(store.verify_files(manifest, [layout.DCP_METADATA_NAME]))
    pool = ThreadPoolExecutor(1, thread_name_prefix="export-verify")
    shards_verified = pool.submit(store.verify_files, manifest,
                                  sorted(set(manifest.files) - {layout.DCP_METADATA_NAME}))
    pool.shutdown(wait=False)
    step_uri = store.step_uri(step)
    metadata = FsspecReader(step_uri, **target.storage_options).read_metadata()
    entries, dcp_dtypes = [], {}
    for name, shape in tensor_shapes(model).items():
        meta = metadata.state_dict_metadata.get(DCP_MODEL_PREFIX + name)
        if not isinstance(meta, TensorStorageMetadata) or tuple(meta.size) != shape:
            raise CheckpointInvalid(f"step {step}: tensor {name} is not in the checkpoint with "
                                    f"shape {list(shape)}")
        dcp_dtypes[name] = meta.properties.dtype
        entries.append(TensorEntry(name, SAFETENSORS_DTYPE[dtype], shape))
    out_dtype = getattr(torch, dtype)
    shards = shard_plan(entries, int(request["max_shard_bytes"]))
    names = shard_names(len(shards))
    directory = exports.begin(ident)
    files: dict[str, FileEntry] = {}
    try:
        for shard, file_name in zip(shards, names, strict=True):
            writer = SafetensorsWriter(exports.fs, f"{directory}/{file_name}", shard,
                                       algo=EXPORT_DIGEST)
            try:
                for entry in shard:
                    tensor = torch.empty(entry.shape, dtype=dcp_dtypes[entry.name])
                    with warnings.catch_warnings():  # "assuming ... a single process": it is
                        warnings.simplefilter("ignore", UserWarning)
                        dcp.load({DCP_MODEL_PREFIX + entry.name: tensor},
                                 storage_reader=FsspecReader(step_uri, **target.storage_options),
                                 no_dist=True)
                    converted = tensor.to(out_dtype).contiguous()
                    del tensor
                    writer.write(entry.name, _raw_bytes(converted))
                    del converted
                    if on_tensor is not None:
                        on_tensor(entry.name)
            finally:
                writer.close()
            files[file_name] = writer.entry()
        small = {**carried, CONFIG_FILE: json.dumps(config, indent=2, sort_keys=True).encode()}
        if len(shards) > 1:
            small[INDEX_FILE] = encode_index(shards, names)
        for file_name, data in small.items():
            exports.fs.pipe_file(f"{directory}/{file_name}", data)
            files[file_name] = entry_of(data, EXPORT_DIGEST)
        _verified(shards_verified.result())
        exports.commit(ident, world_size=manifest.world_size, files=files,
                       extra={"architecture": config["architectures"][0],
                              "checkpoint_step": step})
    except BaseException:
        exports.delete(ident)
        raise
    total = sum(e.size for e in files.values())
    return {"id": ident, "step": step, "dtype": dtype, "bytes": total,
            "seconds": time.perf_counter() - started}


def _verified(reasons: list[str]) -> None:
    if reasons:
        raise CheckpointInvalid("; ".join(reasons))


def _raw_bytes(tensor: Any) -> memoryview:
    """A contiguous CPU tensor's bytes, without a copy (numpy has no bf16: viewed as int16)."""
    import torch

    if tensor.dtype == torch.bfloat16:
        tensor = tensor.view(torch.int16)
    return memoryview(tensor.numpy()).cast("B")
