"""Model families, found by name through the `brigade.models` entry-point group.

A family is a `Family`: its name, the model class (or build function) that
the engine calls with the `ModelSpec` (on the meta device, `workers/engine/build.py`),
the optional `ModelSpec` fields it reads, and how to count its parameters
(and the ones a token is multiplied by, its FLOPs: workers/schema/flops.py)
from the spec alone. The built-ins `gpt` and `llama` are registered exactly
as an operator's own family is, in a distribution's metadata:

    [project.entry-points."brigade.models"]
    gpt = "workers.schema.families:GPT"
    mylm = "mylm.family:FAMILY"      # an operator's package: no edit of Brigade

Torch-free: the spec validates a family's name against the entry points'
names (read with `importlib.metadata`, nothing imported) and reads the
`Family` object that the entry point names, so the module that holds it must
not import torch either; only `Family.build` imports the model's module.

The model a family builds exposes the engine's view of a decoder
(workers/engine/sharding.py): `embedding`, `blocks` (an `nn.ModuleList`), `head`
and `tied`; and, optionally, `init_parameter(name, tensor, generator)`, the
rule that fills one full parameter (or buffer: a family with buffers must
give their rule) at the start (workers/engine/build.py), and
`tp_plan()`, its tensor-parallel plan (a family that has one says
`tensor_parallel=True`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workers.schema.registry import Registry

ENTRY_POINT_GROUP = "brigade.models"

# Fields of ModelSpec that only some families read: a spec that sets one its
# family does not read (to other than its default) is refused.
OPTIONAL_FIELDS = ("mlp_ratio", "n_kv_heads", "ffn_dim", "rope_theta", "tie_embeddings",
                   "norm_eps", "qkv_bias")


@dataclass(frozen=True)
class ParamCount:
    """A model's parameters by where FSDP puts them (workers/engine/sharding.py):
    the embedding's unit, each block, the head's unit, and what the root keeps
    itself (final norm, position table). Tied: the head shares the embedding,
    and the root holds both."""

    embedding: int
    block: int
    n_blocks: int
    head: int
    root: int
    tied: bool = False

    @property
    def total(self) -> int:
        return self.embedding + self.n_blocks * self.block + (0 if self.tied else self.head) + self.root

    def largest_unit(self, blocks_per_unit: int) -> int:
        """Parameters of the largest FSDP unit (what a rank gathers at once)."""
        blocks = min(blocks_per_unit, self.n_blocks) * self.block
        if self.tied:
            return max(blocks, self.embedding + self.root)
        return max(blocks, self.embedding, self.head, self.root)


@dataclass(frozen=True)
class TensorShapes:
    """A model's parameter shapes from the spec alone: one block's (every
    block has the same) and the rest's (embedding, head, final norm, position
    table), a tied head counted once. What an optimizer whose state is not
    one value per parameter counts its state from (workers/schema/recipes.py)."""

    block: tuple[tuple[int, ...], ...]
    n_blocks: int
    rest: tuple[tuple[int, ...], ...]

    def all(self) -> list[tuple[int, ...]]:
        return [*self.block * self.n_blocks, *self.rest]


def _no_problem(spec: Any) -> tuple[str, str] | None:
    return None


@dataclass(frozen=True)
class Family:
    name: str
    # "module:attribute" of the model class (or a function): called with the
    # ModelSpec, it returns the nn.Module. Imported only when built.
    builder: str
    count_params: Callable[[Any], ParamCount]
    reads: frozenset[str] = field(default_factory=frozenset)  # of OPTIONAL_FIELDS
    # the family's own shape rules: (field, why) a spec cannot be built, or None
    check: Callable[[Any], tuple[str, str] | None] = _no_problem
    # the model declares a tensor-parallel plan (`tp_plan()`, workers/engine/tensor_parallel.py):
    # only such a family may run with parallelism.tp > 1
    tensor_parallel: bool = False
    # its parameters' shapes (kept in sync by a test); unset, an optimizer
    # whose state follows the shapes counts its worst case
    shapes: Callable[[Any], TensorShapes] | None = None
    # the linear layers of a block that adapters may target (workers/schema/adapter.py):
    # name -> (in, out) features; unset, the family takes no adapter
    adapter_targets: Callable[[Any], dict[str, tuple[int, int]]] | None = None
    # of those, the ones its tensor-parallel plan splits by input (row-wise)
    row_parallel: tuple[str, ...] = ()
    # the parameters a token is multiplied by (its FLOPs: workers/schema/flops.py);
    # unset, TorchTitan's rule: all but the token embedding
    dense_params: Callable[[Any], int] | None = None

    def matmul_params(self, spec: Any) -> int:
        """Parameters each token goes through as a matrix product: the blocks,
        the head (a tied one too: the lookup is free, the product is not) and
        the final norm, not the embedding tables a token only indexes."""
        if self.dense_params is not None:
            return self.dense_params(spec)
        count = self.count_params(spec)
        return count.total - count.embedding

    def build(self, spec: Any) -> Any:
        module, _, attribute = self.builder.partition(":")
        return getattr(importlib.import_module(module), attribute)(spec)


class FamilyNotFound(LookupError):
    def __init__(self, name: str, known: list[str]):
        super().__init__(f"model.family {name!r} is not a registered model family "
                         f"(registered: {', '.join(known) or 'none'})")


_families = Registry(ENTRY_POINT_GROUP, Family, "model family", FamilyNotFound)


def registered_families() -> list[str]:
    """The registered families' names, sorted (nothing is imported)."""
    return _families.names()


def model_family(name: str) -> Family:
    """The registered family `name`; `FamilyNotFound` naming those there are."""
    return _families.get(name)


# -- the built-ins ---------------------------------------------------------------


def _gpt_params(spec: Any) -> ParamCount:
    d, m = spec.d_model, spec.mlp_ratio
    block = 2 * 2 * d + 3 * d * d + d * d + 2 * m * d * d  # 2 LayerNorms, qkv, proj, mlp
    return ParamCount(embedding=spec.vocab_size * d, block=block, n_blocks=spec.n_layers,
                      head=spec.vocab_size * d, root=spec.seq_len * d + 2 * d)  # pos, ln_f


def _llama_params(spec: Any) -> ParamCount:
    d = spec.d_model
    kv_width = spec.kv_heads * (d // spec.n_heads)
    attn = 2 * d * d + 2 * d * kv_width + (d + 2 * kv_width if spec.qkv_bias else 0)
    block = attn + 3 * d * spec.ffn_width + 2 * d  # q,o,k,v; gate, up, down; 2 RMSNorms
    return ParamCount(embedding=spec.vocab_size * d, block=block, n_blocks=spec.n_layers,
                      head=spec.vocab_size * d, root=d, tied=spec.tie_embeddings)


def _gpt_dense(spec: Any) -> int:
    count = _gpt_params(spec)  # less the token and position tables: lookups, no products
    return count.total - count.embedding - spec.seq_len * spec.d_model


def _llama_dense(spec: Any) -> int:
    count = _llama_params(spec)  # a tied head is counted once in `total`, as the embedding
    return count.n_blocks * count.block + count.head + count.root


def _gpt_shapes(spec: Any) -> TensorShapes:
    d, v, m = spec.d_model, spec.vocab_size, spec.mlp_ratio
    block = ((d,), (d,), (3 * d, d), (d, d), (d,), (d,), (m * d, d), (d, m * d))  # ln1, attn, ln2, mlp
    return TensorShapes(block, spec.n_layers, ((spec.seq_len, d), (v, d), (d,), (d,), (v, d)))


def _llama_shapes(spec: Any) -> TensorShapes:
    d, v, f = spec.d_model, spec.vocab_size, spec.ffn_width
    q, kv = spec.n_heads * (d // spec.n_heads), spec.kv_heads * (d // spec.n_heads)
    block: tuple[tuple[int, ...], ...] = ((d,), (q, d), (kv, d), (kv, d), (d, q), (d,),
                                          (f, d), (f, d), (d, f))
    if spec.qkv_bias:
        block += ((q,), (kv,), (kv,))
    rest = ((v, d), (d,)) if spec.tie_embeddings else ((v, d), (d,), (v, d))
    return TensorShapes(block, spec.n_layers, rest)


def _llama_linears(spec: Any) -> dict[str, tuple[int, int]]:
    d, f = spec.d_model, spec.ffn_width
    q, kv = spec.n_heads * (d // spec.n_heads), spec.kv_heads * (d // spec.n_heads)
    return {"q_proj": (d, q), "k_proj": (d, kv), "v_proj": (d, kv), "o_proj": (q, d),
            "gate_proj": (d, f), "up_proj": (d, f), "down_proj": (f, d)}


def _llama_check(spec: Any) -> tuple[str, str] | None:
    if spec.n_heads % spec.kv_heads:
        return "n_kv_heads", (f"model.n_kv_heads ({spec.kv_heads}) must divide model.n_heads "
                              f"({spec.n_heads})")
    if (spec.d_model // spec.n_heads) % 2:
        return "n_heads", (f"the head width d_model / n_heads ({spec.d_model} / {spec.n_heads}) "
                           "must be even for rotary embeddings")
    return None


GPT = Family("gpt", "workers.models.gpt:GPT", _gpt_params, frozenset({"mlp_ratio"}),
             shapes=_gpt_shapes, dense_params=_gpt_dense)
LLAMA = Family("llama", "workers.models.llama:Llama", _llama_params, frozenset(OPTIONAL_FIELDS),
               _llama_check, tensor_parallel=True, shapes=_llama_shapes,
               adapter_targets=_llama_linears, row_parallel=("o_proj", "down_proj"),
               dense_params=_llama_dense)
