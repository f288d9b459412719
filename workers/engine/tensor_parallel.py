"""Tensor parallelism beside FSDP: the device mesh of a job's ranks, the
family's plan applied to a built model, and what TP moves per step.

The mesh is FSDP's data-parallel mesh with a `tp` dimension last:

    tp 1            (shard,)  or  (replicate, shard)          as before
    tp T > 1        (shard, tp)  or  (replicate, shard, tp)   ranks laid out row-major

so consecutive ranks form a TP group (ranks 0..T-1, T..2T-1, ...), which is
what the worker group's placement keeps on one node (workers/cluster/placement.py),
and rank r is data-parallel rank r // T, tensor-parallel rank r % T. The
ranks of a TP group read the same batch; the data splits over the dp ranks.

The seam with the build: `parallelize(model, layout, sharding)` takes a built
model (real or meta-device), applies the family's `tp_plan()` on the `tp`
submesh (`parallelize_module`: each planned parameter becomes a DTensor on
it, the tensor-parallel piece local), then FSDP over the data-parallel
submesh (workers/engine/sharding.py), which shards each rank's TP piece over dp:
the parameters end as DTensors on the whole mesh. Activation checkpointing
wraps blocks after TP, before FSDP. Checkpoints hold those DTensors, so DCP
reshards a step saved at one (dp, tp) to any other.

What TP moves, per rank per optimizer step (bytes this rank sends or
receives under ring algorithms, as workers/engine/comm.py counts them), with n the
tokens of this rank's share of the batch (samples x seq_len), d the width, V
the vocabulary, L the layers, e the activations' bytes per value (the param
dtype), f = (T-1)/T:

    each block      forward: all-gather (attention's input), reduce-scatter
                    (o_proj's output), all-gather (the MLP's input),
                    reduce-scatter (down_proj's output); backward: the same
                    four, transposed                        8 f n d e
                    (activation checkpointing recomputes the forward up to
                    its last saved tensor: both all-gathers and o_proj's
                    reduce-scatter, + 3 f n d e; torch's non-reentrant
                    checkpoint stops before down_proj's, whose output
                    backward does not need)
    embedding       reduce-scatter forward, all-gather backward   2 f n d e
    head            all-gather of its input and of the logits forward,
                    reduce-scatter of the input's gradient    2 f n d e + f n V e

    TP bytes = f n e ((8 + 3 ac) L d + 4 d + V)

The norms' weights are replicated over tp; their gradients, partial sums
over the group's sequence slices, are summed by an all-reduce of 2 f d e
each ((2L + 1) norms). FSDP's own formula (workers/engine/comm.py) applies to each
rank's TP piece of the parameters (`params_per_tp_rank`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule

from workers.schema import JobSpec, ModelSpec, ShardingSpec

TP_DIM = "tp"


@dataclass(frozen=True)
class ParallelLayout:
    """A rank's place in the (dp x tp) mesh."""

    mesh: DeviceMesh  # the whole mesh (a tp dimension only when tp > 1)
    tp: int
    dp_rank: int
    dp_size: int

    @property
    def tp_rank(self) -> int:
        return self.mesh.get_rank() % self.tp

    @property
    def dp_mesh(self) -> DeviceMesh:
        """The mesh FSDP shards over."""
        names = self.mesh.mesh_dim_names or ()
        if TP_DIM not in names:
            return self.mesh
        dp_names = tuple(n for n in names if n != TP_DIM)
        return self.mesh[dp_names[0]] if len(dp_names) == 1 else self.mesh[dp_names]

    @property
    def tp_mesh(self) -> DeviceMesh | None:
        return self.mesh[TP_DIM] if self.tp > 1 else None


def build_layout(spec: JobSpec, world_size: int, device_type: str) -> ParallelLayout:
    """The job's mesh at `world_size` (collective: every rank calls it)."""
    tp = spec.parallelism.tp
    dp = spec.parallelism.dp_size(world_size)
    shape = spec.sharding.mesh_shape(dp)
    names: tuple[str, ...] = ("replicate", "shard") if len(shape) == 2 else ("shard",)
    if tp > 1:
        shape, names = (*shape, tp), (*names, TP_DIM)
    mesh = init_device_mesh(device_type, shape, mesh_dim_names=names)
    return ParallelLayout(mesh=mesh, tp=tp, dp_rank=dist.get_rank() // tp, dp_size=dp)


def apply_tensor_parallel(model: nn.Module, tp_mesh: DeviceMesh) -> None:
    """The family's `tp_plan()` on `tp_mesh`, in place. A tied head is tied
    again to the embedding's DTensor (both split the vocabulary rows alike)."""
    from torch.distributed.tensor.parallel import parallelize_module

    plan = getattr(model, "tp_plan", None)
    if plan is None:
        raise ValueError(f"{type(model).__name__} declares no tensor-parallel plan")
    styles = plan()
    from workers.models.lora import LoraLinear

    if targets := tuple({n.rsplit(".", 1)[-1] for n, m in model.named_modules()
                         if isinstance(m, LoraLinear)}):
        from workers.engine.adapters import lora_styles  # adapters split as their layers do

        styles = lora_styles(styles, targets)
    parallelize_module(model, tp_mesh, styles)
    if targets:  # a style that re-registers a parameter (SequenceParallel's norms) unfreezes it
        from workers.engine.adapters import freeze_base

        freeze_base(model)
    if getattr(model, "tied", False):
        head: Any = model.head  # the engine's view of a decoder (workers/models)
        head.weight = cast(nn.Module, model.embedding).weight


def parallelize(model: nn.Module, layout: ParallelLayout, sharding: ShardingSpec, *,
                compiled: bool = False) -> list[FSDPModule]:
    """TP (when tp > 1), then FSDP over the data-parallel mesh, each block
    compiled before it is wrapped where `compiled` (train.compile); returns
    the FSDP units in forward order (`shard_model`)."""
    from workers.engine.sharding import shard_model

    if layout.tp_mesh is not None:
        apply_tensor_parallel(model, layout.tp_mesh)
    return shard_model(model, sharding, layout.dp_mesh, compiled=compiled)


# -- what it moves ----------------------------------------------------------------


def replicated_params(cfg: ModelSpec) -> int:
    """Parameters the TP plan leaves whole on every rank of a group: the norms."""
    return (2 * cfg.n_layers + 1) * cfg.d_model


def params_per_tp_rank(cfg: ModelSpec, tp: int) -> int:
    """One rank's TP piece of the parameters (the spec makes every split even)."""
    if tp == 1:
        return cfg.num_params()
    whole = replicated_params(cfg)
    return (cfg.num_params() - whole) // tp + whole


def tp_comm_theory_bytes(
    cfg: ModelSpec, tp: int, tokens: int, act_bytes: int, activation_checkpointing: bool = False
) -> float:
    """TP's bytes per rank per step by the module doc's formula; `tokens` is
    this rank's share of the batch in tokens, `act_bytes` the activations'
    bytes per value."""
    if tp == 1:
        return 0.0
    f = (tp - 1) / tp
    d = cfg.d_model
    per_block = (8 + 3 * activation_checkpointing) * d
    activations = f * tokens * act_bytes * (cfg.n_layers * per_block + 4 * d + cfg.vocab_size)
    norms = 2 * f * replicated_params(cfg) * act_bytes
    return activations + norms
