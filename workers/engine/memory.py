"""A rank's host memory: the theory its peak is held against, and the C
allocator's slack kept out of the peak.

    peak_theory(job, shard_degree, activation_bytes) -> MemoryTheory
    saved_activation_bytes(job, batch_size) -> int
    limit_allocator_slack() -> bool

The theory of a step's peak, per rank (FSDP only, tp = 1):

- state: the engine's `mem_theory_bytes` metric (workers/engine/metrics.py):
  fp32 params and grads, 8 B x P / N, and the optimizer's state as its
  descriptor counts it (workers/schema/recipes.py): with AdamW 16 B x P / N in
  all, the primer's figure;
- the largest FSDP unit while it is computed: its gathered params and its
  unsharded gradient (before the reduce-scatter), in the params' and the
  reduction's dtypes; with explicit prefetch of depth d, d more units' params.
  What FSDP2 adds on top (the collectives' flat buffers, the implicit one-unit
  prefetch of the backward) is NOT counted: it shows in measured / theory;
- activations: what autograd saves during the forward of one micro-batch,
  counted (`saved_activation_bytes`), not estimated.

The three are never all held at once (a step's gradients grow as its
activations are freed), so the sum is a bound the peak should come near.

The allocator: glibc serves an allocation under its mmap threshold from the
heap, and by default raises that threshold to the largest block freed so far
(up to 32 MiB). After the first step every activation and gathered unit then
lives in the heap, and what the step frees stays there in pieces a later
allocation of another size cannot reuse: RSS of a rank training the 25M GPT of
bench/memory at N = 4 peaked at 2.2x the theory. A fixed threshold (which also
stops the raising) sends every block above it to its own mapping, given back
to the OS when freed. Below 4 MiB the page faults of fresh mappings cost step
time (+35% at 128 KiB on that model); at 4 MiB none was measurable.
"""

from __future__ import annotations

import ctypes
import platform
from dataclasses import dataclass

import torch

from workers.engine.metrics import mem_theory_bytes
from workers.schema import JobSpec

MMAP_THRESHOLD_BYTES = 4 << 20  # blocks above it are mmapped, and unmapped when freed
_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter numbers (malloc.h)


def limit_allocator_slack(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold at `threshold` for this process and give back
    the free memory its heaps hold; False (and nothing done) off glibc."""
    if platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(None)  # this process's C library
    applied = bool(libc.mallopt(_M_MMAP_THRESHOLD, threshold))
    libc.malloc_trim(0)
    return applied


@dataclass(frozen=True)
class MemoryTheory:
    state_bytes: int  # params, grads, optimizer state (AdamW: 16 B x P / N)
    unit_bytes: int  # the largest unit gathered, and its unsharded gradient
    activation_bytes: int  # what autograd saves in one micro-batch's forward

    @property
    def total(self) -> int:
        return self.state_bytes + self.unit_bytes + self.activation_bytes


def unit_bytes(job: JobSpec) -> int:
    """The largest FSDP unit's gathered params (with explicit prefetch of
    depth d, d more units) and its unsharded gradient."""
    from workers.engine.sharding import DTYPES

    sh = job.sharding
    unit = job.model.param_count().largest_unit(sh.blocks_per_unit)
    gathered = 1 + max(sh.prefetch_forward, sh.prefetch_backward)
    return unit * (gathered * DTYPES[sh.param_dtype].itemsize + DTYPES[sh.reduce_dtype].itemsize)


def peak_theory(job: JobSpec, shard_degree: int, activation_bytes: int) -> MemoryTheory:
    return MemoryTheory(
        state_bytes=mem_theory_bytes(job, job.model.num_params(), shard_degree),
        unit_bytes=unit_bytes(job),
        activation_bytes=activation_bytes,
    )


def saved_activation_bytes(job: JobSpec, batch_size: int) -> int:
    """Bytes autograd saves for backward in the forward (and the loss) of the
    job's model (with its adapters, if any; in `sharding.param_dtype`), whole
    on this CPU, on `batch_size` sequences of random token ids: each saved
    tensor's storage counted once, the parameters' not at all."""
    from workers.engine.sharding import DTYPES
    from workers.models import build_model

    model = build_model(job.model)
    if job.adapter is not None:  # a frozen base saves less; the adapters save their inputs
        from workers.engine.adapters import add_adapters

        add_adapters(model, job)
    # FSDP's MixedPrecisionPolicy computes in param_dtype: so are the saved tensors
    model.to(DTYPES[job.sharding.param_dtype])
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        # A saved storage stays alive until backward, so its address is its own.
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            saved.setdefault(storage.data_ptr(), storage.nbytes())
        return t

    x = torch.randint(0, job.model.vocab_size, (batch_size, job.model.seq_len))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = model(x)
        torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), x.flatten())
    return sum(saved.values())
