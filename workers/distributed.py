"""Process-group rendezvous: backend from the devices, free port, explicit timeout.

Used by the rank actors on Ray and by the off-cluster launcher (torchrun or a
single process) alike. torch is imported inside the functions so that modules
which only describe the group (the control plane) stay torch-free.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import timedelta

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True, kw_only=True)
class Rendezvous:
    master_addr: str
    master_port: int
    rank: int
    world_size: int
    timeout_s: float = 30.0


def pick_backend(device_type: str) -> str:
    """NCCL on CUDA devices, gloo on CPUs: never hard-coded by the caller."""
    return "nccl" if device_type == "cuda" else "gloo"


def local_device_type() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def local_device():
    """The device this process trains on: its (first visible) GPU, else the CPU."""
    import torch

    if torch.cuda.is_available():
        local_rank = int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count()
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def free_port(host: str = LOOPBACK) -> int:
    """A port that was free on `host` a moment ago (the caller binds it next)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, 0))
        return s.getsockname()[1]


def init_process_group(rv: Rendezvous) -> str:
    """Form the default process group; returns the backend it chose."""
    import torch
    import torch.distributed as dist

    device = local_device()
    backend = pick_backend(device.type)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        # Fail a hung collective instead of waiting forever: with async error
        # handling the watchdog tears the communicator down on timeout.
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    dist.init_process_group(
        backend=backend,
        init_method=f"tcp://{rv.master_addr}:{rv.master_port}",
        rank=rv.rank,
        world_size=rv.world_size,
        timeout=timedelta(seconds=rv.timeout_s),
        device_id=device if device.type == "cuda" else None,
    )
    return backend


def init_from_env(timeout_s: float = 30.0) -> str:
    """torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), or a
    single process when none is set."""
    rv = Rendezvous(
        master_addr=os.environ.get("MASTER_ADDR", LOOPBACK),
        master_port=int(os.environ.get("MASTER_PORT") or free_port()),
        rank=int(os.environ.get("RANK", "0")),
        world_size=int(os.environ.get("WORLD_SIZE", "1")),
        timeout_s=timeout_s,
    )
    return init_process_group(rv)


def destroy_process_group() -> None:
    import torch.distributed as dist

    if not dist.is_initialized():
        return
    try:
        # Let every rank reach the end before gloo's threads are torn down:
        # destroying while a peer still has work in flight can abort().
        dist.barrier()
    finally:
        dist.destroy_process_group()
