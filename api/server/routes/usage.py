"""Usage per tenant over a window: what its jobs held (worker-, cpu- and
gpu-seconds, and the worker-seconds by goodput phase with its goodput), how
many ended in each final state, and the preemptions they suffered. A tenant
sees its own; the admin every tenant's, and the cluster's total of them."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api.schemas.usage import UsagePublic, UsageReport
from api.server.deps import CurrentTenant, ViewsDep
from api.server.routes.jobs import ERRORS, listed_tenant
from service.observability.usage import cluster_usage

MAX_WINDOW_S = 366 * 86400.0
router = APIRouter(prefix="/v1/usage", tags=["usage"], responses=ERRORS)


@router.get("")
def usage(
    tenant: CurrentTenant,
    views: ViewsDep,
    window_s: Annotated[float, Query(gt=0, le=MAX_WINDOW_S, allow_inf_nan=False,
                                     description="the last this many seconds")] = 86400.0,
    of_tenant: Annotated[str | None, Query(
        alias="tenant", max_length=128,
        description="the admin: only this tenant (default: every tenant)")] = None,
) -> UsageReport:
    listed = listed_tenant(tenant, of_tenant)
    since, until, found = views.usage(listed, window_s)
    return UsageReport(window_s=window_s, since=since, until=until,
                       tenants=[UsagePublic.model_validate(u) for u in found],
                       cluster=UsagePublic.model_validate(cluster_usage(found)) if listed is None else None)
