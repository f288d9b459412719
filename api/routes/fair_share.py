"""Each tenant's fair share and quota use, as of the latest scheduling pass
(`service.observability.fair_share_view`) and where its data goes: the admin
sees every tenant, a tenant itself."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import CurrentTenant, SupervisorDep
from api.routes.jobs import ERRORS
from api.schemas import TenantSharePublic, TenantSharesPublic
from service.intake.data_access import data_prefix
from service.store.tenants import ADMIN_TENANT

router = APIRouter(prefix="/v1/cluster", tags=["cluster"], responses=ERRORS)


@router.get("/tenants")
def tenant_shares(tenant: CurrentTenant, supervisor: SupervisorDep) -> TenantSharesPublic:
    rows = [s for s in supervisor.fair_shares() if tenant in (ADMIN_TENANT, s.tenant)]
    root = supervisor.settings.resolved_data_uri_root
    return TenantSharesPublic(items=[
        TenantSharePublic.model_validate(s).model_copy(update={"data_prefix": data_prefix(root, s.tenant)})
        for s in rows])
