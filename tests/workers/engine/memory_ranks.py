"""What the ranks of tests/workers/engine/test_memory_claims.py run (module-level,
so that ranks spawned by `tests.checkpoints.ckpt_harness.run_ranks` import them).

`state_bytes`: one real training step of the engine's Trainer, and the bytes
this rank holds of its parameters, gradients and optimizer state at the
moment all of them exist (right after `optimizer.step()`, before the step's
`zero_grad` frees the gradients). With an adapter, the frozen base's
parameters too (not the optimizer's: counted from the model, each at its
dtype) and whether any of them has a gradient or optimizer state.

`build_allocations`: the engine's sharded build (`build_sharded`, the real
layout and `parallelize`, the default seeded weights) under a dispatch mode
that records every tensor it allocates and how many bytes of them are alive
at once.
"""

from __future__ import annotations

import json
import weakref
from pathlib import Path

import torch
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from tests.workers.engine_spec import engine_job


def local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def local_bytes(tensor: torch.Tensor) -> int:
    t = local(tensor)
    return t.numel() * t.element_size()


def state_bytes(rank: int, world_size: int, out: str, train: dict | None = None,
                sections: dict | None = None) -> None:
    from workers.engine.metrics import mem_theory_bytes
    from workers.engine.trainer import Trainer

    job = engine_job(steps=2, workers=world_size, train=train or {}, **(sections or {}))
    trainer = Trainer(job)
    held: dict = {}

    def count(optimizer, args, kwargs) -> None:  # after step(), before zero_grad()
        params = [p for group in optimizer.param_groups for p in group["params"]]
        state = [t for p in params for t in optimizer.state[p].values()
                 if isinstance(t, torch.Tensor)]
        held.update(
            params=sum(local_bytes(p) for p in params),
            grads=sum(local_bytes(p.grad) for p in params if p.grad is not None),
            grads_missing=sum(p.grad is None for p in params),
            state=sum(local_bytes(t) for t in state),
            state_keys=sorted({k for p in params for k in optimizer.state[p]}),
            # what the shards' storage takes, FSDP's padding of uneven shards included
            param_storage=sum(local(p).untyped_storage().nbytes() for p in params),
            dtypes=sorted({str(local(p).dtype) for p in params}),
            all_dtensors=all(isinstance(p, DTensor) for p in params),
        )
        optimized = {id(p) for p in params}
        frozen = [p for p in trainer.model.parameters() if id(p) not in optimized]
        held.update(
            frozen=sum(local_bytes(p) for p in frozen),
            frozen_count=len(frozen),
            frozen_dtypes=sorted({str(local(p).dtype) for p in frozen}),
            frozen_trainable=sum(p.requires_grad for p in frozen),
            frozen_with_grad=sum(p.grad is not None for p in frozen),
            frozen_with_state=sum(bool(optimizer.state.get(p)) for p in frozen),
        )

    trainer.optimizer.register_step_post_hook(count)
    metrics = trainer.train_step()
    held.update(num_params=trainer.num_params,
                theory=mem_theory_bytes(job, trainer.num_params, world_size),
                metric_theory=metrics.mem_theory_bytes,
                full_param_bytes=4 * trainer.num_params)
    Path(f"{out}/state-{rank}.json").write_text(json.dumps(held))


class Allocations(TorchDispatchMode):
    """Every tensor storage allocated under it (not on the meta device): its
    numel, and the bytes of such storages alive at once (at the peak).
    A view of a storage already seen is not a new allocation."""

    def __init__(self):
        super().__init__()
        self.sizes: list[int] = []  # numel of each new storage, in elements of its tensor
        self.live = 0
        self.peak = 0
        self.live_sizes: dict[int, int] = {}  # id -> numel of storages alive now
        self.watch = 0  # a numel (the largest parameter's)...
        self.peak_watched_alive = 0  # ...and the most storages of that numel alive at once
        self._seen: weakref.WeakSet = weakref.WeakSet()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self._note(local(t))
        return out

    def _note(self, t: torch.Tensor) -> None:
        if t.device.type == "meta":
            return
        storage = t.untyped_storage()
        if storage.nbytes() == 0 or storage in self._seen:
            return
        self._seen.add(storage)
        numel = storage.nbytes() // t.element_size()
        self.sizes.append(numel)
        self.live += storage.nbytes()
        self.peak = max(self.peak, self.live)
        key = id(storage)
        self.live_sizes[key] = numel
        self.peak_watched_alive = max(self.peak_watched_alive,
                                      sum(n == self.watch for n in self.live_sizes.values()))
        weakref.finalize(storage, self._freed, key, storage.nbytes())

    def _freed(self, key: int, nbytes: int) -> None:
        self.live -= nbytes
        self.live_sizes.pop(key, None)


def build_allocations(rank: int, world_size: int, out: str, family: str = "gpt") -> None:
    from workers.engine.build import build_sharded
    from workers.engine.tensor_parallel import build_layout, parallelize

    model = {"family": family} if family != "gpt" else {}
    job = engine_job(workers=world_size, model=model)
    with torch.device("meta"):  # the full shapes, for the figures below
        shapes = {n: p.numel() for n, p in job.model.family_spec.build(job.model).named_parameters()}
    layout = build_layout(job, world_size, "cpu")
    mode = Allocations()
    mode.watch = max(shapes.values())
    with mode:
        built = build_sharded(job, torch.device("cpu"),
                              lambda m: parallelize(m, layout, job.sharding))
    params = list(built.model.parameters())
    Path(f"{out}/build-{rank}.json").write_text(json.dumps({
        "sizes": mode.sizes,
        "peak": mode.peak,
        "largest_alive_at_once": mode.peak_watched_alive,
        "largest_param": max(shapes.values()),
        "largest_param_bytes": 4 * max(shapes.values()),
        "model_bytes": 4 * sum(shapes.values()),
        "num_params": built.num_params,
        "shard_bytes": sum(local(p).untyped_storage().nbytes() for p in params),
        "local_numels": sorted(local(p).numel() for p in params),
    }))
