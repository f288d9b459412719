"""An adapter job's exports: its LoRA adapters as a PEFT adapter directory, or
merged into its base as a plain Hugging Face model.

    adapter_plan   adapter_config.json (`workers.schema.peft_format.peft_config`)
                   and adapter_model.safetensors: every lora_A and lora_B of
                   the checkpoint under PEFT's key for it, in the export's dtype
    merged_plan    every tensor of the base (`init.uri`, read again: an adapter
                   job's checkpoints hold no base tensor) with each targeted
                   weight W replaced by W + scaling * B @ A, computed in fp32
                   and then converted; written by workers/engine/export.py as
                   it writes a model export (config, shards, tokenizer files)

A merged export reads the base it merges into, and refuses one whose tensors
are not those the adapters were trained on: each base tensor's sha256 is
checked against the base identity the checkpoint's manifest holds
(workers/engine/base_identity.py) as it is read.

Importing this module does not import torch; its functions do.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from checkpoints.errors import CheckpointInvalid
from checkpoints.safetensors_io import SafetensorsReader, TensorEntry, to_numpy
from workers.datasets.storage import data_storage_options
from workers.engine.export_plan import SAFETENSORS_DTYPE, CheckpointTensors, ExportPlan
from workers.schema import ModelSpec
from workers.schema.adapter import AdapterSpec
from workers.schema.hf_format import tensor_shapes
from workers.schema.peft_format import (
    ADAPTER_CONFIG_FILE,
    ADAPTER_WEIGHTS_FILE,
    adapter_tensor_shapes,
    peft_config,
    peft_key,
    targeted_weights,
)


def _checked_adapters(checkpoint: CheckpointTensors, model: ModelSpec,
                      adapter: AdapterSpec) -> dict[str, tuple[int, ...]]:
    shapes = adapter_tensor_shapes(model, adapter)
    for name, shape in shapes.items():
        checkpoint.check(name, shape)
    return shapes


def adapter_plan(checkpoint: CheckpointTensors, model: ModelSpec, adapter: AdapterSpec,
                 base_uri: str | None, dtype: str) -> ExportPlan:
    """A PEFT adapter directory of the checkpoint's adapters."""
    shapes = _checked_adapters(checkpoint, model, adapter)
    by_key = {peft_key(name): name for name in sorted(shapes)}
    entries = [TensorEntry(key, SAFETENSORS_DTYPE[dtype], shapes[name])
               for key, name in by_key.items()]
    config = json.dumps(peft_config(adapter, base_uri), indent=2, sort_keys=True).encode()
    return ExportPlan(entries=entries, tensor=lambda key: checkpoint.load(by_key[key]),
                      small={ADAPTER_CONFIG_FILE: config}, weights_file=ADAPTER_WEIGHTS_FILE,
                      extra={"checkpoint_step": checkpoint.step, "peft_type": "LORA",
                             "base_uri": base_uri})


def merged_tensors(checkpoint: CheckpointTensors, model: ModelSpec, adapter: AdapterSpec,
                   base_uri: str, identity: dict[str, Any] | None) -> tuple[
                       dict[str, tuple[int, ...]], Any]:
    """The merged model's tensors: their shapes by name, and a function that makes
    one (fp32): the base's tensor, plus scaling * B @ A where it is targeted.
    `identity`: the base identity in the checkpoint's manifest (its `tensors`
    digests are checked as each base tensor is read)."""
    import numpy as np
    import torch

    _checked_adapters(checkpoint, model, adapter)
    shapes = tensor_shapes(model)
    targeted = targeted_weights(model, adapter)
    reader = SafetensorsReader(base_uri, data_storage_options())
    for name, shape in shapes.items():
        found = reader.tensors.get(name)
        if found is None or tuple(found.shape) != shape:
            raise CheckpointInvalid(f"the base at {base_uri} has no tensor {name} of shape "
                                    f"{list(shape)}: it is not the model the adapters were "
                                    "trained on")
    digests = (identity or {}).get("tensors") or {}

    def tensor(name: str) -> Any:
        info = reader.tensors[name]
        data = reader.read_box(name)
        if digests and digests.get(name) != hashlib.sha256(data).hexdigest():
            raise CheckpointInvalid(f"the base at {base_uri} has changed since the adapters "
                                    f"were trained: tensor {name} differs")
        weight = torch.from_numpy(np.array(to_numpy(data, info.dtype, tuple(info.shape)),
                                           dtype=np.float32))
        del data
        if name in targeted:
            module = name.removesuffix(".weight")
            a = checkpoint.load(f"{module}.lora_A.weight").float()
            b = checkpoint.load(f"{module}.lora_B.weight").float()
            weight.addmm_(b, a, alpha=adapter.scaling)  # W + scaling * B @ A, in fp32
        return weight

    return shapes, tensor
