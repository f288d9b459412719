"""The cluster as the control plane sees it: capacity, usage and the queue."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import CurrentTenant, SupervisorDep
from api.routes.jobs import ERRORS
from api.schemas import ClusterPublic, QueuedJob
from service.store.tenants import ADMIN_TENANT

router = APIRouter(prefix="/v1/cluster", tags=["cluster"], responses=ERRORS)


@router.get("")
def cluster_status(tenant: CurrentTenant, supervisor: SupervisorDep) -> ClusterPublic:
    """Other tenants' queued jobs count, but are not named (the admin sees them all)."""
    status = supervisor.cluster_status()
    queue = status["queue"]
    own = [QueuedJob(id=q["id"], name=q["name"], position=place, waiting=q["waiting"],
                     expected_start=q["expected_start"][0],
                     expected_start_reason=q["expected_start"][1])
           for place, q in enumerate(queue, start=1) if tenant in (ADMIN_TENANT, q["tenant"])]
    return ClusterPublic(capacity=status["capacity"], usage=status["usage"],
                         running_jobs=status["running_jobs"], queued_jobs=len(queue), queue=own)
