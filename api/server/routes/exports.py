"""A job's exports: consolidated Hugging Face models of its committed
checkpoints (`service.run.exports`). Ask for one, list the committed ones,
download their files."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path
from fastapi.responses import StreamingResponse

from api.schemas.exports import ExportCreate, ExportPublic, ExportStartedPublic
from api.server.audit import Audit
from api.server.deps import CurrentTenant, ExportsDep, OwnedJob
from api.server.errors import ApiError, not_found
from api.server.routes.jobs import ERRORS
from checkpoints.exports import parse_export_id
from service.run.exports import ExportRefused
from service.store.tenants import ADMIN_TENANT

router = APIRouter(prefix="/v1/jobs", tags=["exports"], responses=ERRORS)


@router.post("/{job_id}/exports", status_code=202)
def create_export(
    job: OwnedJob,
    tenant: CurrentTenant,
    exports: ExportsDep,
    audit: Audit,
    body: Annotated[ExportCreate | None, Body()] = None,
) -> ExportStartedPublic:
    """Write a Hugging Face-format model of a committed step (default: the
    latest) in `dtype`: 202 at once; it is listed once committed. `kind`:
    "model" for a job that trains every weight; "adapter" (PEFT's adapter
    directory, the default) or "merged" (the base with the adapters merged in)
    for a job with an `adapter` section. A kind the job cannot make, or a model
    family with no Hugging Face architecture, is a 422; a step with no
    committed checkpoint a 409."""
    asked = body or ExportCreate()
    by = "the admin" if tenant == ADMIN_TENANT else "the user"
    try:
        started = exports.start(job, asked.step, asked.dtype, asked.kind, by=by)
    except ExportRefused as e:
        raise ApiError(e.status, str(e), e.field) from None
    public = ExportStartedPublic.model_validate(started)
    audit("job.export", target=job.id, tenant=job.tenant, export=public.id, step=public.step,
          dtype=public.dtype, kind=public.kind)
    return public


@router.get("/{job_id}/exports")
def list_exports(job: OwnedJob, exports: ExportsDep) -> list[ExportPublic]:
    """Committed exports only, oldest step first."""
    return [ExportPublic.model_validate(e) for e in exports.committed(job)]


@router.get("/{job_id}/exports/{export_id}/files/{name}", response_class=StreamingResponse,
            responses={200: {"content": {"application/octet-stream": {}}}})
def export_file(
    job: OwnedJob,
    exports: ExportsDep,
    export_id: Annotated[str, Path(max_length=64)],
    name: Annotated[str, Path(max_length=128)],
) -> StreamingResponse:
    """One file of a committed export, streamed; a file that fails its
    manifest check (size or sha256) is a 409, never sent."""
    if parse_export_id(export_id) is None:
        raise not_found("export", export_id)
    try:
        size, chunks = exports.file(job, export_id, name)
    except ExportRefused as e:
        raise ApiError(e.status, str(e), e.field) from None
    except (FileNotFoundError, ValueError):  # not committed, not one of its files, a bad name
        raise not_found("export file", f"{export_id}/{name}") from None
    return StreamingResponse(chunks, media_type="application/octet-stream",
                             headers={"Content-Length": str(size)})
