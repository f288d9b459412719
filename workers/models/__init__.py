"""Models the engine can build, by `ModelSpec.family`.

Every family exposes the engine's view of a decoder (workers/sharding.py):
`embedding`, `blocks` (a ModuleList), `head`, and `tied` (the head shares the
embedding's weight).
"""

from workers.models.gpt import GPT, Block
from workers.models.llama import Llama

__all__ = ["GPT", "Block", "Llama", "build_model"]


def build_model(cfg):
    if cfg.family == "gpt":
        return GPT(cfg)
    if cfg.family == "llama":
        return Llama(cfg)
    raise ValueError(f"unknown model family {cfg.family!r}")
