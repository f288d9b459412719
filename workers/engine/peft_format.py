"""A job's adapters from a PEFT LoRA adapter directory (`init.adapter_uri`),
filled after the base's weights as the model is built and sharded
(`AdapterWeights`, workers/engine/adapters.py).

`PeftAdapterWeights(uri, job.adapter).fill(model)` checks the directory's
adapter_config.json against the job's `adapter` (its rank, alpha and
targets must be the file's: `workers.schema.peft_format.open_adapter`, as the
service checks it at submit), then writes every `lora_A` / `lora_B`
parameter's local shard from adapter_model.safetensors at the parameter's
PEFT key, reading only the box the shard covers, as `HuggingFaceWeights`
reads a base (the same `read_local`, workers/engine/shard_reads.py). A
tensor missing, of another shape, or one the model has no place for is a
`SpecError` at `init.adapter_uri` naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from workers.datasets.storage import data_storage_options
from workers.engine.build import adapter_tensors
from workers.engine.shard_reads import read_local
from workers.schema import SpecError
from workers.schema.adapter import AdapterSpec
from workers.schema.peft_format import ADAPTER_WEIGHTS_FILE, open_adapter, peft_key


@dataclass
class PeftAdapterWeights:
    """The adapters of the PEFT adapter directory at `uri` (any fsspec URI),
    which must be the job's `adapter` (rank, alpha, targets)."""

    uri: str
    adapter: AdapterSpec
    storage_options: Mapping[str, Any] = field(default_factory=data_storage_options)

    def __post_init__(self) -> None:
        self.reader = open_adapter(self.uri, self.adapter, self.storage_options)

    def fill(self, model: nn.Module) -> None:
        """Write every adapter parameter's local shard from the file."""
        tensors, file = self.reader.tensors, f"{self.uri.rstrip('/')}/{ADAPTER_WEIGHTS_FILE}"
        wanted = set()
        for name, param in adapter_tensors(model):
            key = peft_key(name)
            wanted.add(key)
            if key not in tensors:
                raise _refused(f"tensor {key} is missing from {file}")
            if tuple(tensors[key].shape) != tuple(param.shape):
                raise _refused(f"tensor {key} has shape {list(tensors[key].shape)} in {file}, "
                               f"the job's adapter has {list(param.shape)}")
            read_local(self.reader, key, param)
        if extra := sorted(set(tensors) - wanted):
            raise _refused(f"tensor {extra[0]} of {file} is not an adapter of the job's "
                           f"model ({len(extra)} such tensors)")


def _refused(why: str) -> SpecError:
    return SpecError("init.adapter_uri", f"init.adapter_uri: {why}")
