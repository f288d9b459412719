"""Files under the caller's data prefix (`{data_uri_root}/tenants/{tenant}/data/`,
`GET /v1/whoami`): put one there, look at one, read it back. A path is
relative to the caller's own prefix, so no key reaches another tenant's.

`PUT /v1/data/{path}` streams the raw body to a temporary name and moves it
into place once whole (`service.intake.tenant_data`): a body over
BRIGADE_MAX_UPLOAD_BYTES is a 413 (`api.body_limit`, before a byte is read
where the length is declared), a path that leaves the prefix a 422 naming
it; neither leaves anything under the prefix. The answer's `uri` is what a
spec's `data.uri`, or a dataset's input, names."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from starlette.convertors import Convertor, register_url_convertor

from api.audit import Audit
from api.deps import CurrentTenant, SupervisorDep
from api.errors import ApiError, not_found
from api.routes.jobs import ERRORS
from api.schemas import DataFilePublic
from service.intake.tenant_data import MAX_PATH, DataConflict, TenantData

PREFIX = "/v1/data/"
FLUSH_BYTES = 1 << 20  # what is gathered from the body before a write (in the thread pool)
router = APIRouter(prefix=PREFIX.rstrip("/"), tags=["data"], responses=ERRORS)

DataPath = Annotated[str, Path(max_length=MAX_PATH, description="a path under your data prefix, "
                                                                "e.g. raw/part-0.jsonl")]
RAW_BODY = {"requestBody": {"required": True, "content": {
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


def _data(supervisor, tenant: str) -> TenantData:
    return TenantData(supervisor.settings.resolved_data_uri_root, tenant)


@router.put("/{path:data_path}", status_code=201, openapi_extra=RAW_BODY,
            responses={200: {"model": DataFilePublic, "description": "a file of that path replaced"}})
async def upload(path: DataPath, request: Request, response: Response, tenant: CurrentTenant,
                 supervisor: SupervisorDep, audit: Audit) -> DataFilePublic:
    """Put the body, as it is, at `path` under your data prefix (201; 200
    where it replaced a file). Answers the file's `uri`, size and sha256."""
    data = _data(supervisor, tenant)
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
def download(path: DataPath, tenant: CurrentTenant, supervisor: SupervisorDep) -> StreamingResponse:
    """A file under your data prefix, streamed (`X-Brigade-Uri`: its URI)."""
    data = _data(supervisor, tenant)
    found = data.stat(path)
    if found is None:
        raise not_found("data file", path)
    return StreamingResponse(data.read(path), media_type="application/octet-stream",
                             headers={"Content-Length": str(found.bytes), "X-Brigade-Uri": found.uri})
