"""The model section: a registered family and its shape, or a Hugging Face
config.json to read it from."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from workers.schema.base import SpecError, _Section, refusal, registered
from workers.schema.families import (
    OPTIONAL_FIELDS,
    Family,
    ParamCount,
    model_family,
    registered_families,
)

# Fields only the Llama family reads (a family that does not read one refuses it).
LLAMA_FIELDS = ("n_kv_heads", "ffn_dim", "rope_theta", "tie_embeddings", "norm_eps", "qkv_bias")
# With `config_uri`, the model's shape comes from the file; a spec may add only these.
CONFIG_URI_FIELDS = frozenset({"config_uri", "seq_len"})


def config_in(directory: str) -> str:
    """The config.json of a Hugging Face model directory (a URI or a path):
    what `init: {uri}` alone reads the model from."""
    return directory.rstrip("/") + "/config.json"


class ModelSpec(_Section):
    # a registered model family (workers/schema/families.py: the `brigade.models` entry points)
    family: Annotated[str, Field(min_length=1, max_length=64,
                                 json_schema_extra=registered(registered_families))] = "gpt"
    n_layers: Annotated[int, Field(ge=1, le=512)] = 2
    d_model: Annotated[int, Field(ge=1, le=65536)] = 64
    n_heads: Annotated[int, Field(ge=1, le=1024)] = 4
    seq_len: Annotated[int, Field(ge=2, le=65536)] = 64
    vocab_size: Annotated[int, Field(ge=2, le=1_048_576)] = 256
    mlp_ratio: Annotated[int, Field(ge=1, le=64)] = 4  # the MLP's width over d_model
    # llama: grouped-query attention's key/value heads (unset: n_heads, plain multi-head)
    n_kv_heads: Annotated[int, Field(ge=1, le=1024)] | None = None
    # llama: the SwiGLU MLP's width (unset: mlp_ratio x d_model)
    ffn_dim: Annotated[int, Field(ge=1, le=1_048_576)] | None = None
    rope_theta: Annotated[float, Field(gt=0, le=1e12)] = 10000.0  # llama: rotary base
    tie_embeddings: bool = False  # llama: the LM head shares the token embedding
    norm_eps: Annotated[float, Field(gt=0, le=1)] = 1e-5  # llama: RMSNorm's epsilon
    qkv_bias: bool = False  # llama: biases on q, k, v (Qwen2-style)
    # A Hugging Face config.json (Llama, Mistral, Qwen2) under the tenant's data
    # prefix: read at submit and resolved into the fields above
    # (service/intake/model_config.py); the stored spec holds the fields, not the URI.
    config_uri: Annotated[str, Field(min_length=1, max_length=2048)] | None = None

    @field_validator("family")
    @classmethod
    def _registered(cls, value: str) -> str:
        from workers.schema.families import FamilyNotFound, model_family

        try:
            model_family(value)
        except FamilyNotFound as e:
            raise PydanticCustomError("family", "{reason}", {"reason": str(e)}) from None
        return value

    @field_validator("config_uri")
    @classmethod
    def _printable_uri(cls, value: str | None) -> str | None:
        if value is not None and not value.isprintable():
            raise ValueError("model.config_uri must not contain control characters")
        return value

    @model_validator(mode="after")
    def _buildable(self) -> ModelSpec:
        if self.config_uri is not None:
            for name in sorted(self.model_fields_set - CONFIG_URI_FIELDS):
                raise refusal(name, f"model.{name} is read from model.config_uri; with it a "
                                    "spec may set only model.seq_len", getattr(self, name))
            return self
        if self.d_model % self.n_heads:
            raise refusal("d_model", f"model.d_model ({self.d_model}) must be divisible by "
                                     f"model.n_heads ({self.n_heads})", self.d_model)
        family = self.family_spec
        if unread := self.set_unread(OPTIONAL_FIELDS, family.reads):
            raise refusal(unread, f"model.{unread} is not a field of the {self.family!r} family",
                          getattr(self, unread))
        problem = family.check(self)
        if problem is not None:
            raise refusal(problem[0], problem[1], getattr(self, problem[0], None))
        return self

    @property
    def family_spec(self) -> Family:
        """The registered family (its builder, the fields it reads, its counts)."""
        return model_family(self.family)

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def ffn_width(self) -> int:
        return self.ffn_dim or self.mlp_ratio * self.d_model

    @property
    def resolved(self) -> bool:
        """Whether the fields say the model (False: `config_uri` is still to be read)."""
        return self.config_uri is None

    def param_count(self) -> ParamCount:
        """Parameters by FSDP unit, from the spec alone (kept in sync by a test)."""
        if not self.resolved:
            raise SpecError("model.config_uri", "model.config_uri has not been resolved into "
                                                "the model's fields (the service does at submit)")
        return self.family_spec.count_params(self)

    def num_params(self) -> int:
        """Parameter count of the model this spec builds."""
        return self.param_count().total
