"""Adapters on a sharded model (the job's `adapter`, workers/spec/adapter.py).

    add_adapters(model, job)     on the meta-device model, before TP and FSDP:
                                 each targeted `nn.Linear` of every block becomes
                                 a `LoraLinear` (workers/models/lora.py); every
                                 other parameter is frozen and held at
                                 `sharding.param_dtype`
    lora_styles(plan, targets)   the family's tensor-parallel plan with its
                                 targeted layers' styles made adapter-aware
    AdapterWeights(base, job)    the weight source: the base's (a Hugging Face
                                 directory or seeded, which never sees an adapter
                                 tensor), then the adapters' (seeded: A as
                                 nn.Linear's init, B zero; or a PEFT adapter
                                 directory, `init.adapter_uri`)
    base_identity(job)           what the adapters were trained on: the model's
                                 config hash and a sha256 of every base tensor
                                 (collective; each rank digests a share), kept in
                                 every checkpoint's manifest; a resume against
                                 other base weights is refused (`BaseMismatch`)

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

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

from workers.engine.build import WeightSource, adapter_tensors, copy_full, seed_of
from workers.engine.errors import BaseMismatch
from workers.engine.sharding import DTYPES
from workers.models.lora import LoraLinear, is_adapter, lora_init
from workers.spec import JobSpec, SpecError
from workers.spec.adapter import AdapterSpec


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
        kind = {ColwiseParallel: LoraColwise, RowwiseParallel: LoraRowwise}.get(type(style))
        if kind is not None and key.rsplit(".", 1)[-1] in targets:
            aware = kind.__new__(kind)
            aware.__dict__.update(style.__dict__)
            style = aware
        out[key] = style
    return out


@dataclass
class AdapterWeights:
    """The base's weights from `base`, then each adapter's: from `adapter_uri`
    (a PEFT adapter directory, checked against the job's `adapter`) where
    given, else seeded by (`seed`, its name)."""

    base: WeightSource
    seed: int
    adapter_uri: str | None = None
    adapter: AdapterSpec | None = None

    def fill(self, model: nn.Module) -> None:
        self.base.fill(model)
        if self.adapter_uri is not None:
            from workers.engine.peft_format import PeftAdapterWeights

            assert self.adapter is not None  # the spec allows an adapter_uri only with one
            PeftAdapterWeights(self.adapter_uri, self.adapter).fill(model)
            return
        for name, tensor in adapter_tensors(model):
            full = torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu")
            lora_init(name, full, torch.Generator().manual_seed(seed_of(self.seed, name)))
            copy_full(tensor, full)


# -- the base's identity -------------------------------------------------------------


def base_identity(job: JobSpec) -> dict[str, Any]:
    """The base the adapters train on: the model's config (its spec's hash),
    and where its weights come from: a sha256 of every tensor of the
    Hugging Face directory (`init.uri`; collective, each rank digests every
    world-size-th tensor), or the seed of a seeded base."""
    model = job.model.model_dump(mode="json", exclude={"config_uri"})
    config = hashlib.sha256(json.dumps(model, sort_keys=True).encode()).hexdigest()
    if job.init is None or job.init.uri is None:
        return {"config": config, "seed": job.train.seed}
    from checkpoints.safetensors_io import SafetensorsReader
    from workers.datasets.storage import data_storage_options

    reader = SafetensorsReader(job.init.uri, data_storage_options())
    names = sorted(reader.tensors)
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    mine = {name: hashlib.sha256(reader.read_box(name)).hexdigest() for name in names[rank::world]}
    shares: list[Any] = [None] * world
    if world > 1:
        dist.all_gather_object(shares, mine)
    else:
        shares = [mine]
    tensors = {name: digest for share in shares for name, digest in share.items()}
    return {"config": config, "tensors": dict(sorted(tensors.items()))}


def check_base(saved: dict[str, Any] | None, now: dict[str, Any], step: int) -> None:
    """Refuse to resume adapters saved on another base (`BaseMismatch` names the difference)."""
    if saved is None:
        raise BaseMismatch(f"checkpoint step {step} holds no base identity: it was not saved "
                           "by an adapter job, so its adapters cannot be resumed")
    if saved.get("config") != now.get("config"):
        raise BaseMismatch(f"checkpoint step {step}'s adapters were trained on another model "
                           "config than this job's")
    if saved.get("seed") != now.get("seed"):
        raise BaseMismatch(f"checkpoint step {step}'s adapters were trained on a base seeded "
                           f"{saved.get('seed')}, this job's is {now.get('seed')}")
    old, new = saved.get("tensors") or {}, now.get("tensors") or {}
    changed = sorted(n for n in old.keys() | new.keys() if old.get(n) != new.get(n))
    if changed:
        raise BaseMismatch(f"checkpoint step {step}'s adapters were trained on other base "
                           f"weights: tensor {changed[0]} differs from init.uri's "
                           f"({len(changed)} tensors differ)")
