"""A training step's FLOPs per token, from the spec alone: the numerator of
model FLOPs utilisation (MFU, the engine's `mfu` metric).

The count is TorchTitan's: a matrix product of a token's activations with a
weight matrix of P entries costs 2P FLOPs forward (a multiply and an add per
entry) and 4P backward (the gradient with respect to the activations, 2P,
and with respect to the weights, 2P), so a full training step costs

    6 x P + 12 x n_layers x n_heads x head_dim x seq_len

per token. P is the parameters a token is multiplied by
(`Family.matmul_params`, workers/schema/families.py): every parameter but the
embedding tables, which a token only indexes; TorchTitan subtracts the
`nn.Embedding` modules, which for an untied model is the same count (a tied
head's product is counted here, where TorchTitan's subtraction drops it).
The second term is attention's two products per layer, QK^T and the
weighted sum of V, each 2 x seq_len x n_heads x head_dim FLOPs a token
forward and twice that backward: 12 in all. Like TorchTitan it counts the
full square (no discount for the causal mask) and not what activation
checkpointing recomputes: MFU counts the model's FLOPs, not the hardware's.

With an adapter (workers/schema/adapter.py) the base is frozen: its weights
get no gradient, but the backward still carries the activations' gradient
through every layer to reach the lowest adapters. A step then costs

    4 x P + 6 x A + 12 x n_layers x n_heads x head_dim x seq_len

per token: the base forward (2P) and its activations' gradient (2P), the
adapters' A parameters in full (forward, both gradients: 6A), and
attention as before (its products have no weights: both of their
gradients are activations' gradients). It counts the lowest block's
activation gradients in full where autograd skips those nothing below
needs: an overcount of at most 2 x one block's parameters a token.

Torch-free: the API and the tests count with it as the engine does.
"""

from __future__ import annotations

from typing import Any

from workers.schema.adapter import adapter_params

FORWARD = 2  # FLOPs a weight costs a token forward: a multiply and an add
BACKWARD_ACTIVATIONS = 2  # ... the gradient with respect to the token's activations
BACKWARD_WEIGHTS = 2  # ... the gradient with respect to the weight
ATTENTION = 12  # QK^T and AV: 2 products x (1 forward + 2 backward) x 2 FLOPs


def attention_flops_per_token(model: Any) -> int:
    """Attention's score and value products of a training step, per token:
    12 x n_layers x n_heads x head_dim x seq_len (head_dim = d_model / n_heads)."""
    head_dim = model.d_model // model.n_heads
    return ATTENTION * model.n_layers * model.n_heads * head_dim * model.seq_len


def flops_per_token(model: Any, adapter: Any = None) -> float:
    """A training step's FLOPs per token of the model a `ModelSpec` builds:
    6P + attention for a full fine-tune, 4P + 6A + attention with an
    `AdapterSpec` (the module docstring says why)."""
    dense = model.family_spec.matmul_params(model)
    if adapter is None:
        return float((FORWARD + BACKWARD_ACTIVATIONS + BACKWARD_WEIGHTS) * dense
                     + attention_flops_per_token(model))
    trained = adapter_params(model, adapter)  # the whole model's (tp = 1): FLOPs of all ranks
    return float((FORWARD + BACKWARD_ACTIVATIONS) * dense
                 + (FORWARD + BACKWARD_ACTIVATIONS + BACKWARD_WEIGHTS) * trained
                 + attention_flops_per_token(model))


def job_flops_per_token(job: Any) -> float:
    """`flops_per_token` of a `JobSpec`'s model, with its adapter if it has one."""
    return flops_per_token(job.model, job.adapter)
