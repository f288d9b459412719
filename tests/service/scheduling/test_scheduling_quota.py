"""QuotaPolicy.check_submit: queue quota, priority ceiling, jobs that could never run."""

from __future__ import annotations

import pytest
from scheduling_cases import demand

from service.scheduling import Quota, QuotaDecision, QuotaPolicy, TenantPolicy

check = QuotaPolicy().check_submit
ACME = TenantPolicy("acme", Quota(max_workers=4, max_gpus=2, max_running_jobs=3,
                                  max_queued_jobs=5), max_priority=10)


@pytest.mark.parametrize("queued_count,job", [
    (0, demand()), (4, demand()), (4, demand(workers=4)), (0, demand(workers=(2, 8))),
    (0, demand(workers=2, gpu=1)), (0, demand(workers=4, gpu=0.5)), (0, demand(priority=10)),
])
def test_allowed(queued_count, job):
    assert check(ACME, queued_count, job) == QuotaDecision(True)


@pytest.mark.parametrize("queued_count,job,reason,retryable", [
    (5, demand(), "quota: tenant acme has 5/5 jobs queued", True),
    (9, demand(), "quota: tenant acme has 9/5 jobs queued", True),
    (0, demand(priority=11), "priority 11 is above tenant acme's max_priority 10", False),
    (0, demand(workers=5), "the job could never run: quota: needs 5 workers at its smallest "
                           "size; tenant acme may run 4", False),
    (0, demand(workers=(5, 8)), "the job could never run: quota: needs 5 workers", False),
    (0, demand(workers=3, gpu=1), "the job could never run: quota: needs 3 gpus at its "
                                  "smallest size; tenant acme may use 2", False),
    (0, demand(workers=[]), "the job could never run: no world size", False),
])
def test_refused_with_a_reason(queued_count, job, reason, retryable):
    decision = check(ACME, queued_count, job)
    assert not decision.allowed
    assert decision.reason.startswith(reason)
    assert decision.retryable is retryable


def test_the_priority_ceiling_is_checked_before_the_queue():
    assert "max_priority" in check(ACME, 99, demand(priority=99)).reason


def test_a_tenant_that_may_run_no_jobs_cannot_queue_any():
    idle = TenantPolicy("idle", Quota(max_running_jobs=0))
    assert check(idle, 0, demand()).reason == (
        "the job could never run: quota: tenant idle may run no jobs")


def test_no_quota_means_no_limit():
    free = TenantPolicy("free")
    assert check(free, 10_000, demand(workers=1024, gpu=8, priority=1000)).allowed
