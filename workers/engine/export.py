"""Export: a job's committed checkpoint as a consolidated Hugging Face model
(kind "model"), or an adapter job's as a PEFT adapter or a merged model
(kinds "adapter" and "merged", workers/engine/adapter_export.py).

`export_checkpoint(request)` runs in one process (a Ray task the control
plane starts, `service.run.ray_cluster.run_export`): it verifies the step's
files against its manifest (DCP's metadata first, the shards on a thread
while the export is written; it commits only if they pass), plans the export
(`workers.engine.export_plan.ExportPlan`: the tensors, their dtypes and
shapes, from the DCP metadata and the base's headers), writes each
safetensors file's header (no tensor read yet), then makes one full tensor
at a time (from the DCP shards: `dcp.load` of that one key, no process
group; for "merged", the base's tensor with its adapter folded in), converts
it to the export's dtype and streams its bytes out; then the small files
(config.json and the base's tokenizer files, or adapter_config.json), the
index (if sharded), and the signed manifest last
(`checkpoints.exports.ExportStore`). At most one full tensor (and its
converted copy) is held at a time. Any failure removes what was written.

Importing this module does not import torch (the control plane names the
function and asks `export_problem`); the function does.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from checkpoints import CheckpointTarget, FileEntry, layout
from checkpoints.digest import entry_of
from checkpoints.errors import CheckpointInvalid
from checkpoints.exports import EXPORT_DIGEST, EXPORT_KINDS, export_id
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
from workers.engine.export_plan import SAFETENSORS_DTYPE, CheckpointTensors, ExportPlan
from workers.schema import ModelSpec
from workers.schema.adapter import AdapterSpec
from workers.schema.hf_format import CARRIED_FILES, exported_config, hf_config, tensor_shapes


def export_request(target: dict, model: ModelSpec, step: int, dtype: str,
                   max_shard_bytes: int, base_uri: str | None = None, kind: str = "model",
                   adapter: dict[str, Any] | None = None) -> dict[str, Any]:
    """What `export_checkpoint` takes, as plain data (it travels to a Ray task, or a
    process's arguments): `target` is the job's `CheckpointTarget.to_dict()`. `base_uri`:
    the Hugging Face directory the job started from (`init.uri`), whose config and tokenizer
    the export keeps (and, for kind "merged", whose weights the adapters merge into);
    `adapter`: the job's `adapter` section as JSON (kinds "adapter" and "merged")."""
    return {"target": target, "model": model.model_dump(mode="json"), "step": step,
            "dtype": dtype, "max_shard_bytes": max_shard_bytes, "base_uri": base_uri,
            "kind": kind, "adapter": adapter}


def export_problem(kind: str, adapter: dict[str, Any] | None, base_uri: str | None) -> str | None:
    """Why an export of this kind cannot be made of a job with this `adapter` section
    (None: no adapter) and `init.uri` (`base_uri`), or None; torch-free, so the
    control plane refuses before it starts anything."""
    if kind not in EXPORT_KINDS:
        return f"an export's kind is one of {', '.join(EXPORT_KINDS)}, not {kind!r}"
    if adapter is None:
        if kind != "model":
            return (f"a {kind} export needs a job with an adapter section: this job trains "
                    "every weight (export kind 'model')")
        return None
    if kind == "model":
        return ("an adapter job's checkpoints hold its adapters alone, not a whole model: "
                "export kind 'adapter' or 'merged' (a PEFT adapter, or the base with them merged)")
    if kind == "merged" and not base_uri:
        return ("a merged export adds the adapters to the base's weights, and this job's base "
                "was seeded, not read from Hugging Face files (no init.uri): export kind "
                "'adapter' instead")
    return None


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


def hf_model_plan(checkpoint: CheckpointTensors, model: ModelSpec, dtype: str,
                  request: dict[str, Any], base: dict[str, Any] | None) -> ExportPlan:
    """A Hugging Face model directory: the checkpoint's tensors (kind "model"), or the
    base's with the adapters merged (kind "merged"; `base`: the checkpoint's base
    identity)."""
    ours = hf_config(model, dtype)  # refuses a model with no HF architecture, before any I/O
    base_config, carried = base_files(request.get("base_uri"))
    config = exported_config(ours, base_config)
    if request.get("kind", "model") == "merged":
        from workers.engine.adapter_export import merged_tensors

        adapter = AdapterSpec.model_validate(request["adapter"])
        shapes, tensor = merged_tensors(checkpoint, model, adapter, request["base_uri"], base)
    else:
        shapes, tensor = tensor_shapes(model), checkpoint.load
        for name, shape in shapes.items():
            checkpoint.check(name, shape)
    entries = [TensorEntry(name, SAFETENSORS_DTYPE[dtype], shape) for name, shape in shapes.items()]
    small = {**carried, CONFIG_FILE: json.dumps(config, indent=2, sort_keys=True).encode()}
    return ExportPlan(entries=entries, tensor=tensor, small=small,
                      extra={"architecture": config["architectures"][0],
                             "checkpoint_step": checkpoint.step})


def export_checkpoint(request: dict[str, Any],
                      on_tensor: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Write and commit the export; returns {id, step, dtype, kind, bytes, seconds}.
    `on_tensor(name)` is called after each tensor is written (a test's hook)."""
    import torch

    started = time.perf_counter()
    target = CheckpointTarget.from_dict(request["target"])
    model = ModelSpec.model_validate(request["model"])
    step, dtype, kind = int(request["step"]), request["dtype"], request.get("kind", "model")
    if problem := export_problem(kind, request.get("adapter"), request.get("base_uri")):
        raise ValueError(problem)
    ident = export_id(step, dtype, kind)
    if kind == "model":
        hf_config(model, dtype)  # refuses a model with no HF architecture, before any I/O
    store, exports = target.open_store(), target.open_exports()
    manifest = store.read_manifest(step)
    # DCP's metadata is a pickle: verified before it is read. The shards are
    # verified meanwhile, on a thread, and the export commits only if they pass.
    _verified(store.verify_files(manifest, [layout.DCP_METADATA_NAME]))
    pool = ThreadPoolExecutor(1, thread_name_prefix="export-verify")
    shards_verified = pool.submit(store.verify_files, manifest,
                                  sorted(set(manifest.files) - {layout.DCP_METADATA_NAME}))
    pool.shutdown(wait=False)
    checkpoint = CheckpointTensors(store.step_uri(step), target.storage_options, step)
    if kind == "adapter":
        from workers.engine.adapter_export import adapter_plan

        plan = adapter_plan(checkpoint, model, AdapterSpec.model_validate(request["adapter"]),
                            request.get("base_uri"), dtype)
    else:
        plan = hf_model_plan(checkpoint, model, dtype, request, manifest.extra.get("base"))
    if plan.weights_file is not None:
        shards, names = [plan.entries], [plan.weights_file]
    else:
        shards = shard_plan(plan.entries, int(request["max_shard_bytes"]))
        names = shard_names(len(shards))
    out_dtype = getattr(torch, dtype)
    directory = exports.begin(ident)
    files: dict[str, FileEntry] = {}
    try:
        for shard, file_name in zip(shards, names, strict=True):
            writer = SafetensorsWriter(exports.fs, f"{directory}/{file_name}", shard,
                                       algo=EXPORT_DIGEST)
            try:
                for entry in shard:
                    tensor = plan.tensor(entry.name)
                    converted = tensor.to(out_dtype).contiguous()
                    del tensor
                    writer.write(entry.name, _raw_bytes(converted))
                    del converted
                    if on_tensor is not None:
                        on_tensor(entry.name)
            except BaseException:
                # the file is closed, and the cause raised, not close()'s "never written"
                with contextlib.suppress(ValueError):
                    writer.close()
                raise
            writer.close()
            files[file_name] = writer.entry()
        small = dict(plan.small)
        if len(shards) > 1:
            small[INDEX_FILE] = encode_index(shards, names)
        for file_name, data in small.items():
            exports.fs.pipe_file(f"{directory}/{file_name}", data)
            files[file_name] = entry_of(data, EXPORT_DIGEST)
        _verified(shards_verified.result())
        exports.commit(ident, world_size=manifest.world_size, files=files,
                       extra={**plan.extra, "kind": kind})
    except BaseException:
        exports.delete(ident)
        raise
    total = sum(e.size for e in files.values())
    return {"id": ident, "step": step, "dtype": dtype, "kind": kind, "bytes": total,
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
