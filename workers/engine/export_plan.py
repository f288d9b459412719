"""What an export writes, and the checkpoint it reads it from: the pieces the
model export (workers/engine/export.py) and the adapter kinds
(workers/engine/adapter_export.py) share.

    ExportPlan          the tensors an export writes (names, file dtype,
                        shapes: the safetensors headers are written before any
                        tensor is read), a function that makes each one when
                        its turn comes, the small files, the manifest's extra
    CheckpointTensors   a committed step's DCP checkpoint, read one full
                        model tensor at a time (`dcp.load` of that one key, no
                        process group)

A plan's `tensor(name)` is called once per tensor, in the plan's order, and
its result is written and dropped before the next: an export holds one full
tensor (and what it is made from) at a time, whatever the model's size.

Importing this module does not import torch; its methods do.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from checkpoints.errors import CheckpointInvalid
from checkpoints.safetensors_io import TensorEntry

DCP_MODEL_PREFIX = "app.model."  # checkpoints.stateful.ModelAndOptimizer under "app"
SAFETENSORS_DTYPE = {"float32": "F32", "bfloat16": "BF16"}


@dataclass
class ExportPlan:
    entries: list[TensorEntry]  # written in this order
    tensor: Callable[[str], Any]  # an entry's full tensor (any float dtype: converted on write)
    small: dict[str, bytes]  # config.json, tokenizer files, adapter_config.json, ...
    extra: dict[str, Any] = field(default_factory=dict)  # into the export's manifest
    # PEFT's one weights file by its name; None: a Hugging Face model's, sharded by size
    weights_file: str | None = None


class CheckpointTensors:
    """The model tensors (`app.model.<name>`) of the DCP checkpoint at `step_uri`."""

    def __init__(self, step_uri: str, storage_options: Mapping[str, Any], step: int) -> None:
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader

        self.step_uri, self.storage_options, self.step = step_uri, dict(storage_options), step
        self.metadata = FsspecReader(step_uri, **self.storage_options).read_metadata()

    def names(self) -> set[str]:
        """Every model tensor the checkpoint holds (an adapter job's: its adapters only)."""
        return {key[len(DCP_MODEL_PREFIX):] for key in self.metadata.state_dict_metadata
                if key.startswith(DCP_MODEL_PREFIX)}

    def check(self, name: str, shape: tuple[int, ...]) -> None:
        """`CheckpointInvalid` unless the checkpoint holds tensor `name` of `shape`."""
        from torch.distributed.checkpoint.metadata import TensorStorageMetadata

        meta = self.metadata.state_dict_metadata.get(DCP_MODEL_PREFIX + name)
        if not isinstance(meta, TensorStorageMetadata) or tuple(meta.size) != shape:
            raise CheckpointInvalid(f"step {self.step}: tensor {name} is not in the checkpoint "
                                    f"with shape {list(shape)}")

    def load(self, name: str) -> Any:
        """The full tensor `name`, at the dtype it was saved in."""
        import torch
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader

        meta: Any = self.metadata.state_dict_metadata[DCP_MODEL_PREFIX + name]
        tensor = torch.empty(tuple(meta.size), dtype=meta.properties.dtype)
        with warnings.catch_warnings():  # "assuming ... a single process": it is
            warnings.simplefilter("ignore", UserWarning)
            dcp.load({DCP_MODEL_PREFIX + name: tensor},
                     storage_reader=FsspecReader(self.step_uri, **self.storage_options),
                     no_dist=True)
        return tensor
