"""Quota at submit: whether a tenant may queue one more job.

The rule: refused, not to be retried, when the job's priority is above the
tenant's `max_priority`, or when the job could never run under the tenant's
quota (its smallest world size needs more workers or gpus than the tenant may
run at once, or the tenant may run no jobs at all); refused, to be retried
later, when the tenant already has `max_queued_jobs` jobs queued. Otherwise
allowed.

This is the decision only: the caller counts the queue and inserts the job in
one transaction, so that N+1 racing submissions at a quota of N admit N.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.scheduling.views import Demand, TenantPolicy, never_runs


@dataclass(frozen=True)
class QuotaDecision:
    allowed: bool
    reason: str = ""
    retryable: bool = False  # refused for now (a full queue: 429), not for good (403)
    field: str = "quota"  # what the refusal is about, for the API's error


class QuotaPolicy:
    def check_submit(self, tenant: TenantPolicy, queued_count: int,
                     demand: Demand) -> QuotaDecision:
        if demand.priority > tenant.max_priority:
            return QuotaDecision(False, f"priority {demand.priority} is above tenant "
                                        f"{tenant.name}'s max_priority {tenant.max_priority}",
                                 field="priority")
        why = never_runs(demand, tenant)
        if why:
            return QuotaDecision(False, f"the job could never run: {why}")
        return self.check_queue(tenant, queued_count)

    def check_queue(self, tenant: TenantPolicy, queued_count: int) -> QuotaDecision:
        """The queue quota alone: room for one more queued job?"""
        limit = tenant.quota.max_queued_jobs
        if limit is not None and queued_count >= limit:
            return QuotaDecision(False, f"quota: tenant {tenant.name} has {queued_count}/{limit} "
                                        "jobs queued", retryable=True)
        return QuotaDecision(True)
