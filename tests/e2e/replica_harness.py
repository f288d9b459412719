"""Several `brigade serve` replicas on one Postgres database and one Ray head,
spoken to over real HTTP: the failover tests' (tests/e2e/test_replicas.py),
the chaos suite's leader kills and the soak's.

    with ray_head() as head, fresh_database() as url:
        replicas = Replicas(tmp_path, head, url, n=2).start()
        leader = replicas.leader()              # the one whose /readyz says "leader"
        replicas.kill(leader)                   # SIGKILL to its process group
        new = replicas.leader(timeout_s=LEASE_S + 5, other_than=leader)

The head is a `ray start --head` on 127.0.0.1 with token auth and a token of
its own (tests/e2e/ray_nodes.py), stopped by its own processes, never `ray
stop`. Each database is made for the test on 127.0.0.1:5432 and dropped after
(`fresh_database`, tests/postgres.py).
Each replica has its own data dir and port and a process group of its own; all
share the secret, the admin key, the checkpoint storage and the data root, as
replicas of one deployment do.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text

from tests.e2e.ray_nodes import RayNodes
from tests.e2e.serve_harness import Server

# BRIGADE_LEASE_S of every replica here: short, since a killed leader's lease must run out
# before another leads (the kills' scenarios are timed on it: a job mid-save must outlast the
# failover; 6 s was too long for that under load). A leader keeps its term only while a
# renewal gets through within 2 s, which a loaded machine can miss: a test that needs no
# lease to run out runs with the deployment's (test_replicas.py DEPLOYED_LEASE_S).
LEASE_S = 3.0
FAILOVER_S = LEASE_S + 5  # the bound: another replica leads within this of the leader's loss
REPLICA_ENV = {
    "BRIGADE_LEASE_S": str(LEASE_S),
    "BRIGADE_POLL_INTERVAL_S": "0.2",
    "BRIGADE_RESTART_BACKOFF_S": "1.0",
    "BRIGADE_PG_TIMEOUT_S": "10",
    "BRIGADE_EXPORT_ON_SUCCESS": "",
}


@contextlib.contextmanager
def ray_head(num_cpus: int = 4, dashboard: bool = False) -> Iterator[RayNodes]:
    """A Ray head of the test's own; `.address` to join it, `.token` its auth token."""
    nodes = RayNodes()
    try:
        nodes.start_head(num_cpus=num_cpus, dashboard=dashboard)
        yield nodes
    finally:
        nodes.stop()
    left = nodes.leftovers(within_s=30)
    assert left == [], f"Ray processes outlived the head: {left}"


def query(url: str, sql: str, **params) -> list[tuple]:
    """Rows of one SELECT on the database (what the replicas wrote, read directly)."""
    engine = create_engine(url)
    try:
        with engine.connect() as db:
            return [tuple(row) for row in db.execute(text(sql), params)]
    finally:
        engine.dispose()


def written_by_since(database_url: str, replica: str, since: datetime) -> list[tuple]:
    """(table, id, time) of the job events and audit rows `replica` wrote after `since`."""
    found = []
    for table in ("job_events", "audit_events"):
        rows = query(database_url, f"SELECT id, time FROM {table} WHERE replica = :r", r=replica)
        found += [(table, row_id, at) for row_id, at in rows if utc(at) > since]
    return found


def utc(at: datetime) -> datetime:
    """A time read from the database, made aware (a naive one is UTC)."""
    return at if at.tzinfo else at.replace(tzinfo=UTC)


class Replica(Server):
    """One `brigade serve` of the deployment: `name` is its BRIGADE_REPLICA_NAME."""

    def __init__(self, name: str, data_dir: Path, ray_address: str, env: dict[str, str]):
        super().__init__(data_dir, ray_address=ray_address, env={**env, "BRIGADE_REPLICA_NAME": name},
                         own_group=True)
        self.name = name
        self.paused = False

    def readyz(self) -> dict:
        """What /readyz says (role, leader, replica), {} while it does not answer.
        It asks the database twice and Ray's GCS once: on a loaded machine that can
        take seconds, and a test that reads a field of the answer must get one."""
        try:
            r = self.http.get("/readyz", timeout=10)  # its client: a new one costs ~20 ms of CPU
        except httpx.HTTPError:
            return {}
        return r.json() if r.status_code == 200 else {}

    def role(self) -> str | None:
        return self.readyz().get("role")

    def running(self) -> bool:
        """Its process lives (stopped by SIGSTOP or not)."""
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        """`sig` to the replica's whole process group."""
        os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL to its process group: the host lost, nothing said on the way out."""
        self.signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def pause(self) -> None:
        """SIGSTOP: frozen, holding its connections, until `wake`."""
        self.signal(signal.SIGSTOP)
        self.paused = True

    def wake(self) -> None:
        self.signal(signal.SIGCONT)
        self.paused = False

    def stop(self) -> None:
        if self.running():
            with contextlib.suppress(ProcessLookupError):
                self.wake()  # a stopped process would not act on SIGTERM until then
        super().stop()
        with contextlib.suppress(ProcessLookupError, TypeError, AttributeError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # whatever it started and left


class Replicas:
    """N replicas of one deployment (r0, r1, ...), on one database and one Ray head."""

    def __init__(self, root: Path, head: RayNodes, database_url: str, n: int = 2,
                 env: dict[str, str] | None = None):
        self.root = root
        self.head = head
        self.database_url = database_url
        self.env = {
            **REPLICA_ENV,
            "BRIGADE_DATABASE_URL": database_url,
            "BRIGADE_STORAGE_URI": f"file://{root / 'storage'}",
            "BRIGADE_DATA_URI_ROOT": f"file://{root / 'data-store'}",
            "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": head.token,
            **(env or {}),
        }
        self.replicas = [self.make(f"r{i}") for i in range(n)]

    def make(self, name: str) -> Replica:
        data_dir = self.root / name
        data_dir.mkdir(parents=True, exist_ok=True)
        return Replica(name, data_dir, self.head.address, self.env)

    def __iter__(self):
        return iter(self.replicas)

    def __getitem__(self, i: int) -> Replica:
        return self.replicas[i]

    def start(self) -> Replicas:
        """Start every replica at the same instant (they race for the migrations
        and the lease, as a deployment's pods do) and wait for each to answer."""
        errors: list[BaseException] = []

        def start(replica: Replica) -> None:
            try:
                replica.start()
            except BaseException as error:  # noqa: BLE001 - reported below
                errors.append(error)

        threads = [threading.Thread(target=start, args=(r,)) for r in self.replicas]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return self

    def stop(self) -> None:
        for replica in self.replicas:
            replica.stop()

    def restore(self) -> None:
        """Every replica running again (a paused one woken, a lost one started):
        what a scenario cut short by a failure left, so that the next finds
        the whole deployment."""
        for replica in self.replicas:
            if replica.running() and replica.paused:
                replica.wake()
            elif not replica.running():
                replica.start()

    def alive(self) -> list[Replica]:
        """The replicas that run and are not paused."""
        return [r for r in self.replicas if r.running() and not r.paused]

    def leader(self, timeout_s: float = 30, other_than: Replica | None = None) -> Replica:
        """The one replica that says it leads, once exactly one does (and it is
        not `other_than`); fails after `timeout_s` naming what each said."""
        deadline = time.monotonic() + timeout_s
        while True:
            said = {r.name: r.readyz() for r in self.alive()}
            leading = [r for r in self.alive() if said[r.name].get("role") == "leader"]
            if len(leading) == 1 and leading[0] is not other_than:
                return leading[0]
            assert time.monotonic() < deadline, f"no single new leader in {timeout_s:g} s: {said}"
            time.sleep(0.1)

    def followers(self, leader: Replica) -> list[Replica]:
        return [r for r in self.alive() if r is not leader]

    def log_tails(self, chars: int = 2000) -> str:
        return "\n".join(r.log_tail(chars) for r in self.replicas)
