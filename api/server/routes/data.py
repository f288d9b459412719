"""Files under the caller's data prefix (`{data_uri_root}/tenants/{tenant}/data/`,
`GET /v1/whoami`): put one there, list them, read one back, remove one. A
path is relative to the caller's own prefix, so no key reaches another tenant's.

`PUT /v1/data/{path}` streams the raw body to a temporary name and moves it
into place once whole (`service.intake.tenant_data`): a body over
BRIGADE_MAX_UPLOAD_BYTES is a 413 (`api.server.body_limit`, before a byte is read
where the length is declared), a path that leaves the prefix a 422 naming
it; neither leaves anything under the prefix. The answer's `uri` is what a
spec's `data.uri`, or a dataset's input, names.

`GET /v1/data?prefix=raw/` pages the files whose path starts with `prefix`;
`DELETE /v1/data/{path}` removes one (204), refused (409, naming the job and
its field) while a job of the caller's that has not ended names it, or a
folder or dataset it lies under. A folder read or removed as a file is a
404 that says it is a folder."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from starlette.convertors import Convertor, register_url_convertor

from api.schemas.data import DataFilePublic, DataFilesPublic
from api.server.audit import Audit
from api.server.deps import CurrentTenant, SettingsDep, StoreDep
from api.server.errors import ApiError, not_found
from api.server.routes.jobs import ERRORS, MAX_INDEX, MAX_PAGE
from service.intake.tenant_data import (
    ALLOWED,
    MAX_PATH,
    PATH_PATTERN,
    PREFIX_PATTERN,
    DataConflict,
    DataFolder,
    TenantData,
    names_file,
)
from service.settings import Settings
from service.states import NOT_FINAL
from service.store import JobStore
from workers.schema import SpecError

PREFIX = "/v1/data/"
FLUSH_BYTES = 1 << 20  # what is gathered from the body before a write (in the thread pool)
router = APIRouter(prefix=PREFIX.rstrip("/"), tags=["data"], responses=ERRORS)

DataPath = Annotated[str, Path(
    max_length=MAX_PATH, json_schema_extra={"pattern": PATH_PATTERN},  # refused in TenantData
    description=f"a path under your data prefix, e.g. raw/part-0.jsonl: {ALLOWED}")]
# the file's bytes; none at all is an empty file
RAW_BODY = {"requestBody": {"required": False, "content": {
    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}}


class _AnyPath(Convertor[str]):
    """Starlette's `path`, newlines too: a path with a control character is
    refused naming it (422), not left unrouted (404)."""

    regex = "(?s:.*)"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("data_path", _AnyPath())


def _data(settings: Settings, tenant: str) -> TenantData:
    return TenantData(settings.resolved_data_uri_root, tenant)


@router.get("")
def list_data(
    tenant: CurrentTenant,
    settings: SettingsDep,
    prefix: Annotated[str, Query(max_length=MAX_PATH, json_schema_extra={"pattern": PREFIX_PATTERN},
                                 description=(
        "the files whose path starts with this: a folder ('raw/') or the start of a name "
        "('raw/part-'); empty: every file"))] = "",
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    offset: Annotated[int, Query(ge=0, le=MAX_INDEX)] = 0,
) -> DataFilesPublic:
    """A page of your files under your data prefix whose path starts with
    `prefix`, by path: each one's size, last write and (for an upload) sha256."""
    try:
        files = _data(settings, tenant).listing(prefix)
    except SpecError as e:
        raise ApiError(422, str(e).replace("path ", "prefix ", 1), "prefix") from None
    page = files[offset:offset + limit]
    return DataFilesPublic(items=[DataFilePublic.model_validate(f) for f in page],
                           total=len(files), limit=limit, offset=offset)


@router.put("/{path:data_path}", status_code=201, openapi_extra=RAW_BODY,
            responses={200: {"model": DataFilePublic, "description": "a file of that path replaced"}})
async def upload(path: DataPath, request: Request, response: Response, tenant: CurrentTenant,
                 settings: SettingsDep, audit: Audit) -> DataFilePublic:
    """Put the body, as it is, at `path` under your data prefix (201; 200
    where it replaced a file). Answers the file's `uri`, size and sha256."""
    data = _data(settings, tenant)
    try:
        upload = await run_in_threadpool(data.upload, path)
    except DataConflict as e:
        raise ApiError(409, str(e), "path") from None
    try:
        pending = bytearray()
        async for chunk in request.stream():
            pending += chunk
            if len(pending) >= FLUSH_BYTES:
                await run_in_threadpool(upload.write, bytes(pending))
                pending.clear()
        await run_in_threadpool(upload.write, bytes(pending))
        stored = await run_in_threadpool(upload.commit)
    except DataConflict as e:
        raise ApiError(409, str(e), "path") from None
    except BaseException:  # a body over the limit, a client gone, a storage error: nothing kept
        upload.discard()
        raise
    await run_in_threadpool(audit, "data.upload", target=stored.path, tenant=tenant,
                            uri=stored.uri, bytes=stored.bytes, sha256=stored.sha256)
    if stored.replaced:
        response.status_code = 200
    return DataFilePublic.model_validate(stored)


@router.get("/{path:data_path}", response_class=StreamingResponse,
            responses={200: {"content": {"application/octet-stream": {}}}})
def download(path: DataPath, tenant: CurrentTenant, settings: SettingsDep) -> StreamingResponse:
    """A file under your data prefix, streamed (`X-Brigade-Uri`: its URI)."""
    data = _data(settings, tenant)
    found = _stat(data, path)
    return StreamingResponse(data.read(path), media_type="application/octet-stream",
                             headers={"Content-Length": str(found.bytes), "X-Brigade-Uri": found.uri})


@router.delete("/{path:data_path}", status_code=204)
def remove(path: DataPath, tenant: CurrentTenant, settings: SettingsDep, store: StoreDep,
           audit: Audit) -> Response:
    """Remove the file at `path` under your data prefix (204). Refused (409)
    while a job of yours that has not ended names it (or a folder or dataset
    it lies under)."""
    data = _data(settings, tenant)
    found = _stat(data, path)
    if reader := _job_naming(store, tenant, data.forms_of(path)):
        job_id, field = reader
        raise ApiError(409, f"path {path[:200]!r}: job {job_id} ({field}) reads it and has not "
                            "ended; remove it once the job has", "path")
    data.remove(path)
    audit("data.delete", target=path, tenant=tenant, uri=found.uri, bytes=found.bytes)
    return Response(status_code=204)


def _stat(data: TenantData, path: str):
    try:
        found = data.stat(path)
    except DataFolder as e:
        raise ApiError(404, str(e), "path") from None
    if found is None:
        raise not_found("data file", path)
    return found


def _job_naming(store: JobStore, tenant: str, uris: tuple[str, ...]) -> tuple[str, str] | None:
    """(job id, field) of a job of the tenant's, not ended, whose spec names the file."""
    offset = 0
    while True:
        jobs, total = store.list_jobs(tenant=tenant, states=NOT_FINAL, limit=MAX_PAGE, offset=offset)
        for job in jobs:
            if field := names_file(job.stored_spec, uris):
                return job.id, field
        offset += len(jobs)
        if not jobs or offset >= total:
            return None
