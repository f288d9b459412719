"""Whether a job's model fits one worker's memory: a pure decision over
numbers, so tests feed it made-up models and workers.

Per rank, at data-parallel shard degree N (FSDP shards over N ranks; tensor
parallelism, degree T, splits each parameter over T ranks first):

    sharded state      8 B x P / (N T)     fp32 param and grad
                       + the optimizer's state, as its descriptor counts it
                       (workers/schema/recipes.py): AdamW's and Adam's two moments
                       8 B x P / (N T), SGD's momentum 4 (none without)
    + gathered         the largest FSDP unit's parameters, all-gathered in the
                       param dtype (a full_shard step gathers one unit at a
                       time); `shard_grad_op` keeps every unit gathered from
                       forward to backward: all P / T of them

Activations, the allocator's slack and the process itself come on top and
are not counted: a job refused here could never run; one admitted may still
need more. A job runs at any of its valid world sizes, so each must fit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workers.schema import JobSpec

ADAM_BYTES_PER_PARAM = 16  # fp32 param, grad and AdamW's two moments: a made-up model's state
GB = 1e9


@dataclass(frozen=True)
class ModelSize:
    num_params: int
    largest_unit: int  # parameters of the largest FSDP unit
    param_bytes: int  # bytes per value of the gathered params (param_dtype)
    keeps_gathered: bool = False  # shard_grad_op: every unit stays gathered through backward
    tp: int = 1
    optimizer: str = "adamw"
    # the sharded state per rank (params, grads, the optimizer's) at a shard degree
    # (workers/schema/recipes.py model_state_bytes); None: AdamW's, 16 B/param
    state: Callable[[int], float] | None = None

    def per_rank_bytes(self, shard_degree: int) -> tuple[float, float]:
        """(sharded state, gathered) bytes per rank at this shard degree."""
        params = self.num_params / self.tp
        gathered = (params if self.keeps_gathered else self.largest_unit / self.tp) * self.param_bytes
        state = (ADAM_BYTES_PER_PARAM * params / shard_degree if self.state is None
                 else self.state(shard_degree))
        return state, gathered

    def state_bytes_per_param(self, shard_degree: int) -> float:
        """The sharded state per rank as bytes per parameter before sharding (AdamW: 16)."""
        return self.per_rank_bytes(shard_degree)[0] * shard_degree * self.tp / self.num_params


@dataclass(frozen=True)
class MemoryDecision:
    fits: bool
    reason: str = ""  # the figures, when it does not fit
    world_size: int | None = None  # the smallest size that does not fit
    need_bytes: float = 0.0
    worker_bytes: float = 0.0
    fits_from: int | None = None  # the smallest valid size that fits, if any


class MemoryFitPolicy:
    def check(self, model: ModelSize, sizes: Sequence[tuple[int, int]],
              worker_bytes: float | None, source: str = "a worker") -> MemoryDecision:
        """`sizes`: the job's valid (world size, shard degree) pairs;
        `worker_bytes`: one worker's memory (None: unknown, nothing refused);
        `source`: where that figure comes from, for the message."""
        if worker_bytes is None or not sizes:
            return MemoryDecision(True)
        need = {n: sum(model.per_rank_bytes(shard)) for n, shard in sizes}
        too_big = sorted(n for n in need if need[n] > worker_bytes)
        if not too_big:
            return MemoryDecision(True)
        n = too_big[0]
        shard = dict(sizes)[n]
        state, gathered = model.per_rank_bytes(shard)
        fitting = sorted(m for m in need if need[m] <= worker_bytes)
        fits_from = fitting[0] if fitting else None
        tp = f" x {model.tp} (tp)" if model.tp > 1 else ""
        recipe = "" if model.optimizer == "adamw" else f" ({model.optimizer})"
        reason = (
            f"the model needs {need[n] / GB:.2f} GB per rank at {n} workers: sharded state"
            f"{recipe} {model.state_bytes_per_param(shard):.3g} B x {model.num_params:,} params "
            f"/ {shard}{tp} = {state / GB:.2f} GB, plus "
            f"{gathered / GB:.2f} GB gathered ("
            + ("every unit, shard_grad_op" if model.keeps_gathered else
               f"the largest unit, {model.largest_unit:,} params")
            + f"); {source} has {worker_bytes / GB:.2f} GB"
            + (f". It fits from {fits_from} workers: set workers.min to at least that"
               if fits_from is not None else "")
        )
        return MemoryDecision(False, reason, n, need[n], worker_bytes, fits_from)


def remedies(spec: JobSpec, worker_bytes: float, *, room: int | None = None,
             memory_field: str | None = None) -> str:
    """What would make a job whose model fits none of its sizes fit
    `worker_bytes` a rank, each with its figure, for the refusal's message:
    the fewest workers at which it fits (`room`: how many workers of its size
    the cluster could place, where known), a smaller model, more memory a
    worker (`memory_field`: the field that set it, else a larger CPU share of
    a node), parameters in a 2-byte dtype; and why `sharding.cpu_offload`
    would not (the memory counted here is where it would put the state)."""
    from workers.schema.base import MAX_WORKERS

    model, largest = model_size(spec), spec.max_workers

    def need(n: int, size: ModelSize = model) -> float:
        return sum(size.per_rank_bytes(shard_degrees(spec, [n])[0][1]))

    ways, tp = [], _tp(spec)
    workers = next((n for n in range(largest + 1, MAX_WORKERS + 1)
                    if n % tp == 0 and need(n) <= worker_bytes), None)
    if workers is not None:
        dp = workers // tp
        batch = (f", train.global_batch_size at least {dp}"
                 if spec.train.global_batch_size < dp else "")
        place = (f"; the cluster has room for {room} workers of this size: add nodes"
                 if room is not None and room < workers else "")
        ways.append(f"at least {workers} workers (workers.max{batch}{place})")
    elif (gathered := model.per_rank_bytes(1)[1]) < worker_bytes:
        ways.append(f"more workers than the {MAX_WORKERS} a job may have")
    else:
        less = [way for way, applies in (
            ("fewer sharding.blocks_per_unit", spec.sharding.blocks_per_unit > 1),
            ("full_shard rather than shard_grad_op", spec.sharding.strategy == "shard_grad_op"))
            if applies]
        ways.append(f"no number of workers: what a rank gathers ({gathered / GB:.2f} GB) is the "
                    "same at any shard degree" + (f" ({' or '.join(less)} gathers less)" if less else ""))
    most = int(model.num_params * worker_bytes / need(largest))
    ways.append(f"a model of at most about {most:,} parameters (this one has {model.num_params:,}) "
                f"at {largest} workers")
    if memory_field is not None:
        ways.append(f"{memory_field} of at least {need(largest) / GB:.2f}, where the workers have it")
    else:
        ways.append("more memory a worker: a larger resources_per_worker.cpu (a worker's share of "
                    "a node's memory grows with it) or nodes with more memory")
    if spec.sharding.param_dtype == "float32":
        half = spec.model_copy(update={"sharding": spec.sharding.model_copy(
            update={"param_dtype": "bfloat16"})})
        smaller = need(largest, model_size(half))
        ways.append(f"sharding.param_dtype bfloat16 ({smaller / GB:.2f} GB a rank at {largest} "
                    "workers" + ("" if smaller <= worker_bytes else ", not enough alone") + ")")
    where = ("it moves a GPU's sharded state into host memory, the memory counted here"
             if spec.resources_per_worker.gpu else "a CPU worker's state is in host memory already")
    return f"To fit: {'; or '.join(ways)}. sharding.cpu_offload would not help: {where}"


def model_size(spec: JobSpec) -> ModelSize:
    """A job's model, as the policy counts it (from the spec alone: torch-free)."""
    count = spec.model.param_count()
    from workers.schema.adapter import job_state_bytes
    from workers.schema.base import DTYPE_BYTES

    sh, train, tp = spec.sharding, spec.train, _tp(spec)

    def state(shard_degree: int) -> float:
        return job_state_bytes(spec, round(count.total / tp), shard_degree, tp)

    return ModelSize(num_params=count.total, largest_unit=count.largest_unit(sh.blocks_per_unit),
                     param_bytes=DTYPE_BYTES[sh.param_dtype],
                     keeps_gathered=sh.strategy == "shard_grad_op", tp=tp,
                     optimizer=train.optimizer, state=state)


def shard_degrees(spec: JobSpec, world_sizes: Sequence[int]) -> list[tuple[int, int]]:
    """(world size, FSDP's shard degree there) for each size."""
    tp = _tp(spec)
    return [(n, spec.sharding.mesh_shape(max(1, n // tp))[-1]) for n in world_sizes]


def _tp(spec: JobSpec) -> int:
    parallelism = getattr(spec, "parallelism", None)  # tensor parallelism, where the spec has it
    return parallelism.tp if parallelism is not None else 1
