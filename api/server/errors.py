"""Every error as JSON of one shape: `{"error": {"message": ..., "field": ...}}`.

The message names the bad field (`train.steps: Input should be greater than
or equal to 1`) and never echoes the input back. Anything unexpected becomes
a 500 of the same shape, and is logged.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from api.schemas.errors import ErrorBody, ErrorPublic
from api.server.openapi import allowed_methods
from service.states import IllegalTransition
from service.store.errors import (
    FlavorConflict,
    FlavorInUse,
    FlavorNotFound,
    JobNotFound,
    JobUnfinished,
    QuotaExceeded,
    QuotaFlavorUnknown,
    SweepNotFound,
    SweepUnfinished,
    TenantBusy,
    TenantExists,
    TenantNotFound,
)
from workers.cluster.errors import CapacityError
from workers.cluster.node_view import (
    ClusterUnreachableError,
    DrainNotCancellableError,
    DrainRefusedError,
    UnknownNodeError,
)
from workers.schema import SpecError, unknown_field

log = logging.getLogger("brigade.api")

MAX_LISTED = 5  # validation errors spelled out in one message
_ACTIONS = frozenset({"cancel", "suspend", "resume"})  # a job's routes that change its state
_SOURCES = ("body", "query", "path", "header", "cookie")
_TYPE_MISMATCH = frozenset({
    "int_type", "int_parsing", "int_from_float", "float_type", "float_parsing", "bool_type",
    "bool_parsing", "string_type", "list_type", "dict_type", "model_type", "model_attributes_type",
})


class ApiError(Exception):
    """An error the API answers with on purpose (404, 409, ...)."""

    def __init__(self, status: int, message: str, field: str | None = None):
        super().__init__(message)
        self.status, self.message, self.field = status, message, field


def not_found(what: str, ident: str) -> ApiError:
    return ApiError(404, f"{what} {ident[:80]!r} not found")


def error_response(status: int, message: str, field: str | None = None, headers=None) -> JSONResponse:
    body = ErrorPublic(error=ErrorBody(message=message, field=field))
    return JSONResponse(body.model_dump(exclude_none=True), status_code=status, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    # `exception_handler(cls)(handler)` is `add_exception_handler(cls, handler)`, typed
    # for a handler of `cls` alone (Starlette's own signature wants one of any Exception).
    app.exception_handler(ApiError)(_api_error)
    app.exception_handler(RequestValidationError)(_validation_error)
    app.exception_handler(SpecError)(_spec_error)
    app.exception_handler(CapacityError)(_capacity_error)
    app.exception_handler(IllegalTransition)(_illegal_transition)
    app.exception_handler(JobNotFound)(_job_not_found)
    app.exception_handler(TenantNotFound)(_tenant_not_found)
    app.exception_handler(QuotaExceeded)(_quota_exceeded)
    app.exception_handler(QuotaFlavorUnknown)(_quota_flavor_unknown)
    app.exception_handler(TenantExists)(_tenant_conflict)
    app.exception_handler(TenantBusy)(_tenant_conflict)
    app.exception_handler(JobUnfinished)(_job_unfinished)
    app.exception_handler(FlavorNotFound)(_flavor_not_found)
    app.exception_handler(FlavorConflict)(_flavor_conflict)
    app.exception_handler(FlavorInUse)(_flavor_conflict)
    app.exception_handler(SweepNotFound)(_sweep_not_found)
    app.exception_handler(SweepUnfinished)(_sweep_unfinished)
    app.exception_handler(UnknownNodeError)(_unknown_node)
    app.exception_handler(DrainRefusedError)(_node_conflict)
    app.exception_handler(DrainNotCancellableError)(_node_conflict)
    app.exception_handler(ClusterUnreachableError)(_cluster_unreachable)
    app.exception_handler(HTTPException)(_http_error)
    app.exception_handler(Exception)(_unexpected)


async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
    return error_response(exc.status, exc.message, exc.field)


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    body = _body_type(request)
    errors = [_describe(e, body) for e in _without_union_noise(exc.errors())]
    message = "; ".join(m for _, m in errors[:MAX_LISTED])
    if len(errors) > MAX_LISTED:
        message += f" (and {len(errors) - MAX_LISTED} more)"
    return error_response(422, message or "invalid request", errors[0][0] if errors else None)


async def _spec_error(request: Request, exc: SpecError) -> JSONResponse:
    return error_response(422, str(exc), exc.field)


async def _capacity_error(request: Request, exc: CapacityError) -> JSONResponse:
    return error_response(422, str(exc), "workers")


async def _job_not_found(request: Request, exc: JobNotFound) -> JSONResponse:
    return await _api_error(request, not_found("job", exc.job_id))


async def _tenant_not_found(request: Request, exc: TenantNotFound) -> JSONResponse:
    return await _api_error(request, not_found("tenant", exc.tenant_id))


async def _tenant_conflict(request: Request, exc: TenantExists | TenantBusy) -> JSONResponse:
    return error_response(409, str(exc), "name" if isinstance(exc, TenantExists) else None)


async def _flavor_not_found(request: Request, exc: FlavorNotFound) -> JSONResponse:
    return await _api_error(request, not_found("flavor", exc.name))


async def _quota_flavor_unknown(request: Request, exc: QuotaFlavorUnknown) -> JSONResponse:
    """A tenant's quota with limits on a flavor that does not exist."""
    return error_response(422, str(exc), exc.field)


async def _flavor_conflict(request: Request, exc: FlavorConflict | FlavorInUse) -> JSONResponse:
    """Another flavor's labels (`labels`), or a flavor in use (its `name`)."""
    return error_response(409, str(exc), "labels" if isinstance(exc, FlavorConflict) else "name")


async def _job_unfinished(request: Request, exc: JobUnfinished) -> JSONResponse:
    return error_response(409, str(exc), "state")


async def _sweep_not_found(request: Request, exc: SweepNotFound) -> JSONResponse:
    return await _api_error(request, not_found("sweep", exc.sweep_id))


async def _sweep_unfinished(request: Request, exc: SweepUnfinished) -> JSONResponse:
    return error_response(409, str(exc), "state")


async def _unknown_node(request: Request, exc: UnknownNodeError) -> JSONResponse:
    return await _api_error(request, not_found("node", exc.node_id))


async def _node_conflict(request: Request,
                         exc: DrainRefusedError | DrainNotCancellableError) -> JSONResponse:
    """A drain Ray refused or Brigade does not make (the head, a node gone),
    or a drain's cancel, which Ray cannot do."""
    return error_response(409, str(exc), "node_id")


async def _cluster_unreachable(request: Request, exc: ClusterUnreachableError) -> JSONResponse:
    """Ray did not answer (its nodes are Ray's to say): try again."""
    return error_response(503, str(exc), headers={"Retry-After": "5"})


async def _quota_exceeded(request: Request, exc: QuotaExceeded) -> JSONResponse:
    """A full queue clears as jobs start: 429, try again; a job that could
    never run under the quota (or above the tenant's priority): 403."""
    if exc.retryable:
        return error_response(429, exc.reason, exc.field, headers={"Retry-After": "1"})
    return error_response(403, exc.reason, exc.field)


async def _illegal_transition(request: Request, exc: IllegalTransition) -> JSONResponse:
    """A job's action its state does not allow, said in words (`POST .../cancel`)."""
    action = request.url.path.rsplit("/", 1)[-1]
    message = exc.refusal(action) if action in _ACTIONS else str(exc)
    return error_response(409, message, "state")


async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    message, field = str(exc.detail), getattr(exc, "field", None)
    headers = exc.headers
    if exc.status_code in (404, 405) and message in ("Not Found", "Method Not Allowed"):
        message = f"{message}: no route {request.method} {request.url.path[:200]}"
    if exc.status_code == 405:  # every method of the path's routes, not only its first route's
        headers = {**(headers or {}), "Allow": ", ".join(allowed_methods(request.app, request.scope))}
    elif exc.status_code == 400 and exc.__cause__ is not None:  # FastAPI could not parse the body
        message, field = _unparsable_body(exc.__cause__), "body"
    return error_response(exc.status_code, message, field, headers=headers)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_response(500, f"internal error: {type(exc).__name__}")


def _unparsable_body(cause: BaseException) -> str:
    if isinstance(cause, RecursionError):
        return "body: JSON nested too deeply"
    if isinstance(cause, UnicodeDecodeError):
        return "body: not UTF-8 text"
    return f"body: cannot parse the request body ({type(cause).__name__})"


def _body_type(request: Request) -> Any:
    """The type of the route's JSON body (`JobSpec`, `DatasetCreate`, ...), if it takes one."""
    field = getattr(request.scope.get("route"), "body_field", None)
    return field.field_info.annotation if field is not None else None


def _describe(error: dict, body: Any = None) -> tuple[str, str]:
    """(field, "field: what is wrong") for one pydantic/FastAPI error; a key
    the body's model does not have is answered with the nearest allowed names."""
    loc = list(error.get("loc", ()))
    tags = _union_tags(error)
    source = loc[0] if loc and loc[0] in _SOURCES else None
    path = [p for i, p in enumerate(loc) if i not in tags][1 if source else 0:]
    if error.get("type") == "json_invalid":
        reason = (error.get("ctx") or {}).get("error", "not JSON")
        return "body", f"body: invalid JSON at position {path[0] if path else 0}: {reason}"
    field = ".".join(str(p) for p in path) or source or "request"
    msg = error.get("msg", "invalid").removeprefix("Value error, ")
    if source == "body" and body is not None and error.get("type") == "extra_forbidden":
        msg = unknown_field(body, loc[1:]) or msg
    if source == "body" and not path and error.get("type") == "missing":
        msg = "a JSON object is required"
    elif source == "body" and not path and isinstance(error.get("input"), bytes | str):
        msg = "expected a JSON object (Content-Type: application/json)"
    return field, f"{field}: {msg}"


def _without_union_noise(errors: Sequence[dict]) -> list[dict]:
    """pydantic reports every member of a union it tried (`workers`: an int,
    or {min, max}); where one member got past the type check, the others'
    type mismatches only blur the message."""
    got_further = {_union_at(e) for e in errors if e.get("type") not in _TYPE_MISMATCH}
    return [e for e in errors
            if not (e.get("type") in _TYPE_MISMATCH and _union_at(e) in got_further - {None})]


def _union_at(error: dict) -> tuple | None:
    tags = _union_tags(error)
    return tuple(error["loc"][:min(tags)]) if tags else None


def _union_tags(error: dict) -> set[int]:
    """Where in a body error's loc pydantic named the member of a union it
    tried (`int`, `constrained-int`, `WorkerRange`, `function-after[...]`):
    a field path reads better without them. The key an `extra_forbidden`
    names is the sender's, never a tag."""
    loc = tuple(error.get("loc", ()))
    if loc[:1] != ("body",):
        return set()
    end = len(loc) - 1 if error.get("type") == "extra_forbidden" else len(loc)
    return {i for i in range(1, end) if isinstance(part := loc[i], str)
            and (part[:1].isupper() or "-" in part or "[" in part or part == "int")}
