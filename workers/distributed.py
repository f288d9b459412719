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


def watchdog_env(backend: str, timeout_s: float) -> dict[str, str]:
    """What makes a dead or hung peer fail this rank instead of hanging it.

    gloo needs nothing: its collectives raise once the group's `timeout`
    passes (or at once when a peer's socket closes). NCCL's collectives run on
    GPU streams and never raise by themselves: its watchdog thread must be on,
    and async error handling must tear the communicator (and the process)
    down when a collective times out or a peer aborts, so the actor dies and
    Ray reports it. The heartbeat monitor kills a watchdog that is itself
    stuck (e.g. inside a CUDA call) a while after the collective timeout.
    """
    if backend != "nccl":
        return {}
    return {
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",  # abort the communicator, then the process
        "TORCH_NCCL_ENABLE_MONITORING": "1",  # watch the watchdog
        "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": str(int(max(60, 2 * timeout_s))),
        "TORCH_NCCL_BLOCKING_WAIT": "0",  # the watchdog, not the caller, handles timeouts
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "0",  # no flight-recorder dumps on a shared disk
    }


def apply_watchdog_env(backend: str, timeout_s: float) -> dict[str, str]:
    """Set `watchdog_env` in this process before the group is made (NCCL reads
    it then); a variable the operator set already is left alone. Returns what
    is in effect."""
    applied = {}
    for key, value in watchdog_env(backend, timeout_s).items():
        applied[key] = os.environ.setdefault(key, value)
    return applied


def init_process_group(rv: Rendezvous) -> str:
    """Form the default process group; returns the backend it chose."""
    import torch
    import torch.distributed as dist

    device = local_device()
    backend = pick_backend(device.type)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    apply_watchdog_env(backend, rv.timeout_s)
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
