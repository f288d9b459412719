"""Each tenant's fair share as the cluster page shows it: a pure view."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from service.observability.fair_share_view import tenant_shares
from service.scheduling import Resources
from service.states import JobState
from service.store.records import JobRecord, TenantRecord

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def tenant(name: str, weight: float, **quota) -> TenantRecord:
    return TenantRecord(id=f"t-{name}", name=name, quota=quota, max_priority=1000, weight=weight,
                        created_at=NOW, updated_at=NOW)


def job(job_id: str, owner: str, state: JobState, workers: int | None = None) -> JobRecord:
    return JobRecord(id=job_id, tenant=owner, name=job_id, state=state, stored_spec={},
                     priority=0, workers=workers, requested_workers=None, step=0, restarts=0,
                     preemptions=0, latest_checkpoint=None, attempt=1, error=None,
                     idempotency_key=None, created_at=NOW, started_at=None, finished_at=None,
                     updated_at=NOW)


def test_shares_weights_and_quota_use():
    tenants = [tenant("a", 2.0, max_workers=4), tenant("b", 1.0), tenant("idle", 5.0)]
    active = [job("j1", "a", JobState.RUNNING, 2), job("j2", "admin", JobState.RUNNING, 1)]
    queued = [job("j3", "b", JobState.QUEUED), job("j4", "b", JobState.QUEUED)]
    held = {"j1": Resources(cpu=2), "j2": Resources(cpu=1)}
    rows = tenant_shares(tenants, active, queued, held, Resources(cpu=8), {"a": 12.5})
    by = {r.tenant: r for r in rows}
    assert [r.tenant for r in rows] == ["admin", "a", "b", "idle"]
    assert by["a"].workers == 2 and by["a"].running_jobs == 1 and by["a"].quota["max_workers"] == 4
    assert by["a"].share_now == 0.25 and by["a"].service == 12.5
    assert by["b"].queued_jobs == 2 and by["b"].share_now == 0.0
    # entitled: over the weights of those wanting workers (a 2, b 1, admin 1); idle wants none
    assert by["a"].entitled == 0.5 and by["b"].entitled == 0.25 and by["admin"].entitled == 0.25
    assert by["idle"].entitled == 0.0 and by["idle"].quota["max_queued_jobs"] is None


def test_the_admin_has_a_row_with_jobs_or_without():
    """The admin key's own jobs are the tenant `admin`'s, which no tenant row holds: it is
    shown all the same, first, with no quota (the cluster page said "No tenant." beside them)."""
    running = [job("j1", "admin", JobState.RUNNING, 2)]
    for active, tenants in (([], []), (running, []), (running, [tenant("a", 3.0)])):
        rows = tenant_shares(tenants, active, [], {"j1": Resources(cpu=2)}, Resources(cpu=4), {})
        admin = rows[0]
        assert admin.tenant == "admin" and admin.weight == 1.0
        assert admin.quota == {"max_workers": None, "max_gpus": None, "max_running_jobs": None,
                               "max_queued_jobs": None, "flavors": {}}
        assert (admin.running_jobs, admin.workers, admin.share_now) == (
            (1, 2, 0.5) if active else (0, 0, 0.0))
        assert [r.tenant for r in rows] == ["admin", *(t.name for t in tenants)]


def test_what_each_tenants_jobs_of_each_flavor_hold():
    on_a = replace(job("j1", "a", JobState.RUNNING, 2), stored_spec={"resources_per_worker": {
        "cpu": 1, "flavor": "a100"}})
    plain = job("j2", "a", JobState.RUNNING, 1)
    held = {"j1": Resources(cpu=2, gpu=2), "j2": Resources(cpu=1)}
    rows = {r.tenant: r for r in tenant_shares([tenant("a", 1.0)], [on_a, plain], [], held,
                                               Resources(cpu=8, gpu=4), {})}
    assert rows["a"].flavors == {"a100": {"workers": 2, "cpu": 2.0, "gpu": 2.0}}
    assert rows["a"].workers == 3 and rows["admin"].flavors == {}
