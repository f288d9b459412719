"""FSDP2 wrapping of a GPT by sharding strategy.

    full_shard     ZeRO-3: params, grads and optimizer state sharded; params
                   freed after forward and gathered again for backward
    shard_grad_op  ZeRO-2: as above but params stay gathered from forward to
                   backward (reshard_after_forward=False)
    hybrid_shard   a (replicate, shard) mesh: shard within a group, all-reduce
                   gradients across groups
    no_shard       replicated, DDP-like: a (world, 1) mesh, so gradients are
                   all-reduced and nothing is gathered

Units: the token embedding, every `blocks_per_unit` consecutive blocks, the
head; the root keeps the final norm and the position table. Every unit (the
root included) reshards after forward under full_shard, so each parameter is
gathered exactly twice a step, as the primer counts.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

from workers.config import ShardingConfig

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def build_mesh(cfg: ShardingConfig, world_size: int, device_type: str) -> DeviceMesh:
    shape = cfg.mesh_shape(world_size)
    names = ("replicate", "shard") if len(shape) == 2 else ("shard",)
    return init_device_mesh(device_type, shape, mesh_dim_names=names)


def apply_activation_checkpointing(model: nn.Module) -> None:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl,
        checkpoint_wrapper,
    )

    for i, block in enumerate(model.blocks):
        model.blocks[i] = checkpoint_wrapper(block, checkpoint_impl=CheckpointImpl.NO_REENTRANT)


def shard_model(model: nn.Module, cfg: ShardingConfig, mesh: DeviceMesh) -> list[nn.Module]:
    """Wraps `model` in place; returns the FSDP units in forward order."""
    if cfg.activation_checkpointing:
        apply_activation_checkpointing(model)
    kwargs = {
        "mesh": mesh,
        "reshard_after_forward": cfg.strategy in ("full_shard", "hybrid_shard"),
        "mp_policy": MixedPrecisionPolicy(
            param_dtype=DTYPES[cfg.param_dtype], reduce_dtype=DTYPES[cfg.reduce_dtype]
        ),
    }
    if cfg.cpu_offload:
        # pin_memory() needs a GPU; on CPU-only machines offload must not pin.
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=torch.cuda.is_available())
    units: list[nn.Module] = [fully_shard(model.tok_emb, **kwargs)]
    blocks = list(model.blocks)
    k = cfg.blocks_per_unit
    for start in range(0, len(blocks), k):
        group = blocks[start : start + k]
        fully_shard(group if len(group) > 1 else group[0], **kwargs)
        units.append(group[0])
    units.append(fully_shard(model.head, **kwargs))
    fully_shard(model, **kwargs)
    units.append(model)
    return units
