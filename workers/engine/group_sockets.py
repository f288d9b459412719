"""The TCP sockets of this process's gloo groups, found and shut down when a
rank abandons a broken group, so that every peer waiting in a collective with
it wakes at once.

Why: gloo wakes a waiting collective only when the connection it reads ends.
A rank that dies ends its connections with its process; a rank that lives on
(a survivor that saw the failure first and leaves the group) does not, and
destroying the group does not either while anything still holds it (under
tensor parallelism, DTensor specs hold the mesh's groups). So a survivor
waiting on another survivor waited for gloo's timeout (docs/architecture.md
"Recovery in place"). Shutting a connection down (`shutdown(2)`, not
`close(2)`: the descriptor stays gloo's, no number is reused under it) ends
it for the peer as an exit would: its collective raises "Connection closed
by peer" at once, it leaves the group in turn, and so on to the last rank.

Which sockets are gloo's: each group a process joins listens on a port of
its own and connects to each peer, either from its listener (accepted) or to
the peer's listener. So a connection is a group's where its local end is one
of this process's group listeners, or its remote end is one of the peers'.
This process's are the listeners that appeared while it made its groups
(`GroupSockets.making`: joining the default group, building the trainer's
meshes and checkpoint group); its peers' come from an all-gather once the
groups are made (`GroupSockets.learn`). Ray's connections, the rendezvous
store's (opened outside those windows) and the storage's never end at a
group's listener, so they are left alone.

Linux only (/proc/self/fd); NCCL's communicators are aborted instead
(workers/engine/distributed.py `abandon_process_group`).
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass

Address = tuple[str, int]


@dataclass(frozen=True)
class TcpSocket:
    local: Address
    remote: Address | None  # None: a listener, or not connected
    listening: bool


def _tcp_sockets() -> Iterator[tuple[TcpSocket, socket.socket]]:
    """This process's TCP sockets (IPv4 and IPv6), read from /proc/self/fd: each
    with a duplicate of its descriptor, open until the next one is asked for."""
    try:
        fds = [int(fd) for fd in os.listdir("/proc/self/fd")]
    except OSError:  # no /proc: nothing found, nothing shut
        return
    for fd in fds:
        try:
            if not os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                continue
            sock = socket.socket(fileno=os.dup(fd))
        except OSError:  # closed meanwhile
            continue
        with sock:  # closes the duplicate only
            try:
                if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM:
                    continue
                listening = bool(sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))
                local = sock.getsockname()[:2]
                try:
                    remote = None if listening else sock.getpeername()[:2]
                except OSError:
                    remote = None
            except OSError:
                continue
            yield TcpSocket(local, remote, listening), sock


def tcp_sockets() -> list[TcpSocket]:
    """This process's TCP sockets (IPv4 and IPv6)."""
    return [found for found, _ in _tcp_sockets()]


def _matches(address: Address, listeners: set[Address]) -> bool:
    host, port = address
    return any(port == p and (h == host or h in ("0.0.0.0", "::")) for h, p in listeners)


def _listening() -> set[Address]:
    return {s.local for s in tcp_sockets() if s.listening}


class GroupSockets:
    """One rank process's record of its groups' listeners and its peers'."""

    def __init__(self) -> None:
        self._own: set[Address] = set()
        self._peers: set[Address] = set()

    @contextlib.contextmanager
    def making(self) -> Iterator[None]:
        """Around code that makes process groups: the listeners that appear meanwhile are theirs."""
        before = _listening()
        try:
            yield
        finally:
            self._own |= _listening() - before

    def listeners(self) -> list[Address]:
        """The addresses this process's groups listen on (the open ones)."""
        return sorted(self._own & _listening())

    def learn(self, everyone: list[list[Address]]) -> None:
        """Every rank's `listeners()` (an all-gather once the groups are made)."""
        self._peers |= {(host, port) for addresses in everyone for host, port in addresses}

    def shut(self) -> int:
        """Shut down (both ways) every connection of this process's groups;
        how many. The descriptors stay open, their owner's to close."""
        shut = 0
        for found, sock in _tcp_sockets():
            if found.remote is None:
                continue
            if not (_matches(found.local, self._own) or _matches(found.remote, self._peers)):
                continue
            try:
                sock.shutdown(socket.SHUT_RDWR)
                shut += 1
            except OSError:  # already ended
                pass
        return shut
