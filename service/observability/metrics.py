"""The control plane's Prometheus metrics (prometheus_client, its naming
conventions: base units, `_total` counters, `_seconds` durations).

Counted where things happen, for the life of the process:

    brigade_job_restarts_total{tenant}           a job restarting after a failure
    brigade_job_preemptions_total{tenant}        a job preempted (by a higher priority, or SIGTERM)
    brigade_job_prunes_total{tenant}             a sweep's trial stopped early by its pruner (PRUNED)
    brigade_scheduling_pass_duration_seconds     one scheduling pass
    brigade_job_recovery_duration_seconds{kind}  from a failure (or notice) to the first new step;
                                                 kind "in_place": a lost rank replaced, training on
    brigade_recoveries_total{in_place}           ranks lost from a running group and recovered in
                                                 place ("true") or by a fallback to a whole-group
                                                 restart ("false"): `observe_recovery_event`
    brigade_checkpoint_save_duration_seconds     how long training waited for a checkpoint save

Read from the store and Ray at each scrape (`ServiceCollector`):

    brigade_jobs{tenant,state}                   jobs by state and tenant
    brigade_cluster_capacity{resource}           the live nodes' cpus and gpus
    brigade_cluster_usage{resource}              what active jobs hold
    brigade_queue_length                         jobs waiting for capacity
    brigade_leader                               1 while this replica leads (`LeaderCollector`)

Brought up to date at each scrape from the jobs' phases (`phase_counters`):

    brigade_job_phase_seconds_total{tenant,phase}  seconds in each goodput phase

and from the jobs' workers and the flavors' prices (`cost_counters`):

    brigade_tenant_cost_total{tenant,flavor}     worker-hours x the flavor's price at the time
                                                 (jobs of no flavor: flavor "(none)")

The metric objects belong to no registry of their own: each app registers
them, with its supervisor's collector, in its own (`registry_for`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from service.observability.cost_counters import CostCollector
from service.observability.phase_counters import PhaseSecondsCollector
from service.states import JobState
from service.store import JobStore

logger = logging.getLogger(__name__)

RESTARTS = Counter("brigade_job_restarts", "Jobs restarted after a failure.", ["tenant"], registry=None)
PREEMPTIONS = Counter("brigade_job_preemptions", "Jobs preempted (a higher priority, or SIGTERM).",
                      ["tenant"], registry=None)
PRUNES = Counter("brigade_job_prunes", "Sweep trials stopped early by their pruner.", ["tenant"],
                 registry=None)
SCHEDULING_PASS = Histogram(
    "brigade_scheduling_pass_duration_seconds", "Time of one scheduling pass.", registry=None,
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5))
RECOVERY = Histogram(
    "brigade_job_recovery_duration_seconds",
    "From a failure (or a preemption notice) to the end of the first new step.", ["kind"],
    registry=None, buckets=(1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600))
RECOVERIES = Counter(
    "brigade_recoveries",
    "Ranks lost from a running group: recovered in place, or fallen back to a whole-group restart.",
    ["in_place"], registry=None)
for _in_place in ("true", "false"):  # both series from the start, at 0
    RECOVERIES.labels(in_place=_in_place)
CHECKPOINT_SAVE = Histogram(
    "brigade_checkpoint_save_duration_seconds",
    "How long training waited for a checkpoint save (the whole save when blocking).",
    registry=None, buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120))
PROCESS_METRICS = (RESTARTS, PREEMPTIONS, PRUNES, SCHEDULING_PASS, RECOVERY, RECOVERIES,
                   CHECKPOINT_SAVE)


def count_transition(tenant: str, to: JobState) -> None:
    """Count a state change that the counters follow: told of every change the
    store writes (`JobStore.on_transition`, set by the supervisor), so each is
    counted once, wherever it was decided."""
    if to is JobState.RESTARTING:
        RESTARTS.labels(tenant=tenant).inc()
    elif to is JobState.PREEMPTING:
        PREEMPTIONS.labels(tenant=tenant).inc()
    elif to is JobState.PRUNED:
        PRUNES.labels(tenant=tenant).inc()


def observe_checkpoint_saves(rows: list[dict]) -> None:
    """The save times a batch of metrics rows reports."""
    for row in rows:
        if isinstance(stall := row.get("checkpoint_stall_s"), int | float):
            CHECKPOINT_SAVE.observe(stall)


def observe_recovery(kind: str, seconds: float) -> None:
    RECOVERY.labels(kind=kind).observe(seconds)


def observe_recovery_event(in_place: bool, seconds: float) -> None:
    """A recovery that `JobStore.record_recovery` recorded, told by its caller
    once it is written: counted by whether it was in place, and an in-place
    one's `seconds` (the loss seen to training going on) observed as kind
    "in_place". A fallback's time is the restart's, observed at its first new
    step like any restart's."""
    RECOVERIES.labels(in_place="true" if in_place else "false").inc()
    if in_place:
        observe_recovery("in_place", seconds)


class ServiceCollector(Collector):
    """Jobs by state and tenant, capacity and usage, read at each scrape."""

    def __init__(self, store: JobStore, cluster_status: Callable[[], dict]):
        self.store, self.cluster_status = store, cluster_status

    def describe(self):
        return self._families()

    def collect(self):
        jobs, capacity, usage, queue = self._families()
        try:
            counts = self.store.count_by_tenant_and_state()
            for tenant, by_state in sorted(counts.items()):
                for state in JobState:
                    jobs.add_metric([tenant, state.value], by_state.get(state, 0))
        except Exception:  # the store is gone: say so in the log, scrape the rest
            logger.exception("metrics: cannot count the jobs")
        try:
            cluster = self.cluster_status()
            for name, value in sorted(cluster["capacity"].items()):
                capacity.add_metric([name], value)
            for name, value in sorted(cluster["usage"].items()):
                usage.add_metric([name], value)
            queue.add_metric([], len(cluster["queue"]))
        except Exception:
            logger.exception("metrics: cannot read the cluster")
        return [jobs, capacity, usage, queue]

    @staticmethod
    def _families():
        return [
            GaugeMetricFamily("brigade_jobs", "Jobs by state and tenant.", labels=["tenant", "state"]),
            GaugeMetricFamily("brigade_cluster_capacity", "Live nodes' resources.",
                              labels=["resource"]),
            GaugeMetricFamily("brigade_cluster_usage", "Resources held by active jobs.",
                              labels=["resource"]),
            GaugeMetricFamily("brigade_queue_length", "Jobs waiting for capacity."),
        ]


class LeaderCollector(Collector):
    """1 while this replica holds the leader lease, 0 while it follows."""

    def __init__(self, is_leader: Callable[[], bool]):
        self.is_leader = is_leader

    def collect(self):
        leader = GaugeMetricFamily("brigade_leader",
                                   "1 while this replica leads the control plane, else 0.")
        leader.add_metric([], 1 if self.is_leader() else 0)
        return [leader]


def registry_for(supervisor, *more) -> CollectorRegistry:
    """A registry of the process's metrics, this supervisor's
    (`service.supervisor.Supervisor`: its store, views and leadership) and `more`."""
    registry = CollectorRegistry(auto_describe=True)
    leadership = supervisor.leadership
    for collector in (*PROCESS_METRICS, ServiceCollector(supervisor.store, supervisor.views.cluster_status),
                      LeaderCollector(lambda: leadership.is_leader),
                      PhaseSecondsCollector(supervisor.store), CostCollector(supervisor.store),
                      *more):
        registry.register(collector)
    return registry
