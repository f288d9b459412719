"""workers/engine/group_sockets.py on plain processes (no Ray): a rank that
lives on and shuts its groups' connections wakes a peer waiting on it in a
subgroup's collective (what destroying the group does not), keeps its other
connections (a stand-in for Ray's), and every rank forms a new group after."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest
import torch.multiprocessing as mp

WORLD = 3
WAIT_S = 30  # the groups' timeout: the waiting rank must wake long before it


def _rank(rank: int, store_ports: tuple[int, int], side_port: int, out_dir: str) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from workers.engine.group_sockets import GroupSockets

    def note(what: str) -> None:
        with open(os.path.join(out_dir, f"{rank}.log"), "a") as f:
            f.write(what + "\n")

    # A connection of this process that is not a group's (Ray's, in a rank actor).
    side = socket.create_connection(("127.0.0.1", side_port))
    store = dist.TCPStore("127.0.0.1", store_ports[0], WORLD, rank == 0, timeout=timedelta(seconds=WAIT_S))
    sockets = GroupSockets()
    with sockets.making():
        dist.init_process_group("gloo", store=store, rank=rank, world_size=WORLD,
                                timeout=timedelta(seconds=WAIT_S))
        pair = dist.new_group([0, 1], timeout=timedelta(seconds=WAIT_S))  # a mesh's dimension
    everyone: list = [None] * WORLD
    dist.all_gather_object(everyone, sockets.listeners())
    sockets.learn(everyone)
    ones = torch.ones(2)
    dist.all_reduce(ones)
    if rank == 0:  # saw a failure elsewhere: leaves, never entering the pair's collective
        time.sleep(1.0)
        note(f"shut {sockets.shut()}")
    elif rank == 1:  # waits on rank 0, which lives on
        started = time.monotonic()
        try:
            dist.all_reduce(ones, group=pair)
            note("returned")
        except RuntimeError as e:
            note(f"woke {time.monotonic() - started:.2f} {str(e).splitlines()[0]}")
    side.sendall(b"x")  # its other connection still works
    note(f"side {side.recv(1)!r}")
    # a new group of every rank, at a new store
    again = dist.TCPStore("127.0.0.1", store_ports[1], WORLD, rank == 0, timeout=timedelta(seconds=WAIT_S))
    group = dist.ProcessGroupGloo(again, rank, WORLD)
    x = torch.full((1,), float(rank))
    group.allreduce([x]).wait()
    note(f"sum {x.item():g}")
    os._exit(0)  # the broken group's threads are not torn down cleanly


def test_a_rank_that_lives_on_wakes_its_peer_by_shutting_its_groups_connections(tmp_path):
    from workers.engine.distributed import free_port

    echo = socket.create_server(("127.0.0.1", 0))
    echo.listen(WORLD)

    def serve():
        for _ in range(WORLD):
            conn, _ = echo.accept()
            threading.Thread(target=lambda c=conn: c.sendall(c.recv(1)), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    started = time.monotonic()
    mp.start_processes(_rank, args=((free_port(), free_port()), echo.getsockname()[1], str(tmp_path)),
                       nprocs=WORLD, start_method="spawn")
    logs = {r: (tmp_path / f"{r}.log").read_text().splitlines() for r in range(WORLD)}
    shut = int(logs[0][0].split()[1])
    assert shut >= 2, logs  # its connections to ranks 1 and 2, at least
    woke = logs[1][0].split(maxsplit=2)
    assert woke[0] == "woke", logs
    assert float(woke[1]) < 5, logs  # at once, not at the groups' timeout
    assert "closed by peer" in woke[2].lower() or "reset by peer" in woke[2].lower(), logs
    for r in range(WORLD):
        assert f"side {b'x'!r}" in logs[r] and "sum 3" in logs[r], logs
    assert time.monotonic() - started < WAIT_S + 30
