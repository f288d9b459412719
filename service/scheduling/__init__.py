"""Scheduling policies: pure decisions over plain views of jobs, tenants and
the cluster, with no Ray, database or torch, so that tests feed them made-up
jobs and capacities.

- `Scheduler.admit(...) -> AdmissionDecision`: which queued jobs start, at
  what world size, and why the others wait (`admission`).
- `PreemptionPolicy.select_victims(...) -> PreemptionDecision`: which running
  jobs make room for a waiting one of higher priority (`preemption`).
- `QuotaPolicy.check_submit(...) -> QuotaDecision`: whether a tenant may queue
  a job (`quota`).
- `RestartPolicy.decide(...) -> RestartDecision`: restart a failed job, after
  how long, or give up, counting the failures since it last made progress
  (`RestartPolicy.made_progress`) (`restart`).

One supervisor pass would read: build the views (and, for weights that hold
on a small cluster, each tenant's `attained_service` over a recent window),
`admit`, start what it says, then offer `needs_room` in order to
`select_victims` (with the jobs just started among the running and
`free_after` as the free capacity) and preempt the first non-empty set of
victims.
"""

from service.scheduling.admission import AdmissionDecision, Scheduler
from service.scheduling.fair_share import Run, attained_service
from service.scheduling.preemption import PreemptionDecision, PreemptionPolicy
from service.scheduling.quota import QuotaDecision, QuotaPolicy
from service.scheduling.restart import AttemptSteps, Failure, RestartDecision, RestartPolicy
from service.scheduling.views import (
    Capacity,
    Demand,
    FlavorQuota,
    QueuedJob,
    Quota,
    Resources,
    RunningJob,
    TenantPolicy,
    effective_priority,
)

__all__ = [
    "AdmissionDecision", "AttemptSteps", "Capacity", "Demand", "Failure", "FlavorQuota",
    "PreemptionDecision",
    "PreemptionPolicy", "QueuedJob", "Quota", "QuotaDecision", "QuotaPolicy", "Resources",
    "RestartDecision", "RestartPolicy", "Run", "RunningJob", "Scheduler", "TenantPolicy",
    "attained_service", "effective_priority",
]
