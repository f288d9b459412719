"""The control plane, assembled: the parts of `service.control` over one
store and one lease, started and stopped together.

    requests   what is asked of a job: submit, cancel, prune, suspend,
               resume, delete (`service.control.requests`)
    views      what is shown: workers, checkpoints, goodput, usage, fair
               shares, the cluster, its queue and nodes, this replica's role
               (`service.control.views`)
    drains     what is asked of a node: a drain (`service.control.drains`)
    storage    where a job's checkpoints, exports and trackers live
               (`service.control.storage`)
    leader     the leader's loop: the scheduling passes, one runner per
               active job, reconcile, the leadership's terms
               (`service.control.leader`)
    sweeps     hyperparameter sweeps, whose trials are jobs (`service.sweeps`)
    exports    Hugging Face exports of jobs' checkpoints (`service.run.exports`)

Several replicas may serve one database: each takes requests and serves
reads, and only the one holding the leader lease (`service.leadership`)
runs the loop, writing through the fenced store, which refuses its writes
once another replica leads. Each state change is counted where the store
writes it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from service.control.drains import NodeDrains
from service.control.leader import LeaderLoop
from service.control.requests import JobRequests
from service.control.storage import JobStorage
from service.control.views import ControlViews
from service.leadership import Leadership
from service.observability.metrics import count_transition
from service.run.exports import ExportService
from service.run.ray_cluster import run_export
from service.settings import Settings
from service.store import JobStore
from service.sweeps.service import SweepService


class Supervisor:
    def __init__(self, settings: Settings, store: JobStore, *,
                 on_stop: Callable[[], None] | None = None):
        """`on_stop`: run last at `stop()` (e.g. stop the local Ray head)."""
        self.settings, self.store, self._on_stop = settings, store, on_stop
        self.replica = settings.resolved_replica_name
        store.replica = self.replica  # named in each event and audit row this process writes
        store.on_transition = count_transition  # before the fenced view copies the store
        self.leadership = Leadership(store.leases, self.replica, settings.lease_s)
        # What the loop, the runners, reconcile and the pruner write through: refused once
        # another replica leads.
        leader_store = store.fenced(self.leadership)
        wake = threading.Event()  # the leader's loop looks again now, not at its next poll
        self.storage = JobStorage(settings)
        self.requests = JobRequests(settings, store, self.storage, leader_store=leader_store,
                                    wake=wake.set)
        self.sweeps = SweepService(store, self.requests, check=self.requests.check_spec,
                                   wake=wake.set, leader_store=leader_store,
                                   stop_now=lambda job_id: self.leader.stop_now(job_id))
        self.exports = ExportService(settings, store, self.storage.checkpoint_target, run_export,
                                     on_done=self.storage.export_done)
        self.leader = LeaderLoop(settings, store, self.leadership, leader_store=leader_store,
                                 storage=self.storage, wake=wake, sweep_pass=self.sweeps.run_pass,
                                 purge_expired=self.requests.purge_expired,
                                 after_run=self.exports.after_run)
        self.drains = NodeDrains(wake=wake.set)
        self.views = ControlViews(store, self.leadership, self.leader, self.storage)

    def start(self) -> None:
        """Serve, and lead when this replica holds the lease."""
        self.leader.start()

    def stop(self) -> None:
        """Stop leading and watching (running groups are left to a successor),
        then `on_stop`."""
        self.leader.stop()
        if self._on_stop is not None:
            self._on_stop()
