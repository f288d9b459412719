"""Wiring the control plane from settings: Ray, the store, the supervisor."""

from __future__ import annotations

from service.run.ray_cluster import LocalRayCluster, connect, disconnect
from service.settings import Settings
from service.store import JobStore
from service.supervisor import Supervisor


def build_supervisor(settings: Settings) -> Supervisor:
    """Join (or start) Ray, migrate the store, reconcile and start supervising.
    `stop()` on the result also stops a local Ray head this data dir owns."""
    local = None
    address = settings.ray_address
    if not address:
        local = LocalRayCluster(settings.data_dir, num_cpus=settings.ray_num_cpus,
                                dashboard=settings.ray_dashboard)
        address = local.ensure()
    connect(address)
    store = JobStore(settings.resolved_database_url)
    store.migrate()
    supervisor = Supervisor(settings, store, on_stop=lambda: _disconnect(store, local))
    supervisor.start()
    return supervisor


def _disconnect(store: JobStore, local: LocalRayCluster | None) -> None:
    store.dispose()
    disconnect()  # leave the cluster before (maybe) stopping the head
    if local is not None:
        local.stop()
