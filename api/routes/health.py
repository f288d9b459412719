"""Liveness, readiness and Prometheus metrics; none needs a key (no tenant's data)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse

from api.deps import StoreDep, SupervisorDep
from api.errors import ApiError
from api.schemas import ErrorPublic, HealthPublic
from service.readiness import readiness_problems

PROMETHEUS_TEXT = "text/plain; version=0.0.4"
router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> HealthPublic:
    """The process answers (liveness): nothing else is checked."""
    return HealthPublic(status="ok")


@router.get("/readyz", responses={503: {"model": ErrorPublic, "description": "not ready, and why"}})
def readyz(store: StoreDep) -> HealthPublic:
    """Ready to serve: the job store and Ray both answer (503 naming what does not)."""
    problems = readiness_problems(store)
    if problems:
        raise ApiError(503, "not ready: " + "; ".join(problems))
    return HealthPublic(status="ready")


@router.get("/metrics", response_class=PlainTextResponse,
            responses={200: {"content": {PROMETHEUS_TEXT: {}}, "description": "Prometheus text format"}})
def prometheus_metrics(store: StoreDep, supervisor: SupervisorDep) -> PlainTextResponse:
    cluster = supervisor.cluster_status()
    text = _gauge("brigade_jobs", "Jobs by state.", "state", _job_counts(store))
    for part in ("capacity", "usage"):
        text += _gauge(f"brigade_cluster_{part}", f"Cluster {part} by resource.", "resource",
                       cluster[part])
    text += _gauge("brigade_queue_length", "Jobs waiting for capacity.", None,
                   {None: len(cluster["queue"])})
    return PlainTextResponse(text, media_type=PROMETHEUS_TEXT)


def _job_counts(store) -> dict[str, int]:
    return {state.value: count for state, count in store.count_by_state().items()}


def _gauge(name: str, help_: str, label: str | None, values: dict) -> str:
    lines = [f"# HELP {name} {help_}", f"# TYPE {name} gauge"]
    for key, value in values.items():
        labels = f'{{{label}="{_escape(str(key))}"}}' if label else ""
        lines.append(f"{name}{labels} {value!r}")
    return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
