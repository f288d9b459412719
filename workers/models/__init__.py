"""Models the engine can build, by `ModelSpec.family`: the built-ins here,
every family (an operator's too) through the registry (workers/families.py).

Every family exposes the engine's view of a decoder (workers/sharding.py):
`embedding`, `blocks` (a ModuleList), `head`, and `tied` (the head shares the
embedding's weight).
"""

from workers.models.gpt import GPT, Block
from workers.models.llama import Llama

__all__ = ["GPT", "Block", "Llama", "build_model"]


def build_model(cfg):
    """The model of `cfg` (a ModelSpec), by its registered family."""
    return cfg.family_spec.build(cfg)
