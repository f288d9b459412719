"""Ranks in spawned processes, and the tiny FSDP2 model they checkpoint.

`run_ranks(fn, world_size, *args)` spawns `world_size` processes that form a
gloo group on 127.0.0.1 and call `fn(rank, world_size, *args)`; a failure in
any rank fails the caller. Functions given to it live here so that the
spawned processes can import them.
"""

from __future__ import annotations

import socket
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.tensor import DTensor

from checkpoints import CheckpointStore
from checkpoints.checkpointer import Checkpointer
from checkpoints.stateful import ModelAndOptimizer

SECRET = b"brigade-test-secret"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_single_rank() -> None:
    """A one-rank gloo default group in this process."""
    _init(rank=0, world_size=1, port=free_port())


def run_ranks(fn, world_size: int, *args: Any) -> None:
    # A fork server that has imported torch once starts ranks in a fraction of
    # the seconds a fresh interpreter takes to import it.
    mp.set_forkserver_preload([__name__])
    mp.start_processes(
        _rank_main, args=(fn, world_size, free_port(), args), nprocs=world_size, start_method="forkserver"
    )


def _init(rank: int, world_size: int, port: int) -> None:
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=60),
    )


def _rank_main(rank: int, fn, world_size: int, port: int, args: tuple) -> None:
    torch.set_num_threads(1)
    _init(rank, world_size, port)
    try:
        fn(rank, world_size, *args)
    finally:
        t=__import__("time").time()
        dist.destroy_process_group()
        print("destroy", __import__("time").time()-t, flush=True)


# -- the model ---------------------------------------------------------------


def build(world_size: int, seed: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    """A tiny MLP under FSDP2 (uneven shards at world size 3) and its AdamW."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

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
    return {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().clone() for k, v in flat.items()}


def assert_bitwise_equal(got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert got.keys() == expected.keys()
    for key in expected:
        assert torch.equal(got[key], expected[key]), f"{key} differs"


# -- what the ranks do -------------------------------------------------------


def checkpointer(store_kwargs: dict[str, Any], **kwargs: Any) -> Checkpointer:
    return Checkpointer(CheckpointStore(secret=SECRET, **store_kwargs), **kwargs)


def save_sync_then_async(rank: int, world_size: int, store_kwargs: dict, expected_path: str) -> None:
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
    assert not torch.equal(full_state(model, optimizer)["model.0.weight"], expected[2]["model.0.weight"])
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
        assert (result.step, result.manifest.world_size, result.extra["cursor"]) == (step, 2, step * 100)
        assert_bitwise_equal(full_state(model, optimizer), expected[step])
    result = ckpt.resume(state)  # the newest committed: step 2
    assert result.step == 2 and result.skipped == []
    assert_bitwise_equal(full_state(model, optimizer), expected[2])
    ckpt.close()
