"""LoRA: a linear layer with a trainable low-rank update beside its frozen weight.

    y = x W^T + b + (dropout(x) A^T B^T) * alpha / rank

`LoraLinear` is an `nn.Linear` (its `weight` and `bias` keep their names, so
a Hugging Face checkpoint fills them as before) with two children, `lora_A`
(rank x in) and `lora_B` (out x rank): the names PEFT gives them, so
`model.layers.0.self_attn.q_proj.lora_A.weight` maps one to one to a PEFT
adapter file's `base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`.
B starts at zero, so at step 0 the layer is its base.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

ADAPTER_MODULES = ("lora_A", "lora_B")


def is_adapter(name: str) -> bool:
    """Whether the parameter `name` is an adapter's (a `lora_A` or `lora_B` weight)."""
    parts = name.split(".")
    return len(parts) >= 2 and parts[-2] in ADAPTER_MODULES


class LoraLinear(nn.Linear):
    def __init__(self, in_features: int, out_features: int, *, bias: bool, rank: int,
                 alpha: float, dropout: float = 0.0, device: torch.device | str | None = None,
                 dtype: torch.dtype | None = None):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.lora_A = nn.Linear(in_features, rank, bias=False, device=device)
        self.lora_B = nn.Linear(rank, out_features, bias=False, device=device)
        self.scaling = alpha / rank
        self.lora_dropout: nn.Module = nn.Dropout(dropout) if dropout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        base = F.linear(x, self.weight, self.bias)
        return base + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling


def lora_init(name: str, tensor: torch.Tensor, generator: torch.Generator | None) -> None:
    """PEFT's default start: A as `nn.Linear`'s own init (Kaiming-uniform,
    a = sqrt(5)), B zero."""
    with torch.no_grad():
        if name.split(".")[-2] == "lora_B":
            tensor.zero_()
        else:
            bound = 1.0 / math.sqrt(tensor.shape[1])  # kaiming_uniform_(a=sqrt(5)) on (out, in)
            tensor.uniform_(-bound, bound, generator=generator)
