"""FSDP2 wrapping of a decoder (any family: workers/models) by sharding strategy.

    full_shard     ZeRO-3: params, grads and optimizer state sharded; params
                   freed after forward and gathered again for backward
    shard_grad_op  ZeRO-2: as above but params stay gathered from forward to
                   backward (reshard_after_forward=False)
    hybrid_shard   a (replicate, shard) mesh: shard within a group, all-reduce
                   gradients across groups
    no_shard       replicated, DDP-like: a (world, 1) mesh, so gradients are
                   all-reduced and nothing is gathered

Units: the token embedding, every `blocks_per_unit` consecutive blocks, the
head; the root keeps the final norm (and GPT's position table). Tied
embeddings share one parameter, which must live in one unit: the root keeps
both the embedding and the head then. Every unit (the
root included) reshards after forward under full_shard, so each parameter is
gathered exactly twice a step, as the primer counts.

Prefetch (`prefetch_forward` / `prefetch_backward` = d > 0): each unit issues
the all-gathers of the next d units in forward (and, in backward, of the
previous d) as soon as its own have arrived, through FSDP's explicit
`set_modules_to_{forward,backward}_prefetch`; 0 keeps FSDP's implicit
one-ahead prefetch. On GPUs FSDP overlaps through its side streams; on CPUs
there are no streams and a blocking gloo all-gather overlaps nothing, so
there the unshards are also issued async (`_set_unshard_async_op`): gloo runs
them on its own thread while this one computes, and FSDP waits on the Work
before it uses the parameters.
"""

from __future__ import annotations

from typing import TypedDict, cast, get_args

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import (
    CPUOffloadPolicy,
    FSDPModule,
    MixedPrecisionPolicy,
    OffloadPolicy,
    fully_shard,
)

from workers.engine.compilation import compile_blocks
from workers.models import Decoder
from workers.schema import Dtype, ShardingSpec

# The spec's dtype names are torch's own: the allowed values stay written once.
DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in get_args(Dtype)}


def build_mesh(cfg: ShardingSpec, world_size: int, device_type: str) -> DeviceMesh:
    shape = cfg.mesh_shape(world_size)
    names = ("replicate", "shard") if len(shape) == 2 else ("shard",)
    return init_device_mesh(device_type, shape, mesh_dim_names=names)


class _ShardOptions(TypedDict, total=False):
    """The keyword arguments every `fully_shard` call of `shard_model` gets."""

    mesh: DeviceMesh
    reshard_after_forward: bool
    mp_policy: MixedPrecisionPolicy
    offload_policy: OffloadPolicy


def apply_activation_checkpointing(model: nn.Module) -> None:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl,
        checkpoint_wrapper,
    )

    blocks = cast(Decoder, model).blocks
    for i, block in enumerate(blocks):
        blocks[i] = checkpoint_wrapper(block, checkpoint_impl=CheckpointImpl.NO_REENTRANT)


def shard_model(model: nn.Module, cfg: ShardingSpec, mesh: DeviceMesh, *,
                compiled: bool = False) -> list[FSDPModule]:
    """Wraps `model` in place; returns the FSDP units in forward order. With
    `compiled` (train.compile) each block is compiled once activation
    checkpointing has wrapped it, before FSDP does (workers/engine/compilation.py)."""
    if cfg.activation_checkpointing:
        apply_activation_checkpointing(model)
    if compiled:
        compile_blocks(model)
    kwargs: _ShardOptions = {
        "mesh": mesh,
        "reshard_after_forward": cfg.strategy in ("full_shard", "hybrid_shard"),
        "mp_policy": MixedPrecisionPolicy(
            param_dtype=DTYPES[cfg.param_dtype], reduce_dtype=DTYPES[cfg.reduce_dtype]
        ),
    }
    if cfg.cpu_offload:
        # pin_memory() needs a GPU; on CPU-only machines offload must not pin.
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=torch.cuda.is_available())
    decoder = cast(Decoder, model)
    # fully_shard returns the module(s) it was given, now FSDP modules.
    units: list[FSDPModule] = [] if decoder.tied else [fully_shard(decoder.embedding, **kwargs)]
    blocks = list(decoder.blocks)
    k = cfg.blocks_per_unit
    for start in range(0, len(blocks), k):
        group = blocks[start : start + k]
        if len(group) > 1:
            units.append(fully_shard(group, **kwargs)[0])
        else:
            units.append(fully_shard(group[0], **kwargs))
    if not decoder.tied:
        units.append(fully_shard(decoder.head, **kwargs))
    units.append(fully_shard(model, **kwargs))
    return units


def set_prefetch(units: list[FSDPModule], forward: int, backward: int, device_type: str) -> None:
    """Explicit prefetch `forward` / `backward` units deep (0: FSDP's implicit)
    on the units `shard_model` returned. The root gathers first in forward and
    in backward (its outputs are the logits), then the others in order."""
    *order, root = units
    if forward:
        for i, unit in enumerate([root, *order]):
            unit.set_modules_to_forward_prefetch(order[i : i + forward])
    if backward:
        reverse = order[::-1]
        for i, unit in enumerate([root, *reverse]):
            unit.set_modules_to_backward_prefetch(reverse[i : i + backward])
    if (forward or backward) and device_type == "cpu":
        root._set_unshard_async_op(True)  # else nothing overlaps: see the module doc
