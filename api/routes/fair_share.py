"""Each tenant's fair share and quota use, as of the latest scheduling pass
(`service.observability.fair_share_view`): the admin sees every tenant, a tenant itself."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import CurrentTenant, SupervisorDep
from api.routes.jobs import ERRORS
from api.schemas import TenantSharePublic, TenantSharesPublic
from service.store.tenants import ADMIN_TENANT

router = APIRouter(prefix="/v1/cluster", tags=["cluster"], responses=ERRORS)


@router.get("/tenants")
def tenant_shares(tenant: CurrentTenant, supervisor: SupervisorDep) -> TenantSharesPublic:
    rows = [s for s in supervisor.fair_shares() if tenant in (ADMIN_TENANT, s.tenant)]
    return TenantSharesPublic(items=[TenantSharePublic.model_validate(s) for s in rows])
