"""Wiring the control plane from settings: Ray, the store, the supervisor."""

from __future__ import annotations

import fcntl
import os
from typing import IO

from sqlalchemy.engine import make_url

from service.run.ray_cluster import LocalRayCluster, connect, disconnect
from service.settings import Settings
from service.store import JobStore
from service.supervisor import Supervisor


class ReplicaRefused(RuntimeError):
    """This replica may not start beside another (a SQLite store serves one)."""


def build_supervisor(settings: Settings) -> Supervisor:
    """Join (or start) Ray, migrate the store, reconcile and start supervising.
    `stop()` on the result also stops a local Ray head this data dir owns.
    On SQLite, `ReplicaRefused` while another process serves the same file."""
    lock = sqlite_lock(settings.resolved_database_url)
    try:
        local = None
        address = settings.ray_address
        if not address:
            local = LocalRayCluster(settings.data_dir, num_cpus=settings.ray_num_cpus,
                                    dashboard=settings.ray_dashboard)
            address = local.ensure()
        connect(address)
        store = JobStore(settings.resolved_database_url)
        store.flavors.default_price = settings.default_price_per_worker_hour
        store.migrate()  # once, under a database lock (replicas starting together take turns)
        supervisor = Supervisor(settings, store, on_stop=lambda: _disconnect(store, local, lock))
    except BaseException:
        if lock is not None:
            lock.close()
        raise
    supervisor.start()
    return supervisor


def sqlite_lock(database_url: str) -> IO | None:
    """On SQLite, an exclusive lock on a file beside the database, held for
    the process's life (closing the file releases it; so does the process's
    end, however it ends): the lease that lets replicas share Postgres
    cannot fence a second process on one SQLite file. None elsewhere."""
    url = make_url(database_url)
    if url.get_backend_name() != "sqlite" or not url.database:
        return None
    path = f"{os.path.abspath(url.database)}.lock"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    held = open(path, "a+")  # noqa: SIM115 - held open for the process's life
    try:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        held.close()
        raise ReplicaRefused(
            f"another brigade serve already runs on the SQLite database {url.database} (it holds "
            f"{path}): SQLite serves one replica only; to run several, give them one Postgres "
            "database (BRIGADE_DATABASE_URL)") from None
    return held


def _disconnect(store: JobStore, local: LocalRayCluster | None, lock: IO | None) -> None:
    store.dispose()
    disconnect()  # leave the cluster before (maybe) stopping the head
    if local is not None:
        local.stop()
    if lock is not None:
        lock.close()
