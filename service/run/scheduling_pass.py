"""The scheduling pass (`SchedulingPass`): admission and preemption as the
leader's loop carries them out. It reads the queue, the active jobs, the
tenants and the cluster into the scheduling views, asks the policies
(`service.scheduling`), and acts on what they decide: it starts the jobs
admitted (QUEUED -> STARTING at the size chosen) and marks the victims of a
preemption PREEMPTING, saying who preempted them and why.
Queued jobs that wait on jobs are held back first, or failed where one
failed (`service.run.dependency_gate`), then those of a tenant whose budget
for the period is spent (`service.run.budget_gate`).

The pass reads the time from its `clock` (epoch seconds; `time.time` unless
a test hands it its own): what a budget's period is, and the fair share's now.

It also keeps each tenant's recent service for weighted fair share
(`service.scheduling.service_history`), rebuilt from the job events when it starts, so
that a control-plane restart does not forget who has had what.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence, Set
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from service.run.budget_gate import BudgetGate
from service.run.dependency_gate import DependencyGate
from service.run.ray_cluster import (
    cluster_capacity,
    draining_nodes,
    flavor_capacities,
    lost_nodes,
    node_flavors,
)
from service.scheduling import (
    Capacity,
    Demand,
    PreemptionPolicy,
    QueuedJob,
    Resources,
    RunningJob,
    Scheduler,
    TenantPolicy,
)
from service.scheduling.service_history import ServiceHistory, spans_holding_workers
from service.scheduling.views import capacity_now
from service.settings import Settings
from service.states import ACTIVE, LEAVING, IllegalTransition
from service.states import JobState as S
from service.store import JobRecord, JobStore
from service.store.tenants import tenant_policy

if TYPE_CHECKING:
    from checkpoints import CheckpointStore

logger = logging.getLogger(__name__)


class SchedulingPass:
    """One pass at a time, from the leader's loop (never concurrently)."""

    def __init__(self, settings: Settings, store: JobStore, *,
                 checkpoints_of: Callable[[JobRecord], CheckpointStore] | None = None,
                 clock: Callable[[], float] = time.time,
                 placed_on: Callable[[str], Sequence[str]] | None = None):
        self.settings, self.store, self.clock = settings, store, clock
        # where a job's ranks run (job id -> each rank's node id; none: not known here): a
        # job of no flavor with ranks on a flavor's nodes holds that flavor's capacity
        self.placed_on = placed_on
        # queued jobs that wait on jobs (`after`, `init.job`): held back, or failed
        self.dependencies = DependencyGate(store, checkpoints_of)
        # queued jobs of a tenant whose budget for the period is spent: held back
        self.budget = BudgetGate(store)
        self.scheduler = Scheduler(horizon_s=settings.fair_share_horizon_s)
        self.preemption = PreemptionPolicy()
        self.history = ServiceHistory(settings.fair_share_window_s)
        # the same on each flavor's nodes, of its jobs: fair share among that flavor's jobs
        self.flavor_history: dict[str, ServiceHistory] = {}
        self._history_lock = threading.Lock()  # the pass changes it; a forecast copies it
        self.waiting: dict[str, str] = {}  # queued job id -> why it waits (the last pass)
        self.service: dict[str, float] = {}  # tenant -> its fair-share service (the last pass)
        # Per job, worked out once: what it asks for (its valid world sizes).
        self._parsed: dict[str, Demand] = {}
        self._parsed_lock = threading.Lock()
        self._restore_history()

    def _restore_history(self) -> None:
        """What the jobs held within the fair-share window, from their events.
        A job is taken to have held its latest size (or its smallest, when it
        holds none now) throughout: the events do not record sizes."""
        now = self.clock()
        since = datetime.fromtimestamp(now - self.settings.fair_share_window_s, UTC)
        jobs = self.store.jobs_changed_since(since, ACTIVE)
        events = self.store.events_of(job.id for job in jobs)
        for job in jobs:
            spans = spans_holding_workers(events.get(job.id, []), ACTIVE)
            if not spans:
                continue
            demand = Demand.from_spec(job.spec, (job.workers,) if job.workers else None)
            held = demand.at(min(demand.world_sizes, default=1))
            for started, ended in spans:
                self.history.restore(job.id, job.tenant, held, started, ended, now)
                if demand.flavor is not None:
                    self._history_of(demand.flavor).restore(job.id, job.tenant, held, started,
                                                            ended, now)

    def _history_of(self, flavor: str) -> ServiceHistory:
        if flavor not in self.flavor_history:
            self.flavor_history[flavor] = ServiceHistory(self.settings.fair_share_window_s)
        return self.flavor_history[flavor]

    def flavor_totals(self, exclude: Set[str] = frozenset()) -> dict[str, Resources]:
        """Each flavor's capacity: what its live, not draining nodes hold."""
        return self._flavor_capacities(exclude)[0]

    def _flavor_capacities(self, exclude: Set[str] = frozenset(),
                           flavors: Mapping[str, Mapping[str, str]] | None = None) -> tuple[
            dict[str, Resources], dict[str, Resources]]:
        """Each flavor's capacity, and what Ray has free of it now."""
        if flavors is None:
            flavors = self._flavors()
        amounts = flavor_capacities(flavors, set(exclude))
        totals = {name: Resources(a["cpu"], a["gpu"]) for name, a in amounts.items()}
        free = {name: Resources(a["free_cpu"], a["free_gpu"]) for name, a in amounts.items()
                if "free_cpu" in a}
        return totals, free

    def run_pass(self) -> list[JobRecord]:
        """Decide and act once; the jobs moved to STARTING, for the caller
        to launch."""
        now = self.clock()
        drains = draining_nodes()
        total = Resources(**cluster_capacity())  # less the draining nodes: nothing new goes there
        active = self.store.jobs_in_states(ACTIVE)
        queued_records = self.store.jobs_in_states([S.QUEUED])
        tenants = self._tenants(active + queued_records)
        ready, held_back = self.dependencies.hold(queued_records)
        ready, over_budget = self.budget.hold(ready, tenants, datetime.fromtimestamp(now, UTC))
        held_back = {**held_back, **over_budget}
        flavors = self._flavors()
        where = self._node_flavors(flavors, active)
        running = [self._running(job, where) for job in active]
        flavor_totals, flavor_free = self._flavor_capacities(flavors=flavors)
        capacity = capacity_now(total, running, flavor_totals, flavor_free)
        with self._history_lock:
            self.history.observe({job.id: (job.tenant, job.holds) for job in running}, now)
            for flavor in set(flavor_totals) | set(self.flavor_history):
                self._history_of(flavor).observe({job.id: (job.tenant, job.holds)
                                                  for job in running
                                                  if job.demand.flavor == flavor}, now)
        queued = {job.id: self._queued(job) for job in ready}
        expected = self.history.typical_run_s(self.settings.fair_share_horizon_s)
        self.scheduler.horizon_s = expected
        owed = self.history.owed(total, now, expected)
        owed_by_flavor = {flavor: history.owed(flavor_totals.get(flavor, Resources()), now,
                                               expected)
                          for flavor, history in self.flavor_history.items()}
        decision = self.scheduler.admit(list(queued.values()), running, tenants, capacity, owed,
                                        owed_by_flavor)
        self.waiting = {**decision.waiting, **held_back}
        if drains:  # a wait for capacity that a draining node would have met says so
            draining = ", ".join(f"node {drain.address} ({node_id[:12]})"
                                 for node_id, drain in sorted(drains.items()))
            self.waiting.update({job_id: f"{draining} draining: no capacity elsewhere; {why}"
                                 for job_id, why in decision.waiting.items()
                                 if why.startswith("capacity:")})
        self.service = dict(owed)
        records = {job.id: job for job in active + queued_records}
        started = self._start(decision.start, records)
        just_started = [self._running(job) for job in started]
        self._preempt(decision.needs_room, queued, running + just_started, records,
                      decision.capacity_after(capacity), tenants)
        self._forget({job.id for job in active + queued_records})
        return started

    def restart_size(self, job: JobRecord, nodes: Set[str] = frozenset()) -> int | None:
        """The world size a job that lost its workers restarts at: the
        largest of its valid sizes, no larger than it ran at, that fits what
        the cluster has now beside the other active jobs (a lost node shrinks
        an elastic job); None: none fits, it must wait in the queue. `nodes`:
        where its ranks ran; those that are gone are left out. A job of a
        flavor fits its flavor's nodes too."""
        lost = lost_nodes(set(nodes))
        total = Resources(**cluster_capacity(exclude=lost))
        others = [self._running(j) for j in self.store.jobs_in_states(ACTIVE) if j.id != job.id]
        demand = self._demand(job)
        flavor_totals = self.flavor_totals(lost) if demand.flavor is not None else {}
        free = capacity_now(total, others, flavor_totals).of(demand.flavor).free
        free = free.least(total - Resources.total(j.holds for j in others))
        for workers in reversed(demand.world_sizes):
            if workers <= (job.workers or demand.max_workers) and demand.at(workers).fits_in(free):
                return workers
        return None

    def views(self, active: list[JobRecord], queued: list[JobRecord]) -> tuple[
            list[RunningJob], list[QueuedJob], dict[str, TenantPolicy]]:
        """The jobs and tenants as a pass reads them (for a forecast of the passes to come)."""
        return ([self._running(job) for job in active], [self._queued(job) for job in queued],
                self._tenants(active + queued))

    def history_copy(self) -> ServiceHistory:
        """The fair-share history as of the latest pass, copied."""
        with self._history_lock:
            return copy.deepcopy(self.history)

    def flavor_history_copy(self) -> dict[str, ServiceHistory]:
        """The fair-share history per flavor as of the latest pass, copied."""
        with self._history_lock:
            return copy.deepcopy(self.flavor_history)

    def held(self, jobs: list[JobRecord]) -> Resources:
        """What these jobs' workers hold."""
        return Resources.total(self._running(job).holds for job in jobs)

    # -- acting ---------------------------------------------------------------

    def _start(self, admitted: list[tuple[str, int]],
               records: dict[str, JobRecord]) -> list[JobRecord]:
        """QUEUED -> STARTING at the size decided (a job cancelled since the
        pass read it fails the transition's `expect` and is passed over)."""
        started = []
        for job_id, workers in admitted:
            job = records[job_id]
            sizes = self._demand(job, job.requested_workers).world_sizes
            how = (f"admitted at {workers} workers" if len(sizes) == 1 else
                   f"admitted at {workers} workers (elastic: {sizes[0]}..{sizes[-1]}, "
                   f"the largest that fits)")
            if job.latest_checkpoint:
                ckpt = job.latest_checkpoint
                how += (f"; resumes from checkpoint step {ckpt['step']} saved at world "
                        f"size {ckpt['world_size']}")
            try:
                started.append(self.store.transition(
                    job_id, S.STARTING, expect=S.QUEUED, workers=workers,
                    requested_workers=None, attempt=job.attempt + 1, reason=how))
            except IllegalTransition:
                continue
        return started

    def _preempt(self, needs_room: list[str], queued: dict[str, QueuedJob],
                 running: list[RunningJob], records: dict[str, JobRecord], capacity: Capacity,
                 tenants: dict[str, TenantPolicy]) -> None:
        """Offer each waiting job that preemption may help, in order; preempt
        the first non-empty set of victims the policy picks."""
        by_id = {job.id: job for job in running}
        for pending_id in needs_room:
            pending = queued[pending_id]
            decision = self.preemption.select_victims(pending, running, capacity, tenants)
            if not decision.victims:
                continue
            for victim_id in decision.victims:
                self._mark_preempting(records[victim_id], pending, by_id[victim_id],
                                      decision.reason)
            return

    def _mark_preempting(self, job: JobRecord, pending: QueuedJob, victim: RunningJob,
                         why: str) -> None:
        """Ask the victim to give its workers back; a job that moved on since
        the pass read it (ended, cancelled) fails the `expect` and is left be."""
        grace = self.grace_s(job)
        reason = (f"preempted by job {pending.id} of tenant {pending.tenant} "
                  f"(priority {pending.demand.priority} over {victim.demand.priority}): "
                  f"checkpoint and stop within {grace:g} s, then requeue. {why}")
        try:
            self.store.transition(job.id, S.PREEMPTING, expect=job.state, reason=reason,
                                  preemptions=job.preemptions + 1)
        except IllegalTransition as e:
            logger.info("job %s not preempted: %s", job.id, e)

    # -- views ------------------------------------------------------------------

    def _parse(self, job: JobRecord) -> Demand:
        with self._parsed_lock:  # runners ask `restart_size` from their own threads
            demand = self._parsed.get(job.id)
            if demand is None:
                demand = Demand.from_spec(job.spec)
                demand = demand.sized(demand.world_sizes, job.priority)
                self._parsed[job.id] = demand
            return demand

    def _demand(self, job: JobRecord, requested: int | None = None) -> Demand:
        """What the job asks for; at `requested` workers alone where a resume named them."""
        demand = self._parse(job)
        if requested:
            demand = demand.sized((requested,))
        return demand

    def grace_s(self, job: JobRecord) -> float:
        """How long the job may take to checkpoint and stop once preempted."""
        return job.spec.preemption_grace_s or self.settings.preemption_grace_s

    def _queued(self, job: JobRecord) -> QueuedJob:
        return QueuedJob(job.id, job.tenant, job.created_at,
                         self._demand(job, job.requested_workers))

    def _flavors(self) -> dict[str, dict[str, str]]:
        return {flavor.name: flavor.labels for flavor in self.store.flavors.list()}

    def _node_flavors(self, flavors: Mapping[str, Mapping[str, str]],
                      active: list[JobRecord]) -> dict[str, str]:
        """Each live node's flavor, by id; asked of the cluster only where some
        active job of no flavor has ranks that could be on one."""
        if self.placed_on is None or not flavors or all(
                self._demand(job).flavor is not None for job in active):
            return {}
        return node_flavors(flavors)

    def _running(self, job: JobRecord, node_flavors: Mapping[str, str] | None = None) -> RunningJob:
        """The job as the policies read it; a job of no flavor with how many
        of its ranks run on each flavor's nodes (by `node_flavors`: node id ->
        flavor; where its ranks run: `placed_on`)."""
        checkpoint = (job.latest_checkpoint or {}).get("step", 0)
        demand = self._demand(job)
        on_flavors: dict[str, int] = {}
        if node_flavors and demand.flavor is None and self.placed_on is not None:
            for node_id in self.placed_on(job.id):
                if (flavor := node_flavors.get(node_id)) is not None:
                    on_flavors[flavor] = on_flavors.get(flavor, 0) + 1
        return RunningJob(
            job.id, job.tenant, job.workers or 0, demand,
            steps_since_checkpoint=max(0, job.step - checkpoint),
            leaving=job.state in LEAVING, on_flavors=on_flavors,
        )

    def _tenants(self, jobs: list[JobRecord]) -> dict[str, TenantPolicy]:
        """Every tenant with a row; a job's tenant without one (the admin) is
        unlimited at weight 1."""
        policies = {t.name: tenant_policy(t) for t in self.store.tenants.list()}
        for job in jobs:
            policies.setdefault(job.tenant, TenantPolicy(job.tenant))
        return policies

    def _forget(self, live: set[str]) -> None:
        with self._parsed_lock:
            for job_id in set(self._parsed) - live:
                del self._parsed[job_id]
