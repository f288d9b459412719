"""The OpenAPI document (`/openapi.json`), made true for every route in one
place: the answers a route can give because of what stands in front of it,
not what it does, are declared here rather than route by route, so a new
route gets them without a line of its own:

    400  a body that is not UTF-8, or cannot be parsed    every operation with a body
    413  a body over the limit (`api.server.body_limit`)  every operation with a body
    422  a parameter or body the schema refuses           every operation with either
    401  no key, or a wrong one (`api.server.deps`)       every operation with security
    403  the admin's only, or a session without its CSRF   every operation with security
    429  over the tenant's rate (`api.server.rate_limit`) every operation with security
    404  no such job, tenant, sweep, file ...             every operation with a path parameter

A status a route declares itself (its own description) is kept as it is.
What else the server enforces is stated where it is enforced: field
constraints in the schemas (`api.schemas`, `workers.schema`; strict types
in their bases), path and query parameters in their `Path`/`Query`.

Methods: a path answers a method it has no route for with 405 and an
`Allow` header listing every method its routes have (`allowed_methods`;
Starlette's own lists only the first route of the path's).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.types import Scope

ERROR_REF = {"$ref": "#/components/schemas/ErrorPublic"}

BODY_ERRORS = {
    "400": "the body is not UTF-8, or cannot be parsed",
    "413": "the body is over the server's limit",
}
INPUT_ERRORS = {"422": "a parameter or the body is refused; `error.field` names it"}
AUTH_ERRORS = {
    "401": "no API key, or not a valid one",
    "403": "not allowed with this key (the admin's only), or a session's request without its "
           "CSRF token",
    "429": "over the tenant's request rate: wait as `Retry-After` says",
}
PATH_ERRORS = {"404": "what the path names is not there, or not yours"}
_METHODS = ("get", "put", "post", "delete", "patch", "options", "head", "trace")


def install_openapi(app: FastAPI) -> None:
    """Serve the document with the errors above declared on every operation."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(title=app.title, version=app.version,
                                   description=app.description, routes=app.routes)
            declare_common_errors(document)
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented override


def declare_common_errors(document: dict[str, Any]) -> None:
    """Add the statuses every route of its kind can answer to each operation."""
    for item in document.get("paths", {}).values():
        for method in _METHODS:
            if (operation := item.get(method)) is None:
                continue
            parameters = operation.get("parameters", []) + item.get("parameters", [])
            errors: dict[str, str] = {}
            if "requestBody" in operation:
                errors |= BODY_ERRORS | INPUT_ERRORS
            if parameters:
                errors |= INPUT_ERRORS
            if operation.get("security"):
                errors |= AUTH_ERRORS
            if any(p.get("in") == "path" for p in parameters):
                errors |= PATH_ERRORS
            responses = operation.setdefault("responses", {})
            for status, description in errors.items():
                answer = responses.setdefault(status, {"description": description})
                if answer.get("description") in (None, "", "Validation Error"):
                    answer["description"] = description
                content = answer.setdefault("content", {}).setdefault("application/json", {})
                if content.get("schema", {}).get("$ref", ERROR_REF["$ref"]) != ERROR_REF["$ref"]:
                    content["schema"] = ERROR_REF  # FastAPI's HTTPValidationError: not our shape
                content.setdefault("schema", ERROR_REF)
    schemas = document.get("components", {}).get("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):  # FastAPI's shape: never answered
        others = {k: v for k, v in schemas.items() if k != unused}
        if f'/{unused}"' not in json.dumps([document.get("paths"), others]):
            schemas.pop(unused, None)


def allowed_methods(app: Any, scope: Scope) -> list[str]:
    """The methods of the request's resource: every route of the path
    template the request's path meets first (`/v1/jobs/goodput` is its own
    resource, not a job's), in a stable order (what a 405's `Allow` lists)."""
    path = scope.get("path", "")
    template, methods = None, set()
    for route in _routes(app):
        regex, route_methods = getattr(route, "path_regex", None), getattr(route, "methods", None)
        if regex is None or not route_methods:
            continue
        if template is None and regex.match(path):
            template = route.path
        if template is not None and route.path == template:
            methods |= set(route_methods)
    return sorted(methods, key=lambda m: (_METHODS.index(m.lower()) if m.lower() in _METHODS else 99, m))


def _routes(app: Any) -> list[Any]:
    """The app's routes as they are tried, each router's included ones in place."""
    try:
        from fastapi.routing import iter_route_contexts  # FastAPI >= 0.120 nests included routers
    except ImportError:  # pragma: no cover - a FastAPI that keeps its routes flat
        return list(app.routes)
    return list(iter_route_contexts(app.routes))
