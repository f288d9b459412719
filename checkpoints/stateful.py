"""A model and its optimizer as one DCP `Stateful`, keyed by parameter name.

`get_state_dict` keys the optimizer state by parameter FQN (not by position)
and yields the local shards as DTensors, which is what lets a load reshard
to another world size. On a freshly built optimizer it first creates the
state (a zero-gradient step at lr 0), so a load has tensors to fill.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)
from torch.distributed.checkpoint.stateful import Stateful


class ModelAndOptimizer(Stateful):
    """With `trainable_only` (an adapter job: its base is frozen and re-read
    at every start), the model's frozen parameters are left out: saved, and
    expected, are the trainable ones and their optimizer state alone."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, *,
                 trainable_only: bool = False) -> None:
        self.model = model
        self.optimizer = optimizer
        # strict=False: the frozen keys are absent by design; a missing trainable key
        # fails in DCP's load first (it reads exactly the keys `state_dict` names)
        self.options = (StateDictOptions(ignore_frozen_params=True, strict=False)
                        if trainable_only else None)

    def state_dict(self) -> dict[str, Any]:
        model_state, optim_state = get_state_dict(self.model, self.optimizer,
                                                  options=self.options)
        return {"model": model_state, "optim": optim_state}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state_dict["model"],
            optim_state_dict=state_dict["optim"],
            options=self.options,
        )


class ModelOnly(Stateful):
    """A model's parameters alone, keyed as `ModelAndOptimizer` keys them
    (`model.*`): loading it from a full checkpoint reads no optimizer state."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model

    def state_dict(self) -> dict[str, Any]:
        return {"model": get_model_state_dict(self.model)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        set_model_state_dict(self.model, state_dict["model"])
