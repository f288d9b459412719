"""Jobs: submit, list, look at, cancel, suspend and resume; and what a job
leaves behind (events, per-step metrics, committed checkpoints, workers,
where its time went).
Logs have their own module (`api.server.routes.logs`): they stream."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Response
from pydantic import TypeAdapter, ValidationError

from api.schemas.errors import ErrorPublic
from api.schemas.goodput import GoodputPublic
from api.schemas.jobs import (
    CheckpointPublic,
    EventPublic,
    JobCreate,
    JobPublic,
    JobsPublic,
    JobUpdate,
    MetricRow,
    ResumeRequest,
    WorkerPublic,
)
from api.server.audit import Audit
from api.server.deps import (
    CurrentTenant,
    IdempotencyKey,
    JobPagesDep,
    JobRequestsDep,
    OwnedJob,
    StoreDep,
    ViewsDep,
    read,
)
from api.server.errors import ApiError
from api.server.job_json import PageQuery
from api.server.responses import json_of
from api.server.state_filter import DESCRIPTION, JobStates, parse_state_filter
from service.states import JobState
from service.store import JobRecord, JobStore
from service.store.tenants import ADMIN_TENANT
from workers.schema.labels import MAX_LABELS, Labels, parse_label

MAX_PAGE = 500
MAX_INDEX = 2**62  # offsets, steps and ids stay inside a database's BIGINT

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorPublic} for code in (401, 403, 404, 409, 413, 422, 429)
}
router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses=ERRORS)

Index = Annotated[int, Query(ge=0, le=MAX_INDEX)]
LABELS: TypeAdapter[dict[str, str]] = TypeAdapter(Labels)


@router.post("", status_code=201, response_model=JobPublic,
             responses={200: {"model": JobPublic, "description": "an idempotent retry: the job"},
                        429: {"model": ErrorPublic, "description": "the tenant's queue is full"}})
def submit_job(
    spec: JobCreate,
    tenant: CurrentTenant,
    jobs: JobRequestsDep,
    response: Response,
    audit: Audit,
    idempotency_key: IdempotencyKey = None,
) -> JobPublic:
    """Queue a job. With an `Idempotency-Key`, a retried submit returns the
    job the first one made (200) instead of making another, even with the
    queue full. A priority above the tenant's `max_priority`, or a job whose
    smallest size needs more workers or gpus than its quota allows, is
    refused (403); a tenant with `max_queued_jobs` jobs queued gets 429 and
    `Retry-After`."""
    job, created = jobs.submit(tenant, spec, idempotency_key)
    if created:
        audit("job.submit", target=job.id, tenant=job.tenant, name=job.name,
              workers=job.stored_spec.get("workers"), priority=job.priority)
    else:
        response.status_code = 200
    return JobPublic.model_validate(job)


@router.get("", response_model=JobsPublic)
async def list_jobs(
    tenant: CurrentTenant,
    store: StoreDep,
    pages: JobPagesDep,
    state: Annotated[list[JobStates] | None, Query(description=DESCRIPTION)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    offset: Index = 0,
    name: Annotated[str | None, Query(max_length=128, description="jobs whose name contains this")] = None,
    sweep: Annotated[str | None, Query(max_length=32, description="only this sweep's trials")] = None,
    label: Annotated[list[str] | None, Query(
        description="`key=value`, repeated: only jobs with every one")] = None,
    of_tenant: Annotated[str | None, Query(
        alias="tenant", max_length=128,
        description="the admin: only this tenant's jobs (default: every tenant's)")] = None,
) -> Response:
    """A tenant's own jobs; for the admin key, every tenant's (or `tenant`'s)."""
    states = parse_states(state)
    query = PageQuery(tenant=listed_tenant(tenant, of_tenant), limit=limit, offset=offset,
                      states=None if states is None else tuple(states), name=name or None,
                      sweep=sweep or None, labels=parse_labels(label))
    return Response(await read(store, pages.json, query), media_type="application/json")


@router.get("/{job_id}", response_model=JobPublic)
async def get_job(job: OwnedJob, views: ViewsDep) -> Response:
    public = JobPublic.model_validate(job)
    public.waiting = views.waiting_reason(job.id)
    if job.state is JobState.QUEUED:  # a forecast made a moment ago may still name a job since started
        # the one this replica's loop made last: this route runs on the event loop and
        # must not wait for the database (tests/api/test_job_pages.py)
        public.expected_start, public.expected_start_reason = views.expected_start(
            job.id, made=True)
    return json_of(public)


@router.patch("/{job_id}", response_model=JobPublic)
def update_job(job: OwnedJob, tenant: CurrentTenant, jobs: JobRequestsDep, audit: Audit,
               store: StoreDep, body: JobUpdate) -> JobPublic:
    """Change the job's labels (all of them: `{}` removes them) and/or its note
    (`null` removes it), in any state; what is left out is kept."""
    changes = body.model_dump(include=body.model_fields_set)
    if not changes:
        raise ApiError(422, "body: give labels, note or both", "body")
    updated = jobs.relabel(tenant, job.id, changes)
    audit("job.update", target=job.id, tenant=job.tenant, **{
        name: {"from": getattr(job, name), "to": getattr(updated, name)} for name in changes})
    return answered(store, updated)


@router.post("/{job_id}/cancel")
def cancel_job(job: OwnedJob, tenant: CurrentTenant, jobs: JobRequestsDep,
               audit: Audit, store: StoreDep) -> JobPublic:
    cancelled = jobs.cancel(tenant, job.id)
    audit("job.cancel", target=job.id, tenant=job.tenant, state=cancelled.state.value)
    return answered(store, cancelled)


@router.delete("/{job_id}", status_code=204, response_class=Response)
def delete_job(job: OwnedJob, tenant: CurrentTenant, jobs: JobRequestsDep,
               audit: Audit) -> Response:
    """Remove a finished job with its history, checkpoints and exports (409
    while it is unfinished: cancel it first)."""
    jobs.delete(tenant, job.id)
    audit("job.delete", target=job.id, tenant=job.tenant, name=job.name, state=job.state.value)
    return Response(status_code=204)


@router.post("/{job_id}/suspend")
def suspend_job(job: OwnedJob, tenant: CurrentTenant, jobs: JobRequestsDep,
                audit: Audit, store: StoreDep) -> JobPublic:
    """Checkpoint, then stop; the job waits in SUSPENDED until resumed."""
    suspended = jobs.suspend(tenant, job.id)
    audit("job.suspend", target=job.id, tenant=job.tenant, step=suspended.step)
    return answered(store, suspended)


@router.post("/{job_id}/resume")
def resume_job(
    job: OwnedJob,
    tenant: CurrentTenant,
    jobs: JobRequestsDep,
    audit: Audit,
    store: StoreDep,
    body: Annotated[ResumeRequest | None, Body()] = None,
) -> JobPublic:
    """Queue a suspended job again, from its latest checkpoint; optionally at
    another world size (`{"workers": N}`)."""
    workers = body.workers if body else None
    resumed = jobs.resume(tenant, job.id, workers)
    audit("job.resume", target=job.id, tenant=job.tenant, workers=workers)
    return answered(store, resumed)


@router.get("/{job_id}/events")
def job_events(job: OwnedJob, store: StoreDep) -> list[EventPublic]:
    return [EventPublic.model_validate(e) for e in store.events(job.id)]


@router.get("/{job_id}/metrics")
def job_metrics(
    job: OwnedJob,
    store: StoreDep,
    since_step: Index = 0,
    limit: Annotated[int | None, Query(ge=1, le=1_000_000)] = None,
) -> list[MetricRow]:
    """One row per step, from `since_step` on."""
    return [MetricRow.model_validate(m) for m in store.metrics(job.id, since_step=since_step, limit=limit)]


@router.get("/{job_id}/checkpoints")
def job_checkpoints(
    job: OwnedJob, tenant: CurrentTenant, views: ViewsDep
) -> list[CheckpointPublic]:
    """Committed checkpoints only, oldest first."""
    return [CheckpointPublic.model_validate(c) for c in views.checkpoints(tenant, job.id)]


@router.get("/{job_id}/workers")
def job_workers(job: OwnedJob, tenant: CurrentTenant, views: ViewsDep) -> list[WorkerPublic]:
    return [WorkerPublic.model_validate(w) for w in views.workers(tenant, job.id)]


@router.get("/{job_id}/goodput")
def job_goodput(job: OwnedJob, tenant: CurrentTenant, views: ViewsDep) -> GoodputPublic:
    """Where the job's time since submit went, phase by phase, and its goodput."""
    return GoodputPublic.model_validate(views.goodput(tenant, job.id))


def answered(store: JobStore, job: JobRecord) -> JobPublic:
    """A job a request just wrote, as `GET /v1/jobs/{id}` shows it: a sweep's
    trial read again for its `trial` (a write's record carries none)."""
    if job.sweep is not None and job.trial is None:
        job = store.get_job(job.id) or job
    return JobPublic.model_validate(job)


def listed_tenant(caller: str, asked: str | None) -> str | None:
    """Whose jobs (or usage) a list shows: the caller's own; for the admin,
    `asked`'s or (None) every tenant's. A tenant naming another is refused."""
    if caller == ADMIN_TENANT:
        return asked or None
    if asked not in (None, "", caller):
        raise ApiError(403, "tenant: only the admin key may look at another tenant's jobs", "tenant")
    return caller


def parse_labels(values: list[str] | None) -> tuple[tuple[str, str], ...]:
    """`?label=team=nlp&label=stage=dev`: (key, value) pairs, each checked as a job's label is."""
    pairs = []
    if len(values or ()) > MAX_LABELS:
        raise ApiError(422, f"label: at most {MAX_LABELS} labels to filter on", "label")
    for text in values or ():
        try:
            key, value = parse_label(text)
            LABELS.validate_python({key: value})
        except (ValueError, ValidationError) as e:
            reason = e.errors()[0]["msg"] if isinstance(e, ValidationError) else str(e)
            raise ApiError(422, f"label: {text[:80]!r} is not key=value with a label's key and "
                                f"value ({reason})", "label") from None
        pairs.append((key, value))
    return tuple(dict.fromkeys(pairs))


def parse_states(values: list[str] | None) -> list[JobState] | None:
    """`?state=RUNNING&state=QUEUED` or `?state=RUNNING,QUEUED` (any case)."""
    return parse_state_filter(values, JobState)
