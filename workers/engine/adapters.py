"""Adapters on a sharded model (the job's `adapter`, workers/schema/adapter.py).

    add_adapters(model, job)     on the meta-device model, before TP and FSDP:
                                 each targeted `nn.Linear` of every block becomes
                                 a `LoraLinear` (workers/models/lora.py); every
                                 other parameter is frozen and held at
                                 `sharding.param_dtype`
    lora_styles(plan, targets)   the family's tensor-parallel plan with its
                                 targeted layers' styles made adapter-aware

Their weights come from `AdapterWeights` (workers/engine/init_weights.py:
the base's source, then the adapters': seeded, or a PEFT directory); what
they were trained on is `base_identity` (workers/engine/base_identity.py),
kept in every checkpoint's manifest.

FSDP shards each LoraLinear's A and B with its block, so a block's unit
gathers its frozen weights at their dtype beside its adapters (FSDP2 takes
frozen and trainable parameters of different dtypes in one unit: it
all-gathers them as bytes) and reduce-scatters only the adapters' gradients.
Under tensor parallelism a column-parallel layer's B splits by rows as its
weight does (its A is whole on every rank of the group); a row-parallel
layer's A splits by columns as its weight does (its B is whole): the
adapter's output is then sharded, or partial, exactly as the base's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

from workers.engine.sharding import DTYPES
from workers.models.lora import LoraLinear, is_adapter
from workers.schema import JobSpec, SpecError


def add_adapters(model: nn.Module, job: JobSpec) -> int:
    """Replace the targeted linear layers of every block by `LoraLinear`s and
    freeze the rest at `sharding.param_dtype`; returns the adapter parameters."""
    adapter = job.adapter
    assert adapter is not None
    targets, found = set(adapter.targets), set()
    blocks: Any = getattr(model, "blocks")  # noqa: B009 - the engine's view of a decoder
    for block in blocks:
        for parent in list(block.modules()):
            for child_name, child in list(parent.named_children()):
                if child_name in targets and type(child) is nn.Linear:
                    lora = LoraLinear(child.in_features, child.out_features,
                                      bias=child.bias is not None, rank=adapter.rank,
                                      alpha=adapter.alpha, dropout=adapter.dropout,
                                      device=child.weight.device)
                    setattr(parent, child_name, lora)
                    found.add(child_name)
    if missing := targets - found:
        raise SpecError("adapter.targets", f"adapter.targets: no linear layer named "
                        f"{', '.join(sorted(missing))} in the model's blocks")
    freeze_base(model, DTYPES[job.sharding.param_dtype])
    return sum(p.numel() for name, p in model.named_parameters() if is_adapter(name))


def freeze_base(model: nn.Module, dtype: torch.dtype | None = None) -> None:
    """Every parameter but the adapters' frozen, and converted to `dtype` if
    given (a tied parameter stays one parameter). Called again after tensor
    parallelism, whose styles make new parameters."""
    trainable = {id(p) for name, p in model.named_parameters() if is_adapter(name)}
    frozen: dict[int, nn.Parameter] = {}
    for module in model.modules():
        for name, param in list(module._parameters.items()):
            if param is None or id(param) in trainable:
                continue
            if id(param) not in frozen:
                value = param.detach() if dtype is None else param.detach().to(dtype)
                frozen[id(param)] = nn.Parameter(value, requires_grad=False)
            module._parameters[name] = frozen[id(param)]


def _distribute(module: nn.Module, name: str, placement: Any, mesh: Any, src: int | None) -> None:
    param = getattr(module, name, None)
    if param is None:
        return
    module.register_parameter(name, nn.Parameter(
        distribute_tensor(param, mesh, [placement], src_data_rank=src),
        requires_grad=param.requires_grad))


class LoraColwise(ColwiseParallel):
    """ColwiseParallel for a `LoraLinear`: weight and bias by rows, B by rows, A whole."""

    # `distribute_module` calls this for the layer and then for each of its
    # children: A and B are placed with their layer, so a child is left alone.
    def _partition_linear_fn(self, name: Any, module: nn.Module, device_mesh: Any) -> None:
        if not isinstance(module, LoraLinear):
            return
        src = self.src_data_rank
        _distribute(module, "weight", Shard(0), device_mesh, src)
        _distribute(module, "bias", Shard(0), device_mesh, src)
        _distribute(module.lora_A, "weight", Replicate(), device_mesh, src)
        _distribute(module.lora_B, "weight", Shard(0), device_mesh, src)


class LoraRowwise(RowwiseParallel):
    """RowwiseParallel for a `LoraLinear`: weight by columns (bias whole), A by columns, B whole."""

    def _partition_linear_fn(self, name: Any, module: nn.Module, device_mesh: Any) -> None:
        if not isinstance(module, LoraLinear):  # a child: placed with its layer
            return
        super()._partition_linear_fn(name, module, device_mesh)
        _distribute(module.lora_A, "weight", Shard(1), device_mesh, self.src_data_rank)
        _distribute(module.lora_B, "weight", Replicate(), device_mesh, self.src_data_rank)


def lora_styles(plan: dict[str, Any], targets: tuple[str, ...]) -> dict[str, Any]:
    """`plan` with each targeted layer's column- or row-wise style made adapter-aware."""
    out = {}
    for key, style in plan.items():
        kinds: dict[type, type] = {ColwiseParallel: LoraColwise, RowwiseParallel: LoraRowwise}
        kind = kinds.get(type(style))
        if kind is not None and key.rsplit(".", 1)[-1] in targets:
            aware: Any = object.__new__(kind)  # the same settings, the adapter-aware partition
            aware.__dict__.update(style.__dict__)
            style = aware
        out[key] = style
    return out
