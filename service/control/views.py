"""What the control plane shows: a job's workers, checkpoints and goodput,
the tenants' usage, what they spent of their budgets and fair shares, the cluster and its queue (with each
queued job's waiting reason and expected start), its nodes with the ranks on
each, this replica's role, and whether Ray can be used. Reads only: nothing here changes a job.

Most come from the store, so every replica answers alike. What the leader
keeps in memory has a follower's answer: a waiting reason is the leader's
alone (none on a follower); an expected start is each replica's own
forecast (its loop keeps it fresh); a job's workers are its runner's group
on the leader, and asked of the group's ranks by name on a follower.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from service.control.leader import LeaderLoop
from service.control.reach import reachable_job
from service.control.storage import JobStorage
from service.leadership import Leadership
from service.observability.fair_share_view import TenantShare, tenant_shares
from service.observability.flavor_view import FlavorUse, flavor_use
from service.observability.goodput import Goodput, job_goodput
from service.observability.usage import TenantUsage, phase_rows, usage_by_tenant
from service.run.budget_gate import period_costs
from service.run.launch import group_name
from service.run.ray_cluster import (
    cluster_capacity,
    flavor_capacities,
    group_workers,
    live_node_labels,
    node_flavors,
    ray_unready,
)
from service.scheduling import Demand, Resources, RunningJob
from service.scheduling.budget import next_period_start, period_start
from service.states import ACTIVE
from service.states import JobState as S
from service.store import JobRecord, JobStore
from service.store.models import utcnow
from service.store.tenants import ADMIN_TENANT, tenant_policy
from workers.cluster.nodes import NodeView, cluster_nodes

logger = logging.getLogger(__name__)


class ControlViews:
    def __init__(self, store: JobStore, leadership: Leadership, leader: LeaderLoop,
                 storage: JobStorage):
        self.store, self.leadership, self.leader, self.storage = store, leadership, leader, storage

    # -- a job ----------------------------------------------------------------------

    def workers(self, tenant: str, job_id: str) -> list[dict]:
        """Where the job's ranks run: {"rank", "node" (its address), "node_id"
        (Ray's), "pid", "state"} each."""
        return self._placed(reachable_job(self.store, tenant, job_id))

    def _placed(self, job: JobRecord) -> list[dict]:
        """The job's ranks where they run (see `workers`): its runner's group on
        the leader; asked of the group's ranks by name on a follower."""
        group = self.leader.group_of(job.id)
        if group is None:
            if self.leadership.is_leader or job.state not in ACTIVE or not job.workers:
                return []
            # A follower runs no runners: it asks the group's ranks where they are.
            return group_workers(group_name(job.id, job.attempt), job.workers,
                                 pool_prefix=self.leader.rank_pool.name_prefix)
        return [
            {"rank": rank, "node": info.node_ip, "node_id": info.node_id, "pid": info.pid,
             "state": "running"}
            for rank, info in enumerate(group.node_infos)
        ]

    def checkpoints(self, tenant: str, job_id: str) -> list[dict]:
        """The job's committed checkpoints, oldest first."""
        job = reachable_job(self.store, tenant, job_id)
        return [
            {"step": c.step, "world_size": c.world_size, "bytes": c.bytes,
             "created_at": c.created_at, "uri": c.uri}
            for c in self.storage.checkpoint_store(job).list_committed()
        ]

    def goodput(self, tenant: str, job_id: str) -> Goodput:
        """Where the job's time since submit went, from what the store keeps
        (the same answer after a restart of the control plane)."""
        job = reachable_job(self.store, tenant, job_id)
        return job_goodput(job, self.store.events(job_id), self.store.metrics(job_id), utcnow())

    def waiting_reason(self, job_id: str) -> str | None:
        """Why a queued job did not start at the latest scheduling pass (this
        replica's: a follower's last pass was as a leader, if ever)."""
        if not self.leadership.is_leader:
            return None
        return self.leader.scheduling.waiting.get(job_id)

    def expected_start(self, job_id: str, *, made: bool = False) -> tuple[datetime | None, str | None]:
        """(when the queued job is expected to start, why none is given);
        (None, None) for a job not queued. `made`: from the forecast the loop
        made last, reading nothing (a route on the event loop)."""
        try:
            forecast = self.leader.forecasts.of(job_id, made=made)
        except Exception as e:  # a forecast that fails must not fail the job's read
            logger.exception("the start forecast failed")
            return None, f"the forecast failed: {e}"
        if forecast is None:
            return None, None
        if forecast.expected_start is None:
            return None, forecast.reason
        return datetime.fromtimestamp(forecast.expected_start, UTC), None

    # -- the tenants and the cluster ---------------------------------------------------

    def usage(self, tenant: str | None, window_s: float) -> tuple[datetime, datetime, list[TenantUsage]]:
        """(since, until, each tenant's usage) over the last `window_s` seconds
        (tenant None: every tenant's, those that used nothing too)."""
        now = utcnow()
        since = now - timedelta(seconds=window_s)
        jobs = [j for j in self.store.jobs_changed_since(since, ACTIVE)
                if tenant is None or j.tenant == tenant]
        events = self.store.events_of(j.id for j in jobs)
        rows = {j.id: phase_rows(self.store, j) for j in jobs}
        names = [tenant] if tenant else [t.name for t in self.store.tenants.list()]
        return since, now, list(usage_by_tenant(jobs, events, since, now, tenants=names, rows=rows,
                                                prices=self.store.flavors.price_history()).values())

    def budget_spent(self, tenant: str) -> tuple[float, datetime] | None:
        """(what the tenant's jobs cost in its budget's current period, when
        the next period begins), or None: it has no budget. From the store:
        every replica answers alike."""
        record = self.store.tenants.by_name(tenant)
        budget = None if record is None else tenant_policy(record).budget
        if budget is None:
            return None
        now = utcnow()
        spent = period_costs(self.store, {tenant: period_start(budget.period, now)}, now)[tenant]
        return spent, next_period_start(budget.period, now)

    def fair_shares(self) -> list[TenantShare]:
        """Each tenant's weight, entitled share, what it holds now and its
        quota use (`service.observability.fair_share_view`), as of the latest pass."""
        scheduling = self.leader.scheduling
        active = self.store.jobs_in_states(ACTIVE)
        return tenant_shares(
            self.store.tenants.list(), active, self.store.jobs_in_states([S.QUEUED]),
            {job.id: scheduling.held([job]) for job in active},
            Resources(**cluster_capacity()), scheduling.service,
        )

    def cluster_status(self) -> dict:
        """The cluster's capacity, what the active jobs hold, and the queue."""
        capacity = cluster_capacity()
        active = self.store.jobs_in_states(ACTIVE)
        queued = self.store.jobs_in_states([S.QUEUED])
        return {
            "capacity": capacity,
            "usage": dict(self.leader.scheduling.held(active).items()),
            "running_jobs": len(active),
            "queue": [{"id": j.id, "name": j.name, "tenant": j.tenant, "priority": j.priority,
                       "waiting": self.waiting_reason(j.id),
                       "expected_start": self.expected_start(j.id)} for j in queued],
        }

    def flavor_use(self) -> list[FlavorUse]:
        """Each flavor's nodes, capacity and what the active jobs hold of it
        (`service.observability.flavor_view`): a job of the flavor its
        workers, a job of none the ranks it has there (where its runner's
        group has them on the leader, asked of its ranks on a follower)."""
        flavors = {flavor.name: flavor.labels for flavor in self.store.flavors.list()}
        if not flavors:
            return []
        where = node_flavors(flavors)
        running = []
        for job in self.store.jobs_in_states(ACTIVE):
            res = job.spec.resources_per_worker
            on_flavors: dict[str, int] = {}
            if res.flavor is None and where:
                for placed in self._placed(job):
                    if (flavor := where.get(placed["node_id"])) is not None:
                        on_flavors[flavor] = on_flavors.get(flavor, 0) + 1
            running.append(RunningJob(job.id, job.tenant, job.workers or 0,
                                      Demand(job.priority, (), Resources(res.cpu, res.gpu),
                                             res.flavor), on_flavors=on_flavors))
        return flavor_use(flavor_capacities(flavors), running)

    def nodes(self, tenant: str) -> list[tuple[NodeView, list[dict]]]:
        """The cluster's nodes as Ray's GCS has them (draining ones with their
        deadline and reason, the dead ones too), each with the ranks of active
        jobs on it ({"job", "rank"}): every job's for the admin, the tenant's
        own for a tenant (another tenant's jobs are not shown, its nodes are);
        each node with its flavor (the one whose labels it has: `NodeView.flavor`)."""
        flavors = {flavor.name: flavor.labels for flavor in self.store.flavors.list()}
        jobs = [j for j in self.store.jobs_in_states(ACTIVE)
                if tenant in (ADMIN_TENANT, j.tenant)]
        ranks: dict[str, list[dict]] = {}
        for job in sorted(jobs, key=lambda j: j.created_at):
            for placed in self._placed(job):
                ranks.setdefault(placed["node_id"], []).append({"job": job.id,
                                                               "rank": placed["rank"]})
        return [(node.with_flavor(flavors), ranks.get(node.node_id, []))
                for node in cluster_nodes()]

    def live_node_labels(self) -> dict[str, dict[str, str]]:
        """The live nodes' labels, by a name that says which node (what a
        flavor put is checked against: `FlavorStore.put`)."""
        return live_node_labels()

    # -- this replica -----------------------------------------------------------------

    def role(self) -> dict:
        """This replica's part: {"role": "leader" | "follower", "leader": the
        lease's holder (None: no one now), "replica": this one's name}."""
        leading = self.leadership.is_leader
        try:
            holder = self.leadership.holder()
        except Exception:  # the database is out of reach: what this replica knows
            holder = self.leadership.replica if leading else None
        return {"role": "leader" if leading else "follower", "leader": holder,
                "replica": self.leadership.replica}

    def ray_unready(self) -> str | None:
        """Why the control plane cannot use Ray now, or None (`GET /readyz`)."""
        return ray_unready()
