"""A leader whose database connections are cut (Postgres behind a TCP proxy
the test controls: every open connection closed, new ones refused) stops
leading within its lease, by itself; another replica, which still reaches
the database, leads once the lease has run out on the database's clock; the
cut-off leader's writes are refused, and when its connections come back it
follows (the lease is the other's), and leads again, in a new term, once the
other stops."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from sqlalchemy.engine import make_url

from service.leadership import Leadership
from service.store import JobStore
from service.store.errors import Deposed
from tests.postgres import fresh_database
from tests.service.store_harness import submit

LEASE_S = 1.5


class CuttableProxy:
    """127.0.0.1:port -> the database's host:port, byte for byte, until `cut()`."""

    def __init__(self, upstream: tuple[str, int]):
        self.upstream = upstream
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._serve(self._listener)

    def _serve(self, listener: socket.socket) -> None:
        def accept() -> None:
            while True:
                try:
                    client, _ = listener.accept()
                except OSError:  # cut: the listener is closed
                    return
                server = socket.create_connection(self.upstream)
                with self._lock:
                    self._sockets += [client, server]
                for a, b in ((client, server), (server, client)):
                    threading.Thread(target=_pump, args=(a, b), daemon=True).start()

        threading.Thread(target=accept, daemon=True).start()

    def cut(self) -> None:
        """Close every connection and refuse new ones (a listener's shutdown
        wakes the thread blocked in its accept: a close alone would not)."""
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def restore(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._serve(self._listener)


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass


def wait_for(condition, timeout_s: float) -> float:
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout_s, "timed out"
        time.sleep(0.02)
    return time.monotonic() - started


def holder_or_none(leadership: Leadership) -> str | None:
    """Who holds the lease, as `leadership`'s own store reads it (None while it
    cannot reach the database)."""
    try:
        return leadership.holder()
    except Exception:
        return None


@pytest.fixture
def database():
    with fresh_database("brigade_cut") as url:
        JobStore(url).migrate()
        yield url


def test_a_leader_cut_off_from_the_database_steps_down_and_another_leads(database):
    direct = make_url(database)
    proxy = CuttableProxy((direct.host or "127.0.0.1", direct.port or 5432))
    cut_off = JobStore(direct.set(host="127.0.0.1", port=proxy.port))
    other = JobStore(database)
    lost: list[str] = []
    gained: list[int] = []
    a = Leadership(cut_off.leases, "a", LEASE_S, on_gained=gained.append,
                   on_lost=lost.append).start()
    b = Leadership(other.leases, "b", LEASE_S).start()
    try:
        wait_for(lambda: a.is_leader, 5)
        job = submit(other)
        leader_writes = cut_off.fenced(a)
        leader_writes.note(job.id, "written by a while it leads")
        assert not b.is_leader
        proxy.cut()
        cut_at = time.monotonic()
        assert wait_for(lambda: not a.is_leader, LEASE_S + 1) <= LEASE_S + 0.5  # by itself
        with pytest.raises(Deposed):
            leader_writes.note(job.id, "a write of a replica that no longer leads")
        wait_for(lambda: b.is_leader, LEASE_S + 5)
        assert time.monotonic() - cut_at <= LEASE_S + 5  # the bound
        assert b.holder() == "b" and lost
        b_token = b.token
        assert b_token is not None and b_token > gained[0]
        proxy.restore()
        # a reaches the database again (its own reads, through the proxy): it finds
        # the lease b's, and follows.
        wait_for(lambda: holder_or_none(a) == "b", 10)
        assert not a.is_leader and b.is_leader and len(gained) == 1
        with pytest.raises(Deposed):
            leader_writes.note(job.id, "a write of the old term after the cut healed")
        assert [e.reason for e in other.events(job.id)][-1] == "written by a while it leads"
        # b stops (giving the lease up): a, reconnected, leads again at its next try, in
        # a new term (gained again, with a token above b's), and its writes are taken.
        b.stop()
        assert wait_for(lambda: a.is_leader and len(gained) == 2, LEASE_S + 2) <= LEASE_S
        assert gained[1] > b_token and a.token == gained[1] and a.holder() == "a", gained
        leader_writes.note(job.id, "written by a in its new term")
        assert [e.reason for e in other.events(job.id)][-2:] == [
            "written by a while it leads", "written by a in its new term"]
    finally:
        a.stop()
        b.stop()
        proxy.cut()
        cut_off.dispose()
        other.dispose()
