"""Which jobs a tenant reaches: its own, or any for the admin. The one rule
the requests and the views apply before they act on or show a job."""

from __future__ import annotations

from service.store import JobNotFound, JobRecord, JobStore
from service.store.tenants import ADMIN_TENANT


def reachable_job(store: JobStore, tenant: str, job_id: str) -> JobRecord:
    """The job, if `tenant` may reach it; else `JobNotFound` (alike for an
    unknown id and another tenant's)."""
    job = store.get_job(job_id, tenant=None if tenant == ADMIN_TENANT else tenant)
    if job is None:
        raise JobNotFound(job_id)
    return job
