"""The rendezvous store: listening before its port is handed out, on the
address it was given and no other, and a group forms through it."""

from __future__ import annotations

import errno
import socket
import subprocess
import sys
import textwrap
import time
from dataclasses import replace

import pytest

from workers.engine.distributed import LOOPBACK, Rendezvous, connect_store, open_store


def own_address() -> str | None:
    """The address Ray would give this machine as its node IP, if not loopback."""
    import ray

    addr = ray.util.get_node_ip_address()
    return None if addr.startswith("127.") or ":" in addr else addr


def test_the_port_is_held_from_the_moment_it_is_known():
    store = open_store(LOOPBACK, 2, timeout_s=10)
    with socket.socket() as s, pytest.raises(OSError) as taken:
        s.bind((LOOPBACK, store.port))
    assert taken.value.errno == errno.EADDRINUSE


def test_a_client_meets_rank_0_there():
    store = open_store(LOOPBACK, 2, timeout_s=10)
    client = connect_store(Rendezvous(master_addr=LOOPBACK, master_port=store.port, rank=1,
                                      world_size=2, timeout_s=10))
    client.set("from-rank-1", "hello")
    assert store.get("from-rank-1") == b"hello"


def test_a_loopback_store_is_not_reachable_from_other_interfaces():
    addr = own_address()
    if addr is None:
        pytest.skip("this machine has no non-loopback IPv4 address")
    store = open_store(LOOPBACK, 1, timeout_s=10)
    with socket.socket() as s:
        s.settimeout(5)
        with pytest.raises(ConnectionRefusedError):
            s.connect((addr, store.port))
    with socket.create_connection((LOOPBACK, store.port), timeout=5):
        pass


def test_two_processes_form_a_group_through_the_store(tmp_path):
    """Rank 0 opens the store and hands its port to rank 1 (as the Ray group
    does); an all-reduce over the group they form sums both ranks."""
    assert _form_a_group_with_rank_1(tmp_path, timeout_s=30) == "gloo"


def test_a_peer_slower_to_start_than_the_collective_timeout_still_joins(tmp_path):
    """Rank 1 arrives 4 s after rank 0 (a cold process importing torch beside
    a warm one) under a 1 s collective timeout: the ranks wait for each other
    under the start-up's timeout, and the group forms."""
    assert _form_a_group_with_rank_1(tmp_path, timeout_s=1, join_timeout_s=60, peer_late_s=4) == "gloo"


def test_a_peer_that_never_arrives_is_named_once_the_join_timeout_passes():
    from torch.distributed import DistStoreError

    from workers.engine.distributed import await_peers

    store = open_store(LOOPBACK, 3, timeout_s=30)
    rv = Rendezvous(master_addr=LOOPBACK, master_port=store.port, rank=0, world_size=3,
                    timeout_s=30, join_timeout_s=0.5)
    client = connect_store(replace(rv, rank=2))
    client.set("brigade/arrived/2", "1")  # rank 2 is there; rank 1 never comes
    started = time.monotonic()
    with pytest.raises(DistStoreError, match=r"rank 0: ranks \[1\] of 3 did not reach the rendezvous within 0.5s"):
        await_peers(store, rv)
    assert time.monotonic() - started < 10  # the join timeout, not the store's 30 s


def _form_a_group_with_rank_1(tmp_path, *, timeout_s: float, join_timeout_s: float | None = None,
                              peer_late_s: float = 0.0) -> str:
    """Rank 0 here, rank 1 in a subprocess that starts `peer_late_s` late; an
    all-reduce over the group they form sums both ranks. Returns the backend."""
    script = tmp_path / "rank1.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        import torch, torch.distributed as dist
        from workers.engine.distributed import Rendezvous, connect_store, init_process_group
        time.sleep({peer_late_s})
        rv = Rendezvous(master_addr="127.0.0.1", master_port=int(sys.argv[1]), rank=1,
                        world_size=2, timeout_s={timeout_s}, join_timeout_s={join_timeout_s})
        init_process_group(rv, connect_store(rv))
        t = torch.tensor([2.0]); dist.all_reduce(t); assert t.item() == 3.0, t
        dist.destroy_process_group()
    """))
    import torch
    import torch.distributed as dist

    from workers.engine.distributed import init_process_group

    store = open_store(LOOPBACK, 2, timeout_s=timeout_s)
    peer = subprocess.Popen([sys.executable, str(script), str(store.port)], cwd=".")
    try:
        backend = init_process_group(
            Rendezvous(master_addr=LOOPBACK, master_port=store.port, rank=0, world_size=2,
                       timeout_s=timeout_s, join_timeout_s=join_timeout_s),
            store,
        )
        t = torch.tensor([1.0])
        dist.all_reduce(t)
        assert t.item() == 3.0
        dist.destroy_process_group()
        assert peer.wait(timeout=60) == 0
        return backend
    finally:
        if peer.poll() is None:
            peer.kill()
