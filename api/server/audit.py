"""The audit trail's one writer in the API.

A route that changes something declares `Audit` and, once the change is
made, calls it with what it did:

    @router.post("/{job_id}/cancel")
    def cancel_job(job: OwnedJob, tenant: CurrentTenant, jobs: JobRequestsDep,
                   audit: Audit) -> JobPublic:
        cancelled = jobs.cancel(tenant, job.id)
        audit("job.cancel", target=job.id, tenant=job.tenant, state=cancelled.state.value)
        return JobPublic.model_validate(cancelled)

The recorder knows who asked (the caller's tenant, or "admin": the same
`CurrentTenant` the route authenticated with, resolved once per request) and
from where (the client's address); the route says the action, its target,
the tenant it concerns and a few fields of detail (keyword arguments, kept as
JSON). Only what succeeded is recorded: a refused request changed nothing.
The admin reads the trail at `GET /v1/audit` (`api.server.routes.audit`).

Actions are named `resource.verb`: job.submit, job.update, job.cancel, job.suspend,
job.resume, job.delete, job.export; sweep.submit, sweep.update, sweep.cancel, sweep.delete;
tenant.create, tenant.update,
tenant.delete, tenant.rotate_key; data.upload, data.delete; node.drain; flavor.put, flavor.delete.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request

from api.server.deps import CurrentTenant, StoreDep


class AuditRecorder:
    """Bound to one request: `recorder(action, target=..., tenant=..., **detail)`."""

    def __init__(self, store: Any, actor: str, client: str | None):
        self._store, self.actor, self.client = store, actor, client

    def __call__(self, action: str, *, target: str | None = None, tenant: str | None = None,
                 **detail: Any) -> None:
        self._store.audit.record(actor=self.actor, action=action, tenant=tenant, target=target,
                                 detail=detail, client=self.client)


def _recorder(request: Request, actor: CurrentTenant, store: StoreDep) -> AuditRecorder:
    return AuditRecorder(store, actor, request.client.host if request.client else None)


Audit = Annotated[AuditRecorder, Depends(_recorder)]
