"""Goodput for lists and charts: a page of jobs' goodput in one request (the
dashboard's jobs list), and the goodput of the caller's jobs over time (the
cluster page's chart). A job's own breakdown is `GET /v1/jobs/{id}/goodput`;
a window's total, `GET /v1/usage`.

`GET /v1/jobs/goodput` shares its prefix with a job's routes: its router is
included before theirs (api/server/app.py), and no job's id is "goodput" (ids are
`j-...`). Ids the caller may not see are left out of the answer, exactly as
ids that do not exist: a tenant learns nothing of another's jobs.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.concurrency import run_in_threadpool

from api.schemas.goodput import GoodputBucketPublic, GoodputOverTime, JobGoodputPublic, JobsGoodputPublic
from api.server.deps import CurrentTenant, StoreDep
from api.server.errors import ApiError
from api.server.routes.jobs import ERRORS, MAX_PAGE, listed_tenant
from service.observability.goodput_reads import goodput_over_time, jobs_goodput
from service.store.models import utcnow
from service.store.tenants import ADMIN_TENANT

MAX_WINDOW_S = 31 * 86400.0
MAX_BUCKETS = 200
router = APIRouter(tags=["usage"], responses=ERRORS)


@router.get("/v1/jobs/goodput")
async def listed_jobs_goodput(
    tenant: CurrentTenant,
    store: StoreDep,
    ids: Annotated[list[str], Query(
        alias="id", description="job ids, repeated or comma-separated (at most 500)")],
) -> JobsGoodputPublic:
    """Each of these jobs' wall time, phases and goodput as of now (the
    numbers `GET /v1/jobs/{id}/goodput` gives). Ids the caller does not own
    (or that do not exist) are left out."""
    wanted = list(dict.fromkeys(i.strip() for v in ids for i in v.split(",") if i.strip()))
    if len(wanted) > MAX_PAGE:
        raise ApiError(422, f"id: at most {MAX_PAGE} job ids, got {len(wanted)}", "id")
    if any(len(i) > 64 for i in wanted):
        raise ApiError(422, "id: a job id is at most 64 characters", "id")
    owner = None if tenant == ADMIN_TENANT else tenant

    def read() -> JobsGoodputPublic:
        jobs = [job for i in wanted if (job := store.get_job(i, tenant=owner)) is not None]
        found = jobs_goodput(store, jobs, utcnow())
        return JobsGoodputPublic(items=[
            JobGoodputPublic(id=job.id, wall_s=found[job.id].wall_s, phases=found[job.id].phases,
                             goodput=found[job.id].goodput) for job in jobs])

    return await run_in_threadpool(read)


@router.get("/v1/usage/goodput")
async def goodput_history(
    tenant: CurrentTenant,
    store: StoreDep,
    window_s: Annotated[float, Query(gt=0, le=MAX_WINDOW_S, allow_inf_nan=False,
                                     description="the last this many seconds")] = 86400.0,
    buckets: Annotated[int, Query(ge=1, le=MAX_BUCKETS, description="equal stretches of it")] = 24,
    of_tenant: Annotated[str | None, Query(
        alias="tenant", max_length=128,
        description="the admin: only this tenant's jobs (default: every tenant's)")] = None,
) -> GoodputOverTime:
    """The worker-seconds by goodput phase and the goodput of the caller's
    jobs (the admin's: every tenant's) in each bucket of the window."""
    listed = listed_tenant(tenant, of_tenant)
    until = utcnow()
    since = until - timedelta(seconds=window_s)
    found = await run_in_threadpool(goodput_over_time, store, listed, since, until, buckets)
    return GoodputOverTime(window_s=window_s, since=since, until=until, tenant=listed,
                           buckets=[GoodputBucketPublic.model_validate(b) for b in found])
