"""Models the engine can build, by `ModelSpec.family`: the built-ins here,
every family (an operator's too) through the registry (workers/schema/families.py).

Every family exposes the engine's view of a decoder (workers/engine/sharding.py):
`embedding`, `blocks` (a ModuleList), `head`, and `tied` (the head shares the
embedding's weight).
"""

from typing import Protocol

from torch import nn

from workers.models.gpt import GPT, Block
from workers.models.llama import Llama

__all__ = ["GPT", "Block", "Decoder", "Llama", "build_model"]


class Decoder(Protocol):
    """The engine's view of a model of any family (what sharding reads)."""

    @property
    def embedding(self) -> nn.Module: ...
    @property
    def blocks(self) -> nn.ModuleList: ...
    @property
    def head(self) -> nn.Module: ...
    @property
    def tied(self) -> bool: ...


def build_model(cfg):
    """The model of `cfg` (a ModelSpec), by its registered family."""
    return cfg.family_spec.build(cfg)
