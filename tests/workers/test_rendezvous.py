"""The rendezvous store: listening before its port is handed out, on the
address it was given and no other, and a group forms through it."""

from __future__ import annotations

import errno
import socket
import subprocess
import sys
import textwrap

import pytest

from workers.distributed import LOOPBACK, Rendezvous, connect_store, open_store


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
    script = tmp_path / "rank1.py"
    script.write_text(textwrap.dedent("""
        import sys
        import torch, torch.distributed as dist
        from workers.distributed import Rendezvous, connect_store, init_process_group
        rv = Rendezvous(master_addr="127.0.0.1", master_port=int(sys.argv[1]), rank=1,
                        world_size=2, timeout_s=30)
        init_process_group(rv, connect_store(rv))
        t = torch.tensor([2.0]); dist.all_reduce(t); assert t.item() == 3.0, t
        dist.destroy_process_group()
    """))
    import torch
    import torch.distributed as dist

    from workers.distributed import init_process_group

    store = open_store(LOOPBACK, 2, timeout_s=30)
    peer = subprocess.Popen([sys.executable, str(script), str(store.port)], cwd=".")
    try:
        backend = init_process_group(
            Rendezvous(master_addr=LOOPBACK, master_port=store.port, rank=0, world_size=2,
                       timeout_s=30),
            store,
        )
        t = torch.tensor([1.0])
        dist.all_reduce(t)
        assert (backend, t.item()) == ("gloo", 3.0)
        dist.destroy_process_group()
        assert peer.wait(timeout=60) == 0
    finally:
        if peer.poll() is None:
            peer.kill()
