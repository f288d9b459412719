"""Process-group rendezvous: backend from the devices, explicit timeout, and a
store that rank 0 listens on before anyone is told its port.

Used by the rank actors on Ray and by the off-cluster launcher (torchrun or a
single process) alike. torch is imported inside the functions so that modules
which only describe the group (the control plane) stay torch-free.
"""

from __future__ import annotations

import contextlib
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
    timeout_s: float = 30.0  # a collective's (and the group's forming, once all have arrived)
    # How long a rank waits at the store for its peers to arrive (None: timeout_s). Ranks
    # start at different speeds (a warm process beside a cold one still importing torch),
    # which is start-up, not a hung peer: it has the start-up's timeout, not a collective's.
    join_timeout_s: float | None = None


def pick_backend(device_type: str) -> str:
    """NCCL on CUDA devices, gloo on CPUs: never hard-coded by the caller."""
    return "nccl" if device_type == "cuda" else "gloo"


def local_device():
    """The device this process trains on: its (first visible) GPU, else the CPU."""
    import torch

    if torch.cuda.is_available():
        local_rank = int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count()
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def free_port(host: str = LOOPBACK) -> int:
    """A port that was free on `host` a moment ago (the caller binds it next).

    Any process on the machine can take it in between (Ray's workers open
    connections all the time), so a process group's rendezvous does not use
    it: see `open_store`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, 0))
        return s.getsockname()[1]


def watchdog_env(backend: str, timeout_s: float) -> dict[str, str]:
    """What makes a dead or hung peer fail this rank instead of hanging it.

    gloo needs nothing: its collectives raise once the group's `timeout`
    passes (or at once when a peer's socket closes). NCCL's collectives run on
    GPU streams and never raise by themselves: its watchdog thread must be on,
    and async error handling must abort the communicator when a collective
    times out or a peer aborts, so that the rank's pending work fails. The
    process stays (mode 2, clean-up only): a survivor of a lost peer joins
    the group's next process group (recovery in place, `abandon_process_group`)
    and a rank that cannot fails its train call, which Ray reports. The
    heartbeat monitor kills a watchdog that is itself stuck (e.g. inside a
    CUDA call) a while after the collective timeout.
    """
    if backend != "nccl":
        return {}
    return {
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "2",  # abort the communicator, keep the process
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


def open_store(addr: str, world_size: int, timeout_s: float):
    """Rank 0's rendezvous store, listening on `addr` only, at a port the
    kernel picks as it binds (`store.port`): nothing can take the port between
    choosing it and listening, and the store is not reachable from other
    interfaces (a TCPStore that binds by itself listens on all of them)."""
    import torch.distributed as dist

    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.bind((addr, 0))
        sock.listen(128)
        port = sock.getsockname()[1]
    except OSError:
        sock.close()
        raise
    fd = sock.detach()  # the store owns the socket from here and closes it
    try:
        return dist.TCPStore(
            addr, port, world_size, is_master=True, timeout=timedelta(seconds=timeout_s),
            wait_for_workers=False, master_listen_fd=fd,
        )
    except BaseException:
        os.close(fd)
        raise


def connect_store(rv: Rendezvous):
    """A client of rank 0's store; it retries until `rv.timeout_s`."""
    import torch.distributed as dist

    return dist.TCPStore(
        rv.master_addr, rv.master_port, rv.world_size, is_master=False,
        timeout=timedelta(seconds=rv.timeout_s),
    )


def init_process_group(rv: Rendezvous, store=None) -> str:
    """Form the default process group; returns the backend it chose.

    With `store` (rank 0's from `open_store`, the others' from
    `connect_store`) the ranks meet there; without, at `tcp://` on the
    rendezvous address, as torchrun's environment describes it."""
    import torch
    import torch.distributed as dist

    device = local_device()
    backend = pick_backend(device.type)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    apply_watchdog_env(backend, rv.timeout_s)
    if store is not None:
        await_peers(store, rv)
    meet = (
        {"store": store}
        if store is not None
        else {"init_method": f"tcp://{rv.master_addr}:{rv.master_port}"}
    )
    dist.init_process_group(
        backend=backend,
        rank=rv.rank,
        world_size=rv.world_size,
        timeout=timedelta(seconds=rv.timeout_s),
        device_id=device if device.type == "cuda" else None,
        **meet,
    )
    return backend


def await_peers(store, rv: Rendezvous) -> None:
    """Announce this rank at the store and wait until every rank has, for up
    to `rv.join_timeout_s`: the group is formed only once all are there, so
    the collective timeout is never spent waiting for a slower start."""
    from torch.distributed import DistStoreError

    keys = [f"brigade/arrived/{r}" for r in range(rv.world_size)]
    store.set(keys[rv.rank], "1")
    wait_s = rv.timeout_s if rv.join_timeout_s is None else rv.join_timeout_s
    try:
        store.wait(keys, timedelta(seconds=wait_s))
    except DistStoreError as exc:
        missing = [r for r, key in enumerate(keys) if not store.check([key])]
        raise DistStoreError(f"rank {rv.rank}: ranks {missing} of {rv.world_size} did not reach "
                             f"the rendezvous within {wait_s:g}s") from exc


def init_single_process(timeout_s: float = 30.0) -> str:
    """A world of one in this process, its store on loopback."""
    store = open_store(LOOPBACK, 1, timeout_s)
    rv = Rendezvous(master_addr=LOOPBACK, master_port=store.port, rank=0, world_size=1,
                    timeout_s=timeout_s)
    return init_process_group(rv, store)


def init_from_env(timeout_s: float = 30.0) -> str:
    """torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), or a
    single process when none is set."""
    if not os.environ.get("MASTER_PORT"):
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise RuntimeError("WORLD_SIZE > 1 needs MASTER_ADDR and MASTER_PORT (torchrun sets them)")
        return init_single_process(timeout_s)
    rv = Rendezvous(
        master_addr=os.environ.get("MASTER_ADDR", LOOPBACK),
        master_port=int(os.environ["MASTER_PORT"]),
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


# What a collective raises when a peer of the group died or left it: gloo's
# transport (a closed or reset connection, a read from a peer that is gone, a
# timeout) and NCCL's aborted communicator. A rank that sees one of these lost
# a peer; it did not fail by itself (`is_peer_failure`).
PEER_FAILURE_MARKS = (
    "Connection closed by peer", "Connection reset by peer", "Read error", "Write error",
    "Timed out waiting", "Socket Timeout", "NCCL communicator was aborted",
    "NCCL Error", "ncclRemoteError", "ProcessGroup was aborted",
)


def is_peer_failure(error: BaseException) -> bool:
    """Whether `error`, raised by a collective, says a peer is gone (the
    process group is broken, this rank is not): a rank that keeps its process
    may join a new group (recovery in place)."""
    from torch.distributed import DistError

    if isinstance(error, DistError):  # a backend's, the network's or the store's
        return True
    return isinstance(error, RuntimeError) and any(mark in str(error) for mark in PEER_FAILURE_MARKS)


def abandon_process_group() -> None:
    """Leave the default process group, broken or not: its communicators are
    aborted first where the backend can (NCCL: the same path as gloo's, whose
    sockets close as the group is destroyed), so that the peers still waiting
    in a collective with this rank fail at once rather than at the timeout.
    Safe to call with no group."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    if not dist.is_initialized():
        return
    abort = getattr(c10d, "_abort_process_group", None)
    if abort is not None and dist.get_backend() == "nccl":
        with contextlib.suppress(Exception):  # already torn down by the watchdog
            abort()
    with contextlib.suppress(Exception):  # a broken group may refuse a clean destroy: gone anyway
        dist.destroy_process_group()
