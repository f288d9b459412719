"""A sharded build: no rank ever holds the whole model.

    build_sharded(job, device, parallelize, weights=None) -> ShardedModel

1. Build on the meta device: shapes only, no storage.
2. `parallelize` it: tensor parallelism where the job asks for it
   (`parallelize_module`, workers/engine/tensor_parallel.py), then `fully_shard`
   each unit (workers/engine/sharding.py): parameters become DTensors. With
   `train.compile` each block is compiled just before FSDP wraps it
   (workers/engine/compilation.py; it compiles at the trainer's warm-up).
3. `to_empty`: each rank allocates its own shards, uninitialised.
4. A `WeightSource` fills them: by default `SeededInit`, which generates each
   parameter's FULL value from a generator seeded by (train.seed, the
   parameter's name), one parameter at a time, and keeps this rank's piece of
   it. The full weights are therefore the same at any world size and any
   layout (FSDP's Shard(0), TP's Shard(0)/Shard(1), Replicate), which
   DTensor's own random init on CPU is not; the transient memory is one
   parameter, never the model.

Where initial weights come from is the `WeightSource` seam: `fill(model)` is
called once, after `to_empty`, with the model whose parameters are this
rank's shards; it must write every parameter and buffer. A source that reads
weights (Hugging Face safetensors, another job's checkpoint) reads for each
parameter only `local_region(param)` of the full tensor, named by
`canonical_name`. The caller hands the build its source (the trainer picks
the job's: `workers.engine.init_weights.weight_source`); this module reads
no weights itself.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

from workers.models.llama import hf_init
from workers.models.lora import is_adapter
from workers.schema import JobSpec, SpecError

# Wrappers that put a prefix into parameter names (activation checkpointing,
# torch.compile): a parameter's name, and so its seed, must not depend on them.
_WRAPPER_PREFIXES = ("_checkpoint_wrapped_module.", "_orig_mod.")


class WeightSource(Protocol):
    """Where a sharded model's initial weights come from."""

    def fill(self, model: nn.Module) -> None:
        """Write every parameter and buffer of `model` (after `to_empty`: each
        a DTensor shard or a plain tensor of this rank, uninitialised)."""
        ...


def canonical_name(name: str) -> str:
    """A parameter's name as the model defines it (Hugging Face's, for
    Llama), whatever wrappers the engine put around its modules."""
    for prefix in _WRAPPER_PREFIXES:
        name = name.replace(prefix, "")
    return name


def named_tensors(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Every parameter (a tied one once) and buffer of the model itself, by
    canonical name: not its adapters' (`adapter_tensors`)."""
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        if not is_adapter(name):
            yield canonical_name(name), tensor


def adapter_tensors(model: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """The adapters' parameters (workers/models/lora.py), by canonical name."""
    for name, tensor in model.named_parameters():
        if is_adapter(name):
            yield canonical_name(name), tensor


def local_region(tensor: torch.Tensor) -> tuple[slice, ...]:
    """The part of the full tensor this rank holds, as slices of the full
    shape: a DTensor's local shard under any placements and mesh (FSDP's
    Shard(0), tensor parallelism's Shard(0) / Shard(1), Replicate, and
    their combinations); all of a plain tensor."""
    if not isinstance(tensor, DTensor):
        return tuple(slice(0, n) for n in tensor.shape)
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    shape, offset = compute_local_shape_and_global_offset(
        tensor.shape, tensor.device_mesh, tensor.placements
    )
    return tuple(slice(o, o + n) for o, n in zip(offset, shape, strict=True))


def copy_full(tensor: torch.Tensor, full: torch.Tensor) -> None:
    """Write this rank's piece of `full` (the whole parameter's value) into `tensor`."""
    local = tensor.to_local() if isinstance(tensor, DTensor) else tensor
    with torch.no_grad():
        local.copy_(full[local_region(tensor)])


def seed_of(seed: int, name: str) -> int:
    """A parameter's own seed: a stable hash of (the job's seed, its name)."""
    digest = hashlib.sha256(f"{seed}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


@dataclass(frozen=True)
class SeededInit:
    """The default source: each parameter's full value from its own
    generator, seeded by (`seed`, its name), by the model's
    `init_parameter(name, tensor, generator)` rule (else `hf_init`);
    one parameter in memory at a time; this rank keeps its piece."""

    seed: int

    def fill(self, model: nn.Module) -> None:
        rule: Callable[[str, torch.Tensor, torch.Generator], None] = getattr(
            model, "init_parameter", hf_init)
        for name, tensor in named_tensors(model):
            full = torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu")
            with torch.no_grad():
                rule(name, full, torch.Generator().manual_seed(seed_of(self.seed, name)))
            copy_full(tensor, full)
            del full


@dataclass
class ShardedModel:
    model: Any  # the nn.Module, its root an FSDPModule too (set_requires_gradient_sync, ...)
    units: list[FSDPModule]  # in forward order, the root last (workers/engine/sharding.py)
    num_params: int  # of the full model (a tied parameter once), not counting adapters


def build_sharded(
    job: JobSpec,
    device: torch.device,
    parallelize: Callable[[nn.Module], list[FSDPModule]],
    *,
    weights: WeightSource | None = None,
) -> ShardedModel:
    """The job's model with only this rank's shards allocated on `device` (on
    the CPU where the job offloads), filled by `weights` (default: seeded
    random, `SeededInit(job.train.seed)`). `parallelize` turns the meta-device model into
    FSDP units in place (tensor parallelism first where the job asks for it,
    workers/engine/tensor_parallel.py; `shard_model` alone otherwise) and returns
    them in forward order."""
    if not job.model.resolved:
        raise SpecError("model.config_uri", "model.config_uri must be resolved into the model's "
                        "fields before a build (the service does at submit, workers.engine.local at start)")
    with torch.device("meta"):
        model = job.model.family_spec.build(job.model)
    num_params = sum(p.numel() for p in model.parameters())
    if job.adapter is not None:  # LoRA on the targets, the rest frozen (workers/engine/adapters.py)
        from workers.engine.adapters import add_adapters

        add_adapters(model, job)
    units = parallelize(model)
    model.to_empty(device=torch.device("cpu") if job.sharding.cpu_offload else device)
    (weights or SeededInit(job.train.seed)).fill(model)
    return ShardedModel(model, units, num_params)
