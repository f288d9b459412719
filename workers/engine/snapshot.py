"""In-memory snapshots of one rank's training state: what recovery in place
restores when a rank is lost and the others stay up.

    snapshot = Snapshot(device)        # the trainer keeps one (`Trainer.snapshot`)
    snapshot.capture(trainer)          # at a step boundary
    lease = snapshot.lend()            # for a peer: the next capture waits for
    peer.hold.remote(lease.payload)    #   `release()` (Ray pickles the payload in
    lease.release()                    #   the call: a copy), from any thread
    Trainer(spec, restore=payload)     # a rank of the new group: `restore`

A capture copies everything the next step reads, each tensor into a CPU
buffer allocated at the first capture and copied into (`copy_`) after: each
parameter's and buffer's local shard (FSDP2's DTensors: `to_local()`), the
optimizer's state per parameter (DTensors' local shards, `step` and other
scalars) and its groups' hyper-parameters, the `TrainState` (step, data
cursor, RNG, the unrecorded metrics rows; on a GPU its RNG too) and the
gradient compression's error-feedback residuals (workers/engine/compression.py),
which a disk checkpoint leaves out. On a GPU the buffers are pinned and the
copies asynchronous, synchronised before `capture` returns. Restored into a
trainer built for the same job at the same world size (the same local shard
shapes: checked, by name), the run goes on bitwise on the curve it left.

Threads. A payload shares the snapshot's buffers, which the next capture
overwrites: `lend()` hands out the payload of the latest capture and holds
the next capture off until the lease is released, so a send in flight never
reads a half-written snapshot; the train loop waits (`waited_s`) only if a
send is still in flight an interval later. `payload()` alone is for the
thread that captures (or a caller that copies before the next capture).

The interval (`checkpoint.memory_every_steps`), when unset, is chosen at the
start of a run (`automatic_interval`): on the capture's cost, then on the
capture's and the copy's to the peer together (workers/engine/trainer.py
`Trainer._settle_interval`).
"""

from __future__ import annotations

import copy
import math
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn
from torch.distributed.tensor import DTensor, Placement

from workers.engine.compression import CompressedReduceScatter
from workers.engine.train_state import TrainState

COST_BUDGET = 0.02  # the automatic interval's: a capture (and its copy) cost at most 2% of step time
MEASURED_AFTER = 3  # steps of a run before the automatic interval is measured
MAX_INTERVAL = 10_000_000  # the schema's bound on checkpoint.memory_every_steps

Key = tuple[str, ...]  # ("model", name) | ("buffer", name) | ("optim", name, state) | ("residual", i)


class Trained(Protocol):
    """What a snapshot reads and restores (the engine's `Trainer`)."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    state: TrainState
    grad_hooks: list[CompressedReduceScatter]
    device: torch.device


@dataclass(frozen=True)
class DTensorLayout:
    """How an optimizer state's local shard sits in its DTensor."""

    placements: tuple[Placement, ...]
    shape: torch.Size
    stride: tuple[int, ...]


@dataclass(frozen=True)
class SnapshotPayload:
    """One rank's state at `step`, as plain tensors (CPU) and values: what
    crosses to a peer rank (picklable) and what `restore` puts back."""

    step: int
    tensors: dict[Key, torch.Tensor]
    dtensors: dict[Key, DTensorLayout]  # the optimizer states that were DTensors
    on_device: frozenset[Key]  # the tensors that lived on the accelerator
    optimizer_values: dict[str, dict[str, Any]]  # a parameter's non-tensor state, by name
    param_groups: list[dict[str, Any]]  # each group's hyper-parameters (not its params)
    train_state: dict[str, Any]  # `TrainState.snapshot_state()`
    device_rng: torch.Tensor | None = None  # a GPU's RNG state

    @property
    def nbytes(self) -> int:
        """The tensors' bytes (the plain values are small beside them)."""
        rng = 0 if self.device_rng is None else self.device_rng.nbytes
        return sum(t.nbytes for t in self.tensors.values()) + self.train_state["rng"].nbytes + rng

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        """Pickled with each tensor's bytes as a NumPy array, which Ray hands
        to its object store out of band (protocol 5: one copy, into the store,
        none in this process's heap) and a receiver on the node reads in
        place (read-only); torch's own pickling of a tensor writes it into a
        buffer and copies that again."""
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__}
        fields["tensors"] = {key: _as_bytes(t) for key, t in self.tensors.items()}
        return (_unpickle, (fields,))


def _as_bytes(tensor: torch.Tensor) -> tuple[np.ndarray, torch.dtype, torch.Size]:
    return tensor.reshape(-1).view(torch.uint8).numpy(), tensor.dtype, tensor.shape


def _unpickle(fields: dict[str, Any]) -> SnapshotPayload:
    with warnings.catch_warnings():  # Ray's arrays are read-only: restore only reads them
        warnings.filterwarnings("ignore", "The given NumPy array is not writable")
        tensors = {key: torch.from_numpy(data).view(dtype).reshape(shape)
                   for key, (data, dtype, shape) in fields["tensors"].items()}
    return SnapshotPayload(**(fields | {"tensors": tensors}))


def label(key: Key) -> str:
    """A snapshot tensor's name as an error says it: model.blocks.0.attn.weight."""
    return ".".join(key)


@dataclass
class Lease:
    """The payload of one capture, lent out: that snapshot's next capture
    waits until `release()` (or the end of a `with` block). Release it once,
    from any thread, as soon as the payload is sent (pickled)."""

    payload: SnapshotPayload
    _snapshot: Snapshot = field(repr=False)
    _released: bool = field(default=False, repr=False)

    def release(self) -> None:
        self._snapshot._returned(self)

    def __enter__(self) -> SnapshotPayload:
        return self.payload

    def __exit__(self, *exc: object) -> None:
        self.release()


class Snapshot:
    """One rank's latest captured state, in CPU buffers kept between captures."""

    def __init__(self, device: torch.device):
        self.device = device
        self.step: int | None = None  # the step of the latest capture; None before the first
        self.capture_s = 0.0  # how long the latest capture took (its wait for a lease apart)
        self.waited_s = 0.0  # how long the latest capture waited for a lease's release
        self._pinned = device.type == "cuda"
        self._buffers: dict[Key, torch.Tensor] = {}
        self._payload: SnapshotPayload | None = None
        self._lent = 0
        self._changed = threading.Condition()

    @property
    def nbytes(self) -> int:
        return 0 if self._payload is None else self._payload.nbytes

    @torch.no_grad()
    def capture(self, trainer: Trained) -> None:
        """Copy the trainer's state at its current step (every rank at the
        same step: a restore needs all the ranks' snapshots of one step)."""
        with self._changed:
            waited = time.perf_counter()
            self._changed.wait_for(lambda: self._lent == 0)
            start = time.perf_counter()
            # From here until the copies are done there is no snapshot: one that
            # fails half-way leaves none, not a mix of two steps.
            self._payload, self.step = None, None
            live = _Live.read(trainer)
            buffers = {}
            for key, source in live.tensors.items():
                buffer = self._buffers.get(key)
                if buffer is None or buffer.shape != source.shape or buffer.dtype != source.dtype:
                    buffer = torch.empty(source.shape, dtype=source.dtype, pin_memory=self._pinned)
                buffer.copy_(source, non_blocking=self._pinned and source.is_cuda)
                buffers[key] = buffer
            device_rng = None
            if self._pinned:
                device_rng = torch.cuda.get_rng_state(self.device)
                torch.cuda.synchronize(self.device)  # the copies are done: now it is a snapshot
            self._buffers = buffers
            self._payload = SnapshotPayload(
                step=trainer.state.step, tensors=dict(buffers), dtensors=live.dtensors,
                on_device=live.on_device, optimizer_values=live.values,
                param_groups=live.groups, train_state=trainer.state.snapshot_state(),
                device_rng=device_rng,
            )
            self.step = trainer.state.step
            self.capture_s = time.perf_counter() - start
            self.waited_s = start - waited

    def payload(self) -> SnapshotPayload:
        """The latest capture's payload, sharing the buffers (valid until the
        next capture: from another thread, `lend()` it)."""
        with self._changed:
            if self._payload is None:
                raise RuntimeError("no snapshot captured yet")
            return self._payload

    def lend(self) -> Lease:
        """The latest capture's payload, the next capture held off until the
        lease is released."""
        with self._changed:
            if self._payload is None:
                raise RuntimeError("no snapshot captured yet")
            self._lent += 1
            return Lease(self._payload, self)

    def _returned(self, lease: Lease) -> None:
        with self._changed:
            if not lease._released:
                lease._released = True
                self._lent -= 1
                self._changed.notify_all()


@dataclass
class _Live:
    """The trainer's state as it is now: its tensors by key (local shards)
    and what describes them."""

    tensors: dict[Key, torch.Tensor] = field(default_factory=dict)
    dtensors: dict[Key, DTensorLayout] = field(default_factory=dict)
    on_device: frozenset[Key] = frozenset()
    values: dict[str, dict[str, Any]] = field(default_factory=dict)
    groups: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def read(cls, trainer: Trained) -> _Live:
        live = cls()
        model, optimizer = trainer.model, trainer.optimizer
        for name, param in model.named_parameters():
            live.tensors[("model", name)] = _local(param)
        for name, buffer in model.named_buffers():
            live.tensors[("buffer", name)] = _local(buffer)
        names = {id(p): name for name, p in model.named_parameters()}
        for group in optimizer.param_groups:
            live.groups.append(copy.deepcopy({k: v for k, v in group.items() if k != "params"}))
            for param in group["params"]:
                state = optimizer.state.get(param)  # not `[param]`: the defaultdict would add it
                if not state:
                    continue
                name = names[id(param)]
                for key, value in state.items():
                    if isinstance(value, torch.Tensor):
                        live.tensors[("optim", name, key)] = _local(value)
                        if isinstance(value, DTensor):
                            live.dtensors[("optim", name, key)] = DTensorLayout(
                                tuple(value.placements), value.shape, value.stride())
                    else:
                        live.values.setdefault(name, {})[key] = copy.deepcopy(value)
        for i, hook in enumerate(trainer.grad_hooks):
            if hook.residual is not None:
                live.tensors[("residual", str(i))] = hook.residual
        live.on_device = frozenset(k for k, t in live.tensors.items() if t.device.type != "cpu")
        return live


def captured_tensors(trainer: Trained) -> dict[Key, torch.Tensor]:
    """The live tensors a capture copies (local shards), by key."""
    return _Live.read(trainer).tensors


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return (tensor.to_local() if isinstance(tensor, DTensor) else tensor).detach()


# -- restore ------------------------------------------------------------------------


@torch.no_grad()
def restore(trainer: Trained, payload: SnapshotPayload) -> None:
    """Put `payload` into a trainer built for the same job and world size:
    every parameter and buffer written (the build need not fill them), the
    optimizer's state and hyper-parameters replaced, the train state and the
    error-feedback residuals set. `ValueError` naming the tensor where a
    shape, dtype or name does not match (another job, another world size)."""
    model = trainer.model
    held: dict[Key, torch.Tensor] = {("model", n): p for n, p in model.named_parameters()}
    held |= {("buffer", n): b for n, b in model.named_buffers()}
    saved = {k for k in payload.tensors if k[0] in ("model", "buffer")}
    if missing := sorted(held.keys() - saved):
        raise ValueError(f"the snapshot of step {payload.step} has no tensor {label(missing[0])} "
                         f"({len(missing)} missing): not a snapshot of this job")
    if extra := sorted(saved - held.keys()):
        raise ValueError(f"the snapshot of step {payload.step} holds {label(extra[0])}, which "
                         "this trainer does not have: not a snapshot of this job")
    for key, tensor in held.items():
        _check(key, payload.tensors[key], _local(tensor))
    for key, tensor in held.items():
        _local(tensor).copy_(payload.tensors[key])
    _restore_optimizer(trainer, payload)
    _restore_residuals(trainer, payload)
    trainer.state.load_snapshot_state(payload.train_state)
    if payload.device_rng is not None and trainer.device.type == "cuda":
        torch.cuda.set_rng_state(payload.device_rng, trainer.device)


def _check(key: Key, saved: torch.Tensor, live: torch.Tensor) -> None:
    if saved.shape != live.shape or saved.dtype != live.dtype:
        raise ValueError(
            f"snapshot tensor {label(key)} is {list(saved.shape)} {saved.dtype}, this trainer's is "
            f"{list(live.shape)} {live.dtype}: restore needs the same job at the same world size")


def _restore_optimizer(trainer: Trained, payload: SnapshotPayload) -> None:
    model, optimizer = trainer.model, trainer.optimizer
    if len(payload.param_groups) != len(optimizer.param_groups):
        raise ValueError(f"the snapshot has {len(payload.param_groups)} optimizer parameter "
                         f"groups, this trainer's optimizer {len(optimizer.param_groups)}")
    # each parameter's state by name: its plain values, and the keys of its tensors
    states: dict[str, dict[str, Any]] = {n: dict(v) for n, v in payload.optimizer_values.items()}
    for key in payload.tensors:
        if key[0] == "optim":
            states.setdefault(key[1], {})[key[2]] = _Saved(key)
    names = {id(p): name for name, p in model.named_parameters()}
    for group, hyper in zip(optimizer.param_groups, payload.param_groups, strict=True):
        group.update(copy.deepcopy(hyper))  # in place: a composite's parts share these dicts
        for param in group["params"]:
            name = names[id(param)]
            entries = states.pop(name, None)
            optimizer.state.pop(param, None)
            if entries is None:  # no state yet (a frozen parameter, one without a gradient)
                continue
            optimizer.state[param] = {
                k: _state_tensor(v.key, param, payload, trainer.device) if isinstance(v, _Saved)
                else copy.deepcopy(v)
                for k, v in entries.items()
            }
    if states:
        raise ValueError(f"the snapshot holds optimizer state for {sorted(states)[0]}, which "
                         "this trainer's optimizer does not train")


@dataclass(frozen=True)
class _Saved:
    key: Key  # an optimizer state tensor's, in the payload


def _state_tensor(key: Key, param: torch.Tensor, payload: SnapshotPayload,
                  device: torch.device) -> torch.Tensor:
    """A fresh optimizer state tensor from the payload's copy (on the device
    it lived on; a DTensor laid out as it was, on its parameter's mesh)."""
    saved = payload.tensors[key]
    local = saved.to(device if key in payload.on_device else "cpu", copy=True)
    layout = payload.dtensors.get(key)
    if layout is None:
        return local
    if not isinstance(param, DTensor):
        raise ValueError(f"snapshot tensor {label(key)} is a DTensor, its parameter here is not")
    if layout.placements == tuple(param.placements) and layout.shape == param.shape:
        _check(key, saved, param.to_local())  # laid out as its parameter: its shard's shape
    return DTensor.from_local(local, param.device_mesh, layout.placements, run_check=False,
                              shape=layout.shape, stride=layout.stride)


def _restore_residuals(trainer: Trained, payload: SnapshotPayload) -> None:
    kept = {int(k[1]): k for k in payload.tensors if k[0] == "residual"}
    if kept and max(kept) >= len(trainer.grad_hooks):
        raise ValueError(f"the snapshot holds error-feedback residuals for {max(kept) + 1} FSDP "
                         f"units, this trainer compresses {len(trainer.grad_hooks)}")
    for i, hook in enumerate(trainer.grad_hooks):
        key = kept.get(i)
        if key is None:
            hook.residual = None
            continue
        saved = payload.tensors[key]
        if hook.segments and saved.shape[-1] != sum(hook.segments):
            raise ValueError(f"snapshot tensor {label(key)} has rows of {saved.shape[-1]} values, "
                             f"this trainer's unit {i} reduces {sum(hook.segments)}")
        hook.residual = saved.to(trainer.device, copy=True)


class RestoredLater:
    """The build's weight source for a trainer a snapshot restores: it writes
    nothing (`restore` writes every parameter and buffer after the build)."""

    def fill(self, model: nn.Module) -> None:
        return None


# -- the automatic interval --------------------------------------------------------


def automatic_interval(capture_s: float, step_s: float, budget: float = COST_BUDGET) -> int:
    """The smallest interval k >= 1 (steps) at which a capture costs at most
    `budget` of the step time: capture_s / (k x step_s) <= budget."""
    if step_s <= 0 or budget <= 0:
        raise ValueError(f"a step time and a budget > 0 are needed, got {step_s} s and {budget}")
    if capture_s <= 0:
        return 1
    k = max(1, math.ceil(capture_s / (budget * step_s)))
    while k < MAX_INTERVAL and capture_s / (k * step_s) > budget:  # the float's last bit
        k += 1
    while k > 1 and capture_s / ((k - 1) * step_s) <= budget:
        k -= 1
    return min(k, MAX_INTERVAL)
