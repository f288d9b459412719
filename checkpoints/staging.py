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
    tensors: list[tuple[torch.Tensor, torch.Tensor]]  # (staged, live) local tensors
    values: list[tuple[Any, Any, Any]]  # (staged container, key, live value)


class StateStager:
    """Copies a state dict into CPU buffers it keeps between calls."""

    def __init__(self) -> None:
        self._staged: _Staged | None = None

    @torch.no_grad()
    def stage(self, state: StateDict) -> StateDict:
        """A copy of `state` that training may not change (valid until the next call)."""
        signature = tuple(_signature(state))
        staged = self._staged
        if staged is None or staged.signature != signature:
            staged = self._staged = _build(state, signature)
        for target, source in staged.tensors:
            target.copy_(source)
        for container, key, value in staged.values:
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
    tensors: list[tuple[torch.Tensor, torch.Tensor]] = []
    values: list[tuple[Any, Any, Any]] = []
    _pair(copied, state, tensors, values)
    return _Staged(signature, copied, tensors, values)


def _pair(staged: Any, live: Any, tensors: list, values: list) -> None:
    """Walk the staged copy and the live state side by side."""
    items = (staged.items() if isinstance(staged, dict) else
             enumerate(staged) if isinstance(staged, list) else None)
    if items is None:
        raise TypeError(f"cannot stage into a {type(staged).__name__}")
    for key, value in list(items):
        source = live[key]
        if isinstance(source, torch.Tensor):
            tensors.append((_local(value), _local(source)))
        elif isinstance(source, (dict, list)):
            _pair(value, source, tensors, values)
        else:  # a plain value (a tuple too): copied afresh each time
            values.append((staged, key, source))


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor._local_tensor if isinstance(tensor, DTensor) else tensor


def _signature(value: Any, path: tuple[Any, ...] = ()) -> Iterator[Any]:
    """What must not change for a staged copy to be reused: the structure,
    and each tensor's identity, memory, shape, strides, dtype and device."""
    if isinstance(value, dict):
        yield (path, "dict", tuple(value))
        for key, item in value.items():
            yield from _signature(item, (*path, key))
    elif isinstance(value, list):
        yield (path, "list", len(value))
        for index, item in enumerate(value):
            yield from _signature(item, (*path, index))
    elif isinstance(value, torch.Tensor):
        local = _local(value)
        spec = (value._spec.placements, value._spec.mesh, value.shape) if isinstance(value, DTensor) else None
        yield (path, id(value), local.data_ptr(), local.shape, local.stride(), local.dtype,
               local.device, spec)
    else:
        yield (path, type(value))
