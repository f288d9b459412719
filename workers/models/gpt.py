"""A decoder-only GPT: token + position embeddings, pre-norm blocks, LM head.

No weight tying and bias-free linears, so every parameter belongs to exactly
one FSDP unit (embeddings, k blocks, head) and the root keeps only the final
norm and the position table.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from workers.schema import ModelSpec


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelSpec):
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class MLP(nn.Module):
    def __init__(self, cfg: ModelSpec):
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model, bias=False)
        self.out = nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, cfg: ModelSpec):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: ModelSpec):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Parameter(torch.zeros(cfg.seq_len, cfg.d_model))
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.reset_parameters()

    # The engine's view of a decoder (workers/engine/sharding.py): embedding, blocks, head.
    @property
    def embedding(self) -> nn.Module:
        return self.tok_emb

    tied = False  # the head has weights of its own

    def reset_parameters(self) -> None:
        # GPT-2 style: N(0, 0.02), residual projections scaled by depth.
        for name, p in self.named_parameters():
            if p.dim() < 2:
                continue
            std = 0.02
            if name.endswith(("attn.proj.weight", "mlp.out.weight")):
                std /= math.sqrt(2 * self.cfg.n_layers)
            nn.init.normal_(p, mean=0.0, std=std)

    def init_parameter(self, name: str, tensor: torch.Tensor, generator: torch.Generator) -> None:
        """`tensor`'s initial value as the full parameter `name` (workers/engine/build.py):
        the same rule as `reset_parameters`, from the parameter's own generator."""
        if tensor.dim() >= 2:
            std = 0.02
            if name.endswith(("attn.proj.weight", "mlp.out.weight")):
                std /= math.sqrt(2 * self.cfg.n_layers)
            nn.init.normal_(tensor, mean=0.0, std=std, generator=generator)
        elif name.endswith("bias"):
            nn.init.zeros_(tensor)
        else:
            nn.init.ones_(tensor)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok_emb(idx) + self.pos_emb[: idx.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))
