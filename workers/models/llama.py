"""A Llama-family decoder: RMSNorm, rotary position embeddings, SwiGLU MLP,
grouped-query attention, optionally tied input and output embeddings.

Parameter names are exactly those of Hugging Face's `LlamaForCausalLM`
(`model.embed_tokens.weight`, `model.layers.{i}.self_attn.q_proj.weight`, ...,
`model.norm.weight`, `lm_head.weight`), so importing and exporting weights
maps names one to one. The arithmetic follows the same conventions (rotary
halves, not interleaved pairs; RMSNorm in fp32), so the logits agree.

Attention heads are read from the projections' output widths, never from the
spec, so the same forward runs on a tensor-parallel shard of the heads.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from workers.schema import ModelSpec


def hf_init(name: str, tensor: torch.Tensor, generator: torch.Generator | None) -> None:
    """N(0, 0.02) for matrices, zeros for biases, ones for norms' gains
    (Hugging Face's default; also the rule of a family that gives none)."""
    with torch.no_grad():
        if tensor.dim() >= 2:
            nn.init.normal_(tensor, mean=0.0, std=0.02, generator=generator)
        elif name.endswith("bias"):
            nn.init.zeros_(tensor)
        else:
            nn.init.ones_(tensor)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


def rotary(
    seq_len: int, head_dim: int, theta: float, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotary angles, (seq_len, head_dim), in fp32.
    Computed per forward: no buffer to materialise after a meta-device build."""
    even = torch.arange(0, head_dim, 2, device=device, dtype=torch.int64).float()
    inv_freq = 1.0 / (theta ** (even / head_dim))
    angles = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (batch, heads, seq, head_dim)."""
    return (x * cos + _rotate_half(x) * sin).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: ModelSpec):
        super().__init__()
        d, kv = cfg.d_model, cfg.kv_heads
        self.head_dim = d // cfg.n_heads
        self.rope_theta = cfg.rope_theta
        self.q_proj = nn.Linear(d, cfg.n_heads * self.head_dim, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(d, kv * self.head_dim, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(d, kv * self.head_dim, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(cfg.n_heads * self.head_dim, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        hd = self.head_dim
        q = self.q_proj(x).view(b, t, -1, hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, -1, hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, -1, hd).transpose(1, 2)
        cos, sin = rotary(t, hd, self.rope_theta, x.device)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        if k.shape[1] != q.shape[1]:  # grouped-query attention: each kv head serves a group
            repeat = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, -1))


class SwiGLU(nn.Module):
    def __init__(self, cfg: ModelSpec):
        super().__init__()
        d, f = cfg.d_model, cfg.ffn_width
        self.gate_proj = nn.Linear(d, f, bias=False)
        self.up_proj = nn.Linear(d, f, bias=False)
        self.down_proj = nn.Linear(f, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelSpec):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = SwiGLU(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaBody(nn.Module):
    def __init__(self, cfg: ModelSpec):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)


class Llama(nn.Module):
    """`LlamaForCausalLM`'s layout: `model` (embeddings, layers, final norm) and `lm_head`."""

    def __init__(self, cfg: ModelSpec):
        super().__init__()
        self.cfg = cfg
        self.model = LlamaBody(cfg)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.reset_parameters()

    # The engine's view of a decoder (workers/engine/sharding.py): embedding, blocks, head.
    @property
    def embedding(self) -> nn.Module:
        return self.model.embed_tokens

    @property
    def blocks(self) -> nn.ModuleList:
        return self.model.layers

    @property
    def head(self) -> nn.Module:
        return self.lm_head

    @property
    def tied(self) -> bool:
        return self.cfg.tie_embeddings

    def tp_plan(self) -> dict:
        """The tensor-parallel plan (`parallelize_module`'s, by parameter-name
        pattern): Megatron's column-wise q, k, v, gate, up and row-wise o, down,
        so each rank holds whole heads and a slice of the MLP width; the token
        embedding and the head split the vocabulary. Sequence parallel between
        them: the residual stream and the norms hold a slice of the sequence
        (Shard(1)); an all-gather makes the full sequence before attention and
        the MLP, and their row-wise outputs reduce-scatter back to the slice."""
        from torch.distributed.tensor import Replicate, Shard
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            PrepareModuleInput,
            RowwiseParallel,
            SequenceParallel,
        )

        def full_sequence_in() -> PrepareModuleInput:
            return PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))

        layer = "model.layers.*."
        return {
            "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
            layer + "input_layernorm": SequenceParallel(),
            layer + "self_attn": full_sequence_in(),
            layer + "self_attn.q_proj": ColwiseParallel(),
            layer + "self_attn.k_proj": ColwiseParallel(),
            layer + "self_attn.v_proj": ColwiseParallel(),
            layer + "self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1)),
            layer + "post_attention_layernorm": SequenceParallel(),
            layer + "mlp": full_sequence_in(),
            layer + "mlp.gate_proj": ColwiseParallel(),
            layer + "mlp.up_proj": ColwiseParallel(),
            layer + "mlp.down_proj": RowwiseParallel(output_layouts=Shard(1)),
            "model.norm": SequenceParallel(),
            # the logits are gathered whole on every rank of the group for the loss
            "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
        }

    def reset_parameters(self) -> None:
        for name, p in self.named_parameters():
            if p.device.type != "meta":
                self.init_parameter(name, p.data, None)

    def init_parameter(self, name: str, tensor: torch.Tensor, generator: torch.Generator | None) -> None:
        """`tensor`'s initial value as the full parameter `name` (workers/engine/build.py
        passes the parameter's own generator): Hugging Face's Llama init."""
        hf_init(name, tensor, generator)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.model.embed_tokens(idx)
        for layer in self.model.layers:
            x = layer(x)
        return self.lm_head(self.model.norm(x))
