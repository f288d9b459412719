"""The built-in elementwise optimizers' builders (the `brigade.optimizers`
entry points name them through `workers/schema/recipes.py`).

    build_adamw(model, train) -> torch.optim.AdamW   (the default)
    build_adam(model, train)  -> torch.optim.Adam
    build_sgd(model, train)   -> torch.optim.SGD     (momentum, nesterov)

Each updates every parameter element by element, so it runs on FSDP's
DTensor shards as they are: a sharded run's update equals one process's.
Weight decay applies to matrices (dim >= 2) only; norms' gains and biases
stay undecayed (`decay_groups`). The learning rate set here is replaced
before every step by the schedule's (workers/engine/trainer.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from workers.schema import TrainSpec


def decay_groups(params: Iterable[torch.nn.Parameter], weight_decay: float) -> list[dict[str, Any]]:
    """Two parameter groups: the matrices, decayed by `weight_decay`, and the
    rest, not; frozen parameters (an adapter job's base) in neither."""
    params = [p for p in params if p.requires_grad]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def build_adamw(model: torch.nn.Module, train: TrainSpec) -> torch.optim.Optimizer:
    return torch.optim.AdamW(decay_groups(model.parameters(), train.weight_decay), lr=train.lr,
                             betas=(train.beta1, train.beta2), eps=train.eps)


def build_adam(model: torch.nn.Module, train: TrainSpec) -> torch.optim.Optimizer:
    # Adam's weight decay is L2: added to the gradient before the moments.
    return torch.optim.Adam(decay_groups(model.parameters(), train.weight_decay), lr=train.lr,
                            betas=(train.beta1, train.beta2), eps=train.eps)


def build_sgd(model: torch.nn.Module, train: TrainSpec) -> torch.optim.Optimizer:
    return torch.optim.SGD(decay_groups(model.parameters(), train.weight_decay), lr=train.lr,
                           momentum=train.momentum or 0.0, nesterov=bool(train.nesterov))
