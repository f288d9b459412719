"""Models the engine can build, by `ModelConfig.kind`."""

from workers.models.gpt import GPT, Block

__all__ = ["GPT", "Block", "build_model"]


def build_model(cfg):
    if cfg.kind == "gpt":
        return GPT(cfg)
    raise ValueError(f"unknown model kind {cfg.kind!r}")
