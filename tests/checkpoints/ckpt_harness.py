"""Ranks in spawned processes, and the tiny FSDP2 model they checkpoint.

`run_ranks(fn, world_size, *args)` starts `world_size` processes that form a
gloo group on 127.0.0.1 and call `fn(rank, world_size, *args)`; a failure in
any rank fails the caller. Functions given to it live here so that the
spawned processes can import them.
"""

from __future__ import annotations

import tempfile
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

from checkpoints import CheckpointStore
from checkpoints.checkpointer import Checkpointer
from checkpoints.stateful import ModelAndOptimizer
from workers.engine.distributed import LOOPBACK, open_store

SECRET = b"brigade-test-secret"

# What the fork server imports once. Not this module: Python 3.11's fork
# server ignores the caller's sys.path, where this module is found.
_PRELOAD = [
    "torch",
    "torch._dynamo",  # fully_shard's first call imports it
    "torch.distributed.checkpoint.state_dict",
    "torch.distributed.fsdp",
    "checkpoints.checkpointer",
    "checkpoints.stateful",
]


def init_single_rank() -> None:
    """A one-rank gloo default group in this process, its store on loopback."""
    dist.init_process_group("gloo", store=open_store(LOOPBACK, 1, 60), rank=0, world_size=1,
                            timeout=timedelta(seconds=60))


def run_ranks(fn, world_size: int, *args: Any) -> None:
    # A fork server that has imported torch once starts ranks in a fraction of
    # the seconds a fresh interpreter takes to import it.
    mp.set_forkserver_preload(_PRELOAD)
    # The ranks meet in a file, not at a port: no other process can take it.
    with tempfile.TemporaryDirectory() as rendezvous:
        mp.start_processes(
            _rank_main,
            args=(fn, world_size, f"{rendezvous}/store", args),
            nprocs=world_size,
            start_method="forkserver",
        )


def _init(rank: int, world_size: int, rendezvous: str) -> None:
    dist.init_process_group(
        "gloo",
        init_method=f"file://{rendezvous}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=60),
    )


def _rank_main(rank: int, fn, world_size: int, rendezvous: str, args: tuple) -> None:
    torch.set_num_threads(1)
    _init(rank, world_size, rendezvous)
    try:
        fn(rank, world_size, *args)
    finally:
        dist.destroy_process_group()


# -- the model ---------------------------------------------------------------


def build(world_size: int, seed: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    """A tiny MLP under FSDP2 (uneven shards at world size 3) and its AdamW."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 5))
    mesh = init_device_mesh("cpu", (world_size,))
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    batch = torch.randn(4, 6, generator=generator)
    model(batch).pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()


def full_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """Every parameter and optimizer state as a full (unsharded) tensor; collective."""
    model_state, optim_state = get_state_dict(model, optimizer)
    flat = {f"model.{k}": v for k, v in model_state.items()}
    for fqn, states in optim_state["state"].items():
        flat.update({f"optim.{fqn}.{k}": v for k, v in states.items()})
    full = {k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in flat.items()}
    return {k: v.detach().clone() for k, v in full.items()}


def assert_bitwise_equal(got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert got.keys() == expected.keys()
    for key in expected:
        assert torch.equal(got[key], expected[key]), f"{key} differs"


# -- what the ranks do -------------------------------------------------------


def checkpointer(store_kwargs: dict[str, Any], **kwargs: Any) -> Checkpointer:
    return Checkpointer(CheckpointStore(secret=SECRET, **store_kwargs), **kwargs)


def save_sync_then_async(rank: int, world_size: int, store_kwargs: dict, expected_path: str):
    """Step 1 saved synchronously, step 2 asynchronously while training goes
    on; rank 0 writes what each step holds to `expected_path`."""
    model, optimizer = build(world_size, seed=0)
    ckpt = checkpointer(store_kwargs, keep_last=None)
    state = {"train": ModelAndOptimizer(model, optimizer)}
    expected = {}
    for step, save in ((1, ckpt.save), (2, ckpt.async_save)):
        train_step(model, optimizer, seed=step)
        expected[step] = full_state(model, optimizer)
        save(step, state, extra={"cursor": step * 100, "world_size": world_size})
    # Training (FSDP collectives on the default group) overlaps the save's
    # background collectives on the checkpoint group, and changes the state.
    train_step(model, optimizer, seed=3)
    changed = full_state(model, optimizer)["model.0.weight"]
    assert not torch.equal(changed, expected[2]["model.0.weight"])
    assert ckpt.wait().step == 2
    ckpt.close()
    if rank == 0:
        torch.save(expected, expected_path)


def load_and_compare(rank: int, world_size: int, store_kwargs: dict, expected_path: str) -> None:
    """Load each saved step into a differently initialised model at this
    world size; parameters and optimizer state must be bitwise equal."""
    expected = torch.load(expected_path)
    model, optimizer = build(world_size, seed=1234)
    ckpt = checkpointer(store_kwargs)
    state = {"train": ModelAndOptimizer(model, optimizer)}
    for step in (1, 2):
        result = ckpt.load(state, step=step)
        saved_by = (result.step, result.manifest.world_size, result.extra["cursor"])
        assert saved_by == (step, 2, step * 100)
        assert_bitwise_equal(full_state(model, optimizer), expected[step])
    result = ckpt.resume(state)  # the newest committed: step 2
    assert result.step == 2 and result.skipped == []
    assert_bitwise_equal(full_state(model, optimizer), expected[2])
    ckpt.close()


def load_falls_back_past_a_corrupt_shard(rank: int, world_size: int, store_kwargs: dict,
                                         expected_path: str) -> None:
    """Step 2's `__1_0.distcp` has a flipped byte: whichever rank verifies it,
    every rank passes over step 2 and loads step 1 over the whole state."""
    expected = torch.load(expected_path)
    model, optimizer = build(world_size, seed=1234)
    ckpt = checkpointer(store_kwargs)
    result = ckpt.load({"train": ModelAndOptimizer(model, optimizer)})
    assert result.step == 1, result
    assert [(r.step, r.reason) for r in result.skipped] == [
        (2, "step 2: file __1_0.distcp blake3 mismatch")
    ]
    assert_bitwise_equal(full_state(model, optimizer), expected[1])
    ckpt.close()


# -- single-process state -----------------------------------------------------


def state(value: float) -> dict:
    """A small state dict whose every entry says which step it was saved at."""
    model = {"w": torch.full((3, 4), value), "b": torch.arange(5.0) + value}
    return {"model": model, "cursor": int(value)}


def blank() -> dict:
    """The same structure, to load into."""
    return state(0.0) | {"cursor": -1}


def saved(checkpointer: Checkpointer, *steps: int) -> None:
    for step in steps:
        checkpointer.save(step, state(float(step)), extra={"cursor": step * 10})
    # Retention and clean-up run after each commit on rank 0's housekeeping
    # thread; a test that looks at or tampers with the steps next waits for them.
    checkpointer.wait()


# -- tampering, as an attacker or a bad disk would ----------------------------


def flip_byte(store: CheckpointStore, step: int, name: str, offset: int = -1) -> None:
    path = store.layout.file(step, name)
    data = bytearray(store.fs.cat_file(path))
    data[offset] ^= 0xFF
    store.fs.pipe_file(path, bytes(data))


def truncate(store: CheckpointStore, step: int, name: str) -> None:
    path = store.layout.file(step, name)
    store.fs.pipe_file(path, store.fs.cat_file(path)[:-1])


def unsign(store: CheckpointStore, step: int) -> None:
    """Remove the manifest: the step is then what a crash before the commit leaves."""
    store.fs.rm(store.layout.manifest(step))


def every_rank_raises(rank: int, world_size: int, store_kwargs: dict, mode: str) -> None:
    """A write that fails on rank 1 only raises on every rank (none hangs),
    and the group still works afterwards; so does a refusal rank 0 decides."""
    from checkpoints import CheckpointError, CheckpointExistsError

    ckpt = checkpointer(store_kwargs)
    broken = state(1.0) | ({"callback": lambda: None} if rank == 1 else {})
    save = ckpt.save if mode == "sync" else ckpt.async_save
    try:
        save(1, broken)
        ckpt.wait()
    except CheckpointError as exc:
        assert "writing step 1 failed" in str(exc), exc
    else:
        raise AssertionError(f"rank {rank} did not raise")
    save(2, state(2.0))
    ckpt.wait()
    try:
        save(2, state(2.0))
        ckpt.wait()  # an async save's refusal comes from here
    except CheckpointExistsError:
        pass
    else:
        raise AssertionError(f"rank {rank} did not refuse")
    assert [c.step for c in ckpt.store.list_committed()] == [2]
    ckpt.close()
