"""Models the engine can build, by `ModelSpec.family`."""

from workers.models.gpt import GPT, Block

__all__ = ["GPT", "Block", "build_model"]


def build_model(cfg):
    if cfg.family == "gpt":
        return GPT(cfg)
    raise ValueError(f"unknown model family {cfg.family!r}")
