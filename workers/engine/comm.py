"""Count the bytes FSDP's collectives really move, and the primer's theory.

FSDP2 issues its all-gathers, reduce-scatters and (HSDP/replicate) all-reduces
through `torch.distributed` from one module. `CommCounter.install()` routes
that module's `dist` name through a thin proxy that records each real call's
tensor sizes and group size before forwarding it unchanged. Bytes are what
this rank sends or receives under the bandwidth-optimal (ring) algorithms:

    all-gather      (g-1)   x shard bytes      (receives every other shard)
    reduce-scatter  (g-1)   x shard bytes      (sends every other shard)
    all-reduce      2(g-1)/g x tensor bytes    (reduce-scatter + all-gather)

so that over a step they add up to the primer's 3(N-1)/N x S for FSDP and
2(N-1)/N x S for DDP when the collectives are the ones we expect. A custom
collective FSDP calls through a hook (workers/engine/compression.py) reports the
bytes it really sends through `CommCounter.timed` itself.

Tensor parallelism's collectives are DTensor redistributions (the plan's
input and output layouts, and their transposes in backward), issued as
functional collectives from DTensor's placement code. The same kind of proxy
stands in for that code's `funcol` and counts the calls on a mesh dimension
named `tp` as `tp_all_gather`, `tp_reduce_scatter` and `tp_all_reduce` (the
same ring byte counts; a reduce-scatter's input is the whole tensor, so
(g-1)/g x its bytes). Redistributions over other dimensions (FSDP's DTensors
in gradient clipping, a state dict's gather) are not TP traffic and are not
counted. TP's formula is in workers/engine/tensor_parallel.py. Functional
collectives complete when their result is first used, elsewhere: they count
bytes and calls, not time.

An optimizer that gathers whole matrices (workers/engine/whole_matrix.py) does
it inside `CommCounter.attributed("optimizer")`: there DTensor's collectives
over every mesh dimension count as `optimizer_all_gather` (and so on), not as
TP's; the optimizer says what they should come to (`comm_bytes_per_step`).

Time, on the training thread's clock:

    comm time     how long each collective was in flight: a blocking call's
                  duration; an async one's from issue until it completed
    exposed comm  how long the training thread was held by collectives: a
                  blocking call's duration, an async call's issue, and the
                  time it spent in the returned Work's `wait()`

On CPUs (gloo) FSDP's collectives block unless they are issued async (explicit
prefetch, see workers/engine/sharding.py), so there exposed == comm time except for
what prefetch overlaps. On GPUs the collectives run on side streams and the
host never sees them end: these clocks would measure only the enqueue, so the
trainer reports neither there (a profiler trace can).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch.distributed as dist

_FSDP_COLLECTIVES_MODULE = "torch.distributed.fsdp._fully_shard._fsdp_collectives"
# Where DTensor issues its redistributions' collectives (as `funcol`).
_DTENSOR_COLLECTIVES_MODULES = (
    "torch.distributed.tensor.placement_types",
    "torch.distributed.tensor._collective_utils",
)
TP_DIM = "tp"  # the mesh dimension whose traffic counts as TP's (workers/engine/tensor_parallel.py)
_attribution = threading.local()  # .owner: who DTensor's collectives are counted for, if anyone


@dataclass
class CommTally:
    bytes_by_op: Counter = field(default_factory=Counter)
    calls_by_op: Counter = field(default_factory=Counter)
    time_s: float = 0.0  # comm time: collectives in flight
    exposed_s: float = 0.0  # the part of it the training thread waited for

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes_by_op.values())

    @property
    def collectives(self) -> int:
        return sum(self.calls_by_op.values())


class _CountingDist:
    """Stands in for `torch.distributed` inside FSDP's collectives module."""

    def __init__(self, counter: CommCounter):
        self._counter = counter

    def __getattr__(self, name):
        return getattr(dist, name)

    def all_gather_single(self, output_tensor, input_tensor, group=None, async_op=False):
        g = dist.get_world_size(group)
        nbytes = (g - 1) * input_tensor.numel() * input_tensor.element_size()
        return self._counter.timed(
            "all_gather", nbytes, dist.all_gather_single, output_tensor, input_tensor,
            group=group, async_op=async_op,
        )

    def reduce_scatter_single(self, output, input, group=None, op=None, async_op=False):
        g = dist.get_world_size(group)
        nbytes = (g - 1) * output.numel() * output.element_size()
        kwargs = {"group": group, "async_op": async_op}
        if op is not None:
            kwargs["op"] = op
        return self._counter.timed(
            "reduce_scatter", nbytes, dist.reduce_scatter_single, output=output, input=input,
            **kwargs,
        )

    def all_reduce(self, tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        g = dist.get_world_size(group)
        nbytes = 2 * (g - 1) * tensor.numel() * tensor.element_size() // g
        return self._counter.timed(
            "all_reduce", nbytes, dist.all_reduce, tensor, op=op, group=group, async_op=async_op
        )


def _mesh_dim(group: Any) -> tuple[str | None, int]:
    """(dimension name, size) of a functional collective's `(mesh, dim)` group;
    (None, 0) for any other kind of group."""
    if not (isinstance(group, tuple) and len(group) == 2):
        return None, 0
    mesh, dim = group
    names = getattr(mesh, "mesh_dim_names", None) or ()
    if isinstance(dim, str):
        return dim, mesh.size(names.index(dim))
    return (names[dim] if dim < len(names) else None), mesh.size(dim)


class _CountingFuncol:
    """Stands in for `torch.distributed._functional_collectives` inside DTensor's
    placement code: counts the collectives over the `tp` mesh dimension."""

    def __init__(self, counter: CommCounter, funcol: Any):
        self._counter, self._funcol = counter, funcol

    def __getattr__(self, name):
        return getattr(self._funcol, name)

    def _count(self, op: str, group: Any, nbytes_of_g) -> None:
        name, g = _mesh_dim(group)
        owner = getattr(_attribution, "owner", None)
        if owner is not None and g > 1:  # the owner's, over any dimension
            self._counter.count(op.replace("tp_", f"{owner}_", 1), nbytes_of_g(g))
        elif name == TP_DIM and g > 1:
            self._counter.count(op, nbytes_of_g(g))

    def all_gather_single(self, tensor, gather_dim=0, group=None, *args, **kwargs):
        nbytes = tensor.numel() * tensor.element_size()
        self._count("tp_all_gather", group, lambda g: (g - 1) * nbytes)
        return self._funcol.all_gather_single(tensor, gather_dim, group, *args, **kwargs)

    def reduce_scatter_single(self, tensor, reduceOp, scatter_dim=0, group=None, *args, **kwargs):
        nbytes = tensor.numel() * tensor.element_size()
        self._count("tp_reduce_scatter", group, lambda g: (g - 1) * nbytes // g)
        return self._funcol.reduce_scatter_single(tensor, reduceOp, scatter_dim, group, *args,
                                                  **kwargs)

    def all_reduce(self, tensor, reduceOp, group=None, *args, **kwargs):
        nbytes = tensor.numel() * tensor.element_size()
        self._count("tp_all_reduce", group, lambda g: 2 * (g - 1) * nbytes // g)
        return self._funcol.all_reduce(tensor, reduceOp, group, *args, **kwargs)


class CommCounter:
    """Process-wide tally of FSDP's collective traffic; `take()` reads and resets."""

    _installed: CommCounter | None = None

    def __init__(self):
        self._lock = threading.Lock()
        self._tally = CommTally()

    @classmethod
    def install(cls) -> CommCounter:
        import importlib

        if cls._installed is None:
            # Any: its `dist` global is replaced below, which ModuleType's typing does not allow.
            module: Any = importlib.import_module(_FSDP_COLLECTIVES_MODULE)
            if getattr(module, "dist", None) is not dist:
                raise RuntimeError(
                    f"{_FSDP_COLLECTIVES_MODULE} no longer calls torch.distributed as 'dist'; "
                    "collective byte counting needs updating for this torch version"
                )
            cls._installed = cls()
            module.dist = _CountingDist(cls._installed)
            cls._installed._count_dtensor_collectives()
        return cls._installed

    def _count_dtensor_collectives(self) -> None:
        import importlib

        import torch.distributed._functional_collectives as funcol

        for name in _DTENSOR_COLLECTIVES_MODULES:
            module: Any = importlib.import_module(name)
            if getattr(module, "funcol", None) is not funcol:
                raise RuntimeError(
                    f"{name} no longer calls the functional collectives as 'funcol'; "
                    "TP's collective byte counting needs updating for this torch version"
                )
            module.funcol = _CountingFuncol(self, funcol)

    @classmethod
    def current(cls) -> CommCounter | None:
        """The installed counter, if any (what a collective outside FSDP's and
        DTensor's code reports its bytes to, through `timed`)."""
        return cls._installed

    @staticmethod
    @contextmanager
    def attributed(owner: str) -> Iterator[None]:
        """DTensor's collectives on this thread, over any mesh dimension,
        counted as `owner`'s (`{owner}_all_gather`, ...) while inside."""
        before = getattr(_attribution, "owner", None)
        _attribution.owner = owner
        try:
            yield
        finally:
            _attribution.owner = before

    def count(self, op_name: str, nbytes: int) -> None:
        """Count a collective's bytes under `op_name`, untimed (see the module doc)."""
        with self._lock:
            self._tally.bytes_by_op[op_name] += nbytes
            self._tally.calls_by_op[op_name] += 1

    def timed(self, op_name: str, nbytes: int, fn, /, *args, **kwargs):
        """Call the collective `fn`, counting `nbytes` and its time under `op_name`."""
        start = time.perf_counter()
        result = fn(*args, **kwargs)
        elapsed = time.perf_counter() - start
        is_async = isinstance(result, dist.Work)
        with self._lock:
            self._tally.bytes_by_op[op_name] += nbytes
            self._tally.calls_by_op[op_name] += 1
            self._tally.exposed_s += elapsed
            if not is_async:
                self._tally.time_s += elapsed
        return _TimedWork(result, start, elapsed, self) if is_async else result

    def _add_time(self, comm_s: float, exposed_s: float) -> None:
        with self._lock:
            self._tally.time_s += comm_s
            self._tally.exposed_s += exposed_s

    def take(self) -> CommTally:
        with self._lock:
            tally, self._tally = self._tally, CommTally()
        return tally


class _TimedWork(dist.Work):
    """An async collective's Work (FSDP checks `isinstance(work, Work)` before
    waiting): `wait()` adds its time in flight and the time it held the caller.

    In flight ends when the completion callback ran, if that was before the
    wait began; a collective the caller was already waiting for is in flight
    until the wait returns (the caller's wake-up, which on a loaded machine
    can come well after the callback, held it too). Either way it is never
    less than the time it held the caller: exposed <= comm, per collective."""

    def __init__(self, work: dist.Work, issued: float, issue_s: float, counter: CommCounter):
        super().__init__()
        self._work, self._issued, self._issue_s, self._counter = work, issued, issue_s, counter
        self._done_at: float | None = None
        self._timed = False
        work.get_future().add_done_callback(self._mark_done)

    def _mark_done(self, _future) -> None:
        self._done_at = time.perf_counter()

    def wait(self, timeout=None) -> bool:
        start = time.perf_counter()
        result = self._work.wait() if timeout is None else self._work.wait(timeout)
        end = time.perf_counter()
        if not self._timed:  # a second wait finds it done: nothing more to count
            self._timed = True
            done_at = self._done_at
            done = done_at if done_at is not None and done_at <= start else end
            held = end - start
            in_flight = max(done - self._issued, self._issue_s + held)
            self._counter._add_time(in_flight, held)
        return result

    def is_completed(self) -> bool:
        return self._work.is_completed()

    def get_future(self):
        return self._work.get_future()


def comm_theory_bytes(
    strategy: str,
    mesh_shape: tuple[int, ...],
    param_bytes: int,
    reduce_bytes: int,
    micro_steps: int = 1,
    reduce_scatter_ratio: float = 1.0,
) -> float:
    """Bytes one rank moves per optimizer step by the primer's formulas.

    param_bytes: the model in the all-gather (param) dtype; reduce_bytes: in
    the reduce dtype. Every micro-step all-gathers for forward and (unless
    ZeRO-2) again for backward; gradients are reduced once per step.
    reduce_scatter_ratio: R, the reduce-scatter's wire bytes per reduce-dtype
    byte under gradient compression (HSDP's all-reduce is not compressed).
    """
    if strategy == "no_shard":
        r = mesh_shape[0]
        return 2 * (r - 1) / r * reduce_bytes
    shard = mesh_shape[-1]
    replicate = mesh_shape[0] if len(mesh_shape) == 2 else 1
    gathers = micro_steps if strategy == "shard_grad_op" else 2 * micro_steps
    frac = (shard - 1) / shard
    total = gathers * frac * param_bytes + frac * reduce_bytes * reduce_scatter_ratio
    if replicate > 1:
        total += 2 * (replicate - 1) / replicate * reduce_bytes / shard
    return total
