"""The async save's staging copy: the state copied into CPU buffers kept
from one save to the next, so that a save holds training for little more
than a memcpy of the rank's state.

The first save (and any whose state has another shape) builds the staged
copy with DCP's own stager (`StateDictStager`: CPU tensors and DTensors
with the same specs, shared storages kept shared) and pairs each live
tensor with its staged one. Every later save with the same state (the same
tensors, shapes, dtypes and structure: what training leaves as it is) only
copies each live tensor into its pair, and the plain values (step counts,
learning rates, ...) afresh: no traversal that allocates, no fresh memory.
The staged copy may be reused only once the save that read it is over
(`Checkpointer.async_save` waits for it first).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.distributed.checkpoint._state_dict_stager import StateDictStager
from torch.distributed.tensor import DTensor

StateDict = dict[str, Any]


@dataclass
class _Staged:
    signature: tuple[Any, ...]
    state: StateDict  # the staged copy handed to DCP
    tensors: list[torch.Tensor]  # staged local tensors, in the order of `_leaves`
    values: list[tuple[Any, Any]]  # (staged container, key) of each plain value, in order


class StateStager:
    """Copies a state dict into CPU buffers it keeps between calls."""

    def __init__(self) -> None:
        self._staged: _Staged | None = None

    @torch.no_grad()
    def stage(self, state: StateDict) -> StateDict:
        """A copy of `state` that training may not change (valid until the next call)."""
        tensors: list[torch.Tensor] = []
        values: list[Any] = []
        signature = tuple(_leaves(state, (), tensors, values))
        staged = self._staged
        if staged is None or staged.signature != signature:
            staged = self._staged = _build(state, signature)
        for target, source in zip(staged.tensors, tensors, strict=True):
            target.copy_(source)
        for (container, key), value in zip(staged.values, values, strict=True):
            container[key] = copy.deepcopy(value)
        return staged.state

    def close(self) -> None:
        self._staged = None


def _build(state: StateDict, signature: tuple[Any, ...]) -> _Staged:
    stager = StateDictStager(pin_memory=False, share_memory=False)
    try:
        copied = stager.stage(state)
    finally:
        stager.close()
    tensors: list[torch.Tensor] = []
    values: list[tuple[Any, Any]] = []
    _targets(copied, tensors, values)
    return _Staged(signature, copied, tensors, values)


def _targets(staged: Any, tensors: list, values: list) -> None:
    """The staged copy's tensors and plain values, in the order `_leaves` walks the live state."""
    items = staged.items() if isinstance(staged, dict) else enumerate(staged)
    for key, value in list(items):
        if isinstance(value, torch.Tensor):
            tensors.append(_local(value))
        elif isinstance(value, (dict, list)):
            _targets(value, tensors, values)
        else:  # a plain value (a tuple too): copied afresh each time
            values.append((staged, key))


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor._local_tensor if isinstance(tensor, DTensor) else tensor


def _leaves(value: Any, path: tuple[Any, ...], tensors: list, values: list) -> Iterator[Any]:
    """Walk the live state: collect its local tensors and plain values, and
    yield what must not change for a staged copy to be reused (the structure;
    each tensor's memory, shape, strides, dtype, device and DTensor spec).
    Not the tensor objects: a state dict hands out fresh views each time."""
    if isinstance(value, dict):
        yield (path, "dict", tuple(value))
        for key, item in value.items():
            yield from _leaves(item, (*path, key), tensors, values)
    elif isinstance(value, list):
        yield (path, "list", len(value))
        for index, item in enumerate(value):
            yield from _leaves(item, (*path, index), tensors, values)
    elif isinstance(value, torch.Tensor):
        local = _local(value)
        tensors.append(local)
        spec = (value._spec.placements, value._spec.mesh, value.shape) if isinstance(value, DTensor) else None
        yield (path, local.data_ptr(), local.shape, local.stride(), local.dtype, local.device, spec)
    else:
        values.append(value)
        yield (path, type(value))
