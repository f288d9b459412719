"""Liveness, readiness and Prometheus metrics; none needs a key (no tenant's data)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import generate_latest

from api.schemas.errors import ErrorPublic
from api.schemas.health import HealthPublic, ReadyPublic
from api.server.deps import StoreDep, ViewsDep
from api.server.errors import ApiError
from service.observability.readiness import readiness_problems

# The text format every Prometheus understands (what generate_latest writes).
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> HealthPublic:
    """The process answers (liveness): nothing else is checked."""
    return HealthPublic(status="ok")


@router.get("/readyz", responses={503: {"model": ErrorPublic, "description": "not ready, and why"}})
def readyz(store: StoreDep, views: ViewsDep) -> ReadyPublic:
    """Ready to serve: the job store and Ray both answer (503 naming what does
    not). Followers are ready too (they serve the whole API); `role` says
    whether this replica leads, `leader` which one does."""
    problems = readiness_problems(store, views.ray_unready)
    if problems:
        raise ApiError(503, "not ready: " + "; ".join(problems))
    return ReadyPublic(status="ready", **views.role())


@router.get("/metrics", response_class=Response,
            responses={200: {"content": {PROMETHEUS_TEXT: {}}, "description": "Prometheus text format"}})
def prometheus_metrics(request: Request) -> Response:
    """Brigade's metrics (`service.observability.metrics`, `api.server.request_metrics`)."""
    return Response(generate_latest(request.app.state.metrics), media_type=PROMETHEUS_TEXT)
