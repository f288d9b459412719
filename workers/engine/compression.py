"""Compressed gradient reduce-scatter, inside FSDP2's communication hook.

`sharding.grad_compression` picks what a gradient reduce-scatter puts on the
wire; every FSDP unit gets a `CompressedReduceScatter` through
`set_custom_reduce_scatter`, so FSDP itself is not forked:

    none   FSDP's own reduce-scatter in the reduce dtype
    bf16   each value as bfloat16                      2 B/value
    int8   each value as int8, one fp32 scale per      1 + 4/256 B/value
           block of 256 values, with error feedback       (+ a scale per
                                                          parameter's tail)

How it travels. FSDP hands the hook its flat input laid out as one row per
destination rank (row j is rank j's shard of every gradient in the unit). The
hook encodes each row, exchanges the rows with one `all_to_all_single` (each
rank sends row j to rank j and receives every rank's row for its own shard),
then decodes the rows it received and sums them in fp32. That works the same
on NCCL and on gloo, which has no PREMUL_SUM, and whose int8 SUM would
overflow and could not apply each sender's scales anyway. The bytes counted
are the all-to-all's: (g-1) x the encoded row, under the op name
`reduce_scatter` -- what a ring reduce-scatter of the encoded row would move.
An int8 block never straddles two parameters, so a small gradient (a
LayerNorm's) keeps its own scale, and the blocks do not depend on how the
parameters are grouped into units.

Averaging. The hook only sums. Every unit is set to
`set_force_sum_reduction_for_comms(True)`, so FSDP passes `ReduceOp.SUM`
(never AVG or PREMUL_SUM) and divides the result by the data-parallel size
afterwards itself -- the same mean, by the same `_get_gradient_divide_factors`,
as the uncompressed path, and HSDP's replicate all-reduce (uncompressed)
included. A custom `set_gradient_divide_factor` would still apply.

Error feedback (int8). Each rank keeps, per unit, the quantisation error of
what it sent last step and adds it to the next step's gradient before
quantising, so the error is carried forward instead of lost: over k steps the
sum of what arrived differs from the sum of the true gradients by the last
step's residual only (at most half a quantisation step per value and rank),
where without feedback the errors add up. The buffer is the
unit's full (unsharded) gradient in fp32: 4 B/param per rank, what DDP would
hold. `grad_error_feedback=False` (engine config only) turns it off, to measure
what it buys.

Checkpoints: the error-feedback buffers are NOT saved. A resumed run starts
them at zero, as step 1 did, whatever its world size (a rank's residual has no
meaning at another world size). What is lost is the one step's residual, at
most half an int8 quantisation step per value: tests/workers/engine/test_compression.py
checks that the resumed losses stay within 0.1% of the uninterrupted run's
(measured: 1.6e-5 at most, steps 11-30 of a tiny GPT resumed at step 10).
An in-memory snapshot, restored at the same world size, carries them
(workers/engine/snapshot.py): that restore is exact.

Where the shard group has one rank (world size 1, hybrid_shard with shard
groups of one) FSDP issues no reduce-scatter and nothing is compressed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule
from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter

from workers.engine.comm import CommCounter

BLOCK = 256  # values per int8 scale
INT8_MAX = 127


def wire_bytes_per_value(compression: str, reduce_itemsize: int) -> float:
    """Bytes a reduce-scatter puts on the wire per gradient value."""
    if compression == "bf16":
        return 2.0
    if compression == "int8":
        return 1.0 + 4.0 / BLOCK
    return float(reduce_itemsize)


def block_ids(segments: Sequence[int]) -> tuple[torch.Tensor, int]:
    """Each value's int8 block within a row whose parameters' chunks are
    `segments` long: blocks of BLOCK values that never straddle two
    parameters (a LayerNorm's tiny gradients keep their own scale). Returns
    the ids and the number of blocks."""
    ids, offset = [], 0
    for length in segments:
        ids.append(torch.arange(length) // BLOCK + offset)
        offset += math.ceil(length / BLOCK)
    return torch.cat(ids), offset


def int8_encode(rows: torch.Tensor, ids: torch.Tensor, nblocks: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(g, n) float rows -> one uint8 payload per row (n int8 values, then
    `nblocks` fp32 scales) and the rows as they will be decoded."""
    g, n = rows.shape
    rows = rows.float()
    scales = torch.zeros(g, nblocks, dtype=torch.float32, device=rows.device)
    scales.scatter_reduce_(1, ids.expand(g, n), rows.abs(), reduce="amax")
    scales /= INT8_MAX
    per_value = scales[:, ids]
    safe = torch.where(per_value > 0, per_value, torch.ones_like(per_value))
    q = torch.round(rows / safe).clamp_(-INT8_MAX, INT8_MAX).to(torch.int8)
    payload = torch.empty(g, n + 4 * nblocks, dtype=torch.uint8, device=rows.device)
    payload[:, :n] = q.view(torch.uint8)
    payload[:, n:] = scales.view(torch.uint8)
    return payload, q.float() * per_value


def int8_decode(payload: torch.Tensor, ids: torch.Tensor, nblocks: int) -> torch.Tensor:
    """The inverse of `int8_encode`'s payload: (g, n) fp32 rows."""
    n = ids.numel()
    scales = payload[:, n:].contiguous().view(torch.float32)
    return payload[:, :n].view(torch.int8).float() * scales[:, ids]


class CompressedReduceScatter(ReduceScatter):
    """One FSDP unit's gradient reduce-scatter, encoded on the wire; it sums
    (FSDP divides). Holds the unit's error-feedback residual under int8."""

    def __init__(
        self,
        compression: str,
        counter: CommCounter,
        *,
        error_feedback: bool = True,
        segments: Sequence[int] = (),
    ):
        if compression not in ("bf16", "int8"):
            raise ValueError(f"unknown gradient compression {compression!r}")
        self.compression = compression
        self.counter = counter
        self.error_feedback = error_feedback and compression == "int8"
        self.segments = list(segments)  # each parameter's values in one row
        self.residual: torch.Tensor | None = None
        self._blocks: tuple[torch.Tensor, int] | None = None

    def allocate(
        self, size: Sequence[int | torch.SymInt], *, dtype: torch.dtype, device: torch.device
    ) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(
        self,
        output_tensor: torch.Tensor,
        input_tensor: torch.Tensor,
        group: dist.ProcessGroup,
        op,
        async_op: bool = False,
    ) -> None:
        if op != dist.ReduceOp.SUM:
            raise RuntimeError(
                f"compressed reduce-scatter only sums (force_sum_reduction_for_comms), got {op}"
            )
        rows = input_tensor.view(group.size(), -1)
        received = self.decode(self._exchange(self.encode(rows), group), rows.shape[1])
        output_tensor.copy_(received.sum(dim=0))
        return None  # done: the caller's stream already waits on it

    def encode(self, rows: torch.Tensor) -> torch.Tensor:
        """(g, n) rows, row j for rank j -> what goes on the wire, one row each.
        int8 with error feedback adds last step's residual and keeps this one's."""
        if self.compression == "bf16":
            return rows.to(torch.bfloat16).contiguous()
        ids, nblocks = self._block_ids(rows.shape[1], rows.device)
        if not self.error_feedback:
            return int8_encode(rows, ids, nblocks)[0]
        corrected = rows.float()
        if self.residual is not None and self.residual.shape == corrected.shape:
            corrected = corrected + self.residual
        payload, decoded = int8_encode(corrected, ids, nblocks)
        self.residual = corrected - decoded
        return payload

    def decode(self, received: torch.Tensor, n: int) -> torch.Tensor:
        """The wire rows back to (g, n) fp32 rows."""
        if self.compression == "bf16":
            return received.float()
        return int8_decode(received, *self._block_ids(n, received.device))

    def _block_ids(self, n: int, device: torch.device) -> tuple[torch.Tensor, int]:
        if self._blocks is None or self._blocks[0].numel() != n or self._blocks[0].device != device:
            # FSDP reduces only parameters that have a gradient: if the layout is
            # not the one expected, blocks fall back to plain runs of BLOCK.
            segments = self.segments if sum(self.segments) == n else [n]
            ids, nblocks = block_ids(segments)
            self._blocks = ids.to(device), nblocks
        return self._blocks

    def _exchange(self, send: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
        """Row j to rank j; returns every rank's row for this rank's shard."""
        received = torch.empty_like(send)
        row_bytes = send[0].numel() * send.element_size()
        self.counter.timed(
            "reduce_scatter", (group.size() - 1) * row_bytes,
            dist.all_to_all_single, received, send, group=group,
        )
        return received


def compress_gradients(
    units: list[FSDPModule], compression: str, counter: CommCounter, *, error_feedback: bool = True
) -> list[CompressedReduceScatter]:
    """Give every FSDP unit a compressed reduce-scatter (none: leave FSDP's)."""
    if compression == "none":
        return []
    hooks = []
    for unit in units:
        hook = CompressedReduceScatter(
            compression, counter, error_feedback=error_feedback, segments=_row_segments(unit)
        )
        unit.set_custom_reduce_scatter(hook)
        unit.set_force_sum_reduction_for_comms(True)  # we sum; FSDP divides
        hooks.append(hook)
    return hooks


def _row_segments(unit: FSDPModule) -> list[int]:
    """How many values of each of the unit's parameters one reduce-scatter row
    holds, in FSDP's order (its padded shard: dim-0 sharding)."""
    state = unit._get_fsdp_state()
    groups = getattr(state, "_fsdp_param_groups", None)  # torch >= 2.12: a list
    if groups is None:  # earlier: at most one group
        groups = [g for g in [getattr(state, "_fsdp_param_group", None)] if g is not None]
    return [p.padded_sharded_param_size.numel() for g in groups for p in g.fsdp_params]
